// The thread pool (kernels/threads.h), the parallel regions of the forward pass
// (model/region.h), and what they promise the engine: every item once, exceptions carried
// back, nested and concurrent callers served, and logits that do not depend on the thread
// count, bit for bit, on the architectures of test_architectures.cpp.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "config/model_config.h"
#include "config/parse.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "model/region.h"
#include "runtime/session.h"
#include "test_util.h"

namespace wren {
namespace {

using kernels::ThreadPool;

TEST(ThreadPool, RunsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int round = 0; round < 20; ++round) pool.run_items(n, [&](int64_t i) { hits[size_t(i)]++; });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 20) << threads << " threads, n " << n << " i " << i;
    }
  }
}

// Each thread runs a contiguous share of the items in order, and takes items from the end of
// the other's share once its own is done: with two threads, every thread's items are one run
// up from the start of a share (0 or n / 2), then one run down (what it took from the other).
// Threads taking items in turn (0, 2, 4, ... and 1, 3, 5, ...) fail this.
TEST(ThreadPool, EachThreadStreamsAContiguousShare) {
  ThreadPool pool(2);
  for (int64_t n : {2, 3, 64, 1001}) {
    for (int round = 0; round < 20; ++round) {
      std::mutex mu;
      std::map<std::thread::id, std::vector<int64_t>> ran;
      pool.run_items(n, [&](int64_t i) {
        std::this_thread::sleep_for(std::chrono::microseconds(i % 7));  // uneven items
        std::lock_guard<std::mutex> lock(mu);
        ran[std::this_thread::get_id()].push_back(i);
      });
      int64_t total = 0;
      for (const auto& [id, items] : ran) {
        total += int64_t(items.size());
        size_t up = 1;
        while (up < items.size() && items[up] == items[up - 1] + 1) ++up;
        EXPECT_TRUE(items[0] == 0 || items[0] == n / 2 || up == 1) << "n " << n << ": first item " << items[0];
        for (size_t k = up + 1; k < items.size(); ++k)
          ASSERT_EQ(items[k], items[k - 1] - 1) << "n " << n << ": item " << k << " of a thread";
      }
      EXPECT_EQ(total, n);
    }
  }
}

// run_ranges hands out runs of consecutive items: every item once, no run longer than the
// chunk, and runs of a whole chunk while a share has plenty left (a pool taking one item at a
// time, or a whole share at once, fails). Serially (one thread) f sees [0, n) in one call.
TEST(ThreadPool, RunRangesCoverEveryItemOnceInChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t chunk : {1, 4}) {
      for (int64_t n : {0, 1, 2, 5, 64, 1001}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> longest{0}, runs{0};
        pool.run_ranges(n, chunk, [&](int64_t begin, int64_t end) {
          ASSERT_LT(begin, end);
          runs++;
          for (int64_t i = begin; i < end; ++i) hits[size_t(i)]++;
          for (int64_t l = longest.load(); end - begin > l && !longest.compare_exchange_weak(l, end - begin);) {}
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " threads, n " << n << " i " << i;
        if (n == 0) continue;
        if (threads == 1) {
          EXPECT_EQ(runs.load(), 1);
        } else {
          EXPECT_LE(longest.load(), chunk) << threads << " threads, n " << n;
          if (n >= 4 * chunk * threads) {
            EXPECT_EQ(longest.load(), chunk) << threads << " threads, n " << n;
          }
        }
      }
    }
  }
}

// The runs an owner takes shrink toward the end of its share, so the other thread is never
// left waiting for a whole chunk: 4-item chunks from a share of 11 go 4, 3, 2, 1, 1.
TEST(ThreadPool, OwnerRunsShrinkAtTheEndOfAShare) {
  std::vector<int64_t> taken;
  for (int64_t left = 11; left > 0;) left -= taken.emplace_back(ThreadPool::owner_run(left, 4));
  EXPECT_EQ(taken, (std::vector<int64_t>{4, 3, 2, 1, 1}));
  EXPECT_EQ(ThreadPool::owner_run(100, 1), 1);
  EXPECT_EQ(ThreadPool::owner_run(8, 4), 4);
}

// Items do run on several threads (otherwise every other test here would pass trivially):
// an item that waits until another item has started can only finish if two run at once.
TEST(ThreadPool, RunsItemsConcurrently) {
  ThreadPool pool(2);
  std::atomic<int> started{0};
  std::atomic<bool> overlapped{false};
  pool.run_items(2, [&](int64_t) {
    started++;
    for (int spin = 0; spin < 200000000 && started.load() < 2; ++spin) std::this_thread::yield();
    if (started.load() == 2) overlapped = true;
  });
  EXPECT_TRUE(overlapped.load());
}

TEST(ThreadPool, CarriesExceptionsBackFromAnyThread) {
  ThreadPool pool(3);
  for (int64_t bad : {int64_t(0), int64_t(5), int64_t(299)}) {
    std::atomic<int64_t> ran{0};
    EXPECT_THROW(pool.run_items(300, [&](int64_t i) {
      ran++;
      if (i == bad) throw std::runtime_error("item failed");
    }), std::runtime_error);
    EXPECT_EQ(ran.load(), 300) << "the other items still run";
  }
  std::atomic<int64_t> total{0};
  pool.run_items(10, [&](int64_t) { total++; });  // still usable
  EXPECT_EQ(total.load(), 10);
}

TEST(ThreadPool, NestedCallsRunOnTheCallingThread) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.run_items(30, [&](int64_t) {
    const auto outer = std::this_thread::get_id();
    pool.run_items(7, [&](int64_t) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      total++;
    });
  });
  EXPECT_EQ(total.load(), 30 * 7);
}

// A pool destroyed right after a job: a worker that wakes for the job after the caller ran
// every item itself must still see the destructor's wake-up (it once read the epoch again
// after checking stop_, took the destructor's bump for a job, and slept through it: seen
// once, as a `wren sparsity` that never exited on a loaded machine). A stress test: the race
// needs a preemption within a few instructions, so it catches it only sometimes. A hang
// fails the test after a minute instead of stalling the suite.
TEST(ThreadPool, ShutsDownRightAfterAJob) {
  auto cycles = std::async(std::launch::async, [] {
    for (int i = 0; i < 5000; ++i) {
      ThreadPool pool(2);
      std::atomic<int> ran{0};
      pool.run_items(2, [&](int64_t) { ran.fetch_add(1); });
      if (ran.load() != 2) return false;
    }
    return true;
  });
  if (cycles.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "a pool's destructor did not return within a minute";
    std::fflush(stdout);
    std::_Exit(1);  // the stuck thread cannot be joined
  }
  EXPECT_TRUE(cycles.get());
}

TEST(ThreadPool, OneSharedPoolPerThreadCount) {
  EXPECT_EQ(&ThreadPool::shared(2), &ThreadPool::shared(2));
  EXPECT_NE(&ThreadPool::shared(2), &ThreadPool::shared(3));
  EXPECT_EQ(ThreadPool::shared(3).size(), 3);
}

// Two callers at once: one's jobs run on the workers, the other's (finding the pool busy)
// on its own thread; every job is complete and right.
TEST(ThreadPool, ServesTwoCallersAtOnce) {
  ThreadPool& pool = ThreadPool::shared(2);
  auto caller = [&](int64_t seed, std::atomic<int>& wrong) {
    for (int job = 0; job < 300; ++job) {
      const int64_t n = 1 + (seed * 31 + job * 17) % 97;
      std::vector<int64_t> out(size_t(n), -1);
      pool.run_items(n, [&](int64_t i) { out[size_t(i)] = i * seed; });
      for (int64_t i = 0; i < n; ++i) wrong += out[size_t(i)] != i * seed;
    }
  };
  std::atomic<int> wrong{0};
  std::thread a(caller, 3, std::ref(wrong)), b(caller, 5, std::ref(wrong));
  a.join(), b.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A region gives each product exactly what the whole-matrix kernel gives (the row items
// change where rows are cut, never how a row is computed), for odd shapes and every type.
TEST(Region, ProductsEqualWholeMatrixKernels) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  ThreadPool pool(3);
  for (auto type : {kernels::DType::f32, kernels::DType::bf16, kernels::DType::q8, kernels::DType::q4}) {
    const int64_t shapes[][2] = {{1, 64}, {17, 96}, {1000, 64}, {3001, 160}, {40, 4096}};
    std::vector<kernels::Matrix> mats;
    std::vector<std::vector<float>> xs, ys, want;
    for (auto [rows, cols] : shapes) {
      const std::vector<float> w = random(size_t(rows * cols));
      mats.push_back(kernels::encode_matrix(w.data(), rows, cols, type));
      xs.push_back(random(size_t(cols)));
      ys.push_back(random(size_t(rows)));
    }
    std::vector<Product> products;
    for (size_t i = 0; i < mats.size(); ++i) {
      want.push_back(ys[i]);
      const bool acc = i % 2 == 1;
      if (acc)
        kernels::matvec_add(mats[i].view(), xs[i].data(), 0.75f, want[i].data());
      else
        kernels::matvec(mats[i].view(), xs[i].data(), want[i].data());
      products.push_back({mats[i].view(), xs[i].data(), ys[i].data(), 0.75f, acc});
    }
    // absent products, between others and last, are skipped
    products.insert(products.begin() + 2, Product{MatrixView{}, nullptr, nullptr});
    products.push_back({MatrixView{}, nullptr, nullptr});
    run_products(products, &pool);
    for (size_t i = 0; i < mats.size(); ++i)
      EXPECT_EQ(ys[i], want[i]) << kernels::to_string(type) << " product " << i;
  }
}

// The epilogue of run_products (RowsDone) sees every row of every present product exactly
// once, with its index in the list, after the row holds its final value: y starts as NaN,
// and each row the epilogue is given must already equal the whole-matrix kernel's.
TEST(Region, EpilogueSeesEachRowOnceAfterItIsWritten) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(3);
  const int64_t shapes[][2] = {{1000, 64}, {3, 96}, {5000, 160}};
  std::vector<kernels::Matrix> mats;
  std::vector<std::vector<float>> xs, ys, want;
  std::vector<Product> products;
  for (auto [rows, cols] : shapes) {
    std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols));
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng);
    mats.push_back(kernels::encode_matrix(w.data(), rows, cols, kernels::DType::q8));
    xs.push_back(x), ys.emplace_back(size_t(rows), NAN), want.emplace_back(size_t(rows));
    kernels::matvec(mats.back().view(), xs.back().data(), want.back().data());
  }
  for (size_t i = 0; i < mats.size(); ++i) products.push_back({mats[i].view(), xs[i].data(), ys[i].data()});
  products.insert(products.begin() + 1, Product{});  // list index 1: absent, never seen
  const std::array<size_t, 4> of_list = {0, size_t(-1), 1, 2};  // list index -> mats index
  std::vector<std::vector<std::atomic<int>>> seen;
  for (const auto& y : ys) seen.emplace_back(y.size());
  std::atomic<int> early{0}, absent{0};
  auto check = [&](int64_t i, int64_t r0, int64_t r1) {
    if (of_list[size_t(i)] == size_t(-1)) return void(absent.fetch_add(1));
    const size_t m = of_list[size_t(i)];
    for (int64_t r = r0; r < r1; ++r) {
      seen[m][size_t(r)].fetch_add(1);
      if (!(ys[m][size_t(r)] == want[m][size_t(r)])) early.fetch_add(1);
    }
  };
  run_products(products, &pool, rows_done(check));
  EXPECT_EQ(early.load(), 0) << "rows handed to the epilogue before their value";
  EXPECT_EQ(absent.load(), 0);
  for (size_t m = 0; m < seen.size(); ++m)
    for (size_t r = 0; r < seen[m].size(); ++r) ASSERT_EQ(seen[m][r].load(), 1) << "matrix " << m << " row " << r;
}

// A run of pieces maps to one row range per output it touches; an output without rows has
// no pieces and is passed over. Outputs: 20 rows in pieces of 16, none, 10 rows in pieces of 4.
TEST(Region, PieceRunsAreRowRangesOfEachOutput) {
  const int64_t first[] = {0, 2, 2, 5}, step[] = {16, 8, 4}, rows[] = {20, 0, 10};
  const auto ranges = [&](int64_t begin, int64_t end) {
    std::vector<std::array<int64_t, 3>> got;
    piece_rows(first, step, rows, 3, begin, end, [&](int64_t k, int64_t r0, int64_t r1) { got.push_back({k, r0, r1}); });
    return got;
  };
  using R = std::vector<std::array<int64_t, 3>>;
  EXPECT_EQ(ranges(0, 5), (R{{0, 0, 20}, {2, 0, 10}}));
  EXPECT_EQ(ranges(1, 4), (R{{0, 16, 20}, {2, 0, 8}}));
  EXPECT_EQ(ranges(0, 1), (R{{0, 0, 16}}));
  EXPECT_EQ(ranges(4, 5), (R{{2, 8, 10}}));
  EXPECT_EQ(ranges(2, 3), (R{{2, 0, 4}}));
}

TEST(Region, ItemsAreWholeCacheLinesOfRows) {
  const int64_t n = 10000;
  const std::vector<float> w(size_t(n) * 64, 0.5f);
  for (auto type : {kernels::DType::f32, kernels::DType::q8}) {
    const kernels::Matrix m = kernels::encode_matrix(w.data(), n, 64, type);
    const int64_t rows = item_rows(m.view());
    EXPECT_EQ(rows % kItemRowAlign, 0);
    EXPECT_LE(rows * (m.view().bytes() / n), kItemBytes);
    EXPECT_GT(n / rows, 1) << "a " << n << "-row matrix must split into several items";
  }
}

// ---- The engine: the same bits with any thread count --------------------------------

std::vector<float> run_tokens(const std::shared_ptr<const Model>& model, int threads, int prompt, int steps) {
  Session s(model, {.threads = threads});
  const auto tokens = testing_util::random_tokens(prompt + steps, model->config.vocab_size, 9);
  std::vector<float> logits(size_t(s.vocab_rows())), all;
  s.prefill(std::span(tokens.data(), size_t(prompt)), logits.data());
  all = logits;
  for (int i = 0; i < steps; ++i) {
    s.decode(tokens[size_t(prompt + i)], logits.data());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The minis, and wider copies (d_model 384, q8) whose products split into many row items.
class ThreadCount : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ThreadCount, LogitsDoNotDependOnIt) {
  const auto& [name, width] = GetParam();
  ModelConfig c = load_preset(name);
  if (width) c.d_model = width;
  const auto model = testing_util::random_model(c, 4, width ? kernels::DType::q8 : kernels::DType::f32);
  const std::vector<float> one = run_tokens(model, 1, 9, 12);
  for (int threads : {2, 3}) EXPECT_TRUE(same_bits(run_tokens(model, threads, 9, 12), one)) << threads << " threads";
}

INSTANTIATE_TEST_SUITE_P(Engine, ThreadCount,
                         ::testing::Combine(::testing::Values("embla-mini", "nenya-mini"), ::testing::Values(0, 384)),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                           for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

// Sessions on two threads at once share the process's pool and still give the logits of
// one session run alone.
TEST(ThreadCount, SessionsOnTwoThreadsShareThePool) {
  ModelConfig c = load_preset("nenya-mini");
  c.d_model = 256;
  const auto model = testing_util::random_model(c, 4, kernels::DType::q8);
  const std::vector<float> alone = run_tokens(model, 2, 5, 10);
  std::vector<float> a, b;
  std::thread ta([&] { a = run_tokens(model, 2, 5, 10); }), tb([&] { b = run_tokens(model, 2, 5, 10); });
  ta.join(), tb.join();
  EXPECT_TRUE(same_bits(a, alone));
  EXPECT_TRUE(same_bits(b, alone));
}

}  // namespace
}  // namespace wren
