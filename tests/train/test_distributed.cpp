// Data-parallel training (train/distributed.h) against single-process training:
//   - the radix select over ranks equals torch::kthvalue on the union of the ranks' rows, and
//     EQB / quantile balancing over two ranks' shares equal them on the whole batch, exactly;
//   - gradients summed in buckets equal the plain sum of each rank's;
//   - `wren train --nproc 2` gives the loss sequence of one process on the same global batch,
//     a checkpoint of either resumes in the other, and a rank that dies ends the run.
// Ranks of the in-process tests are threads, each with its own process group on loopback.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../run_command.h"
#include "train/balance.h"
#include "train/distributed.h"
#include "train_test_util.h"

namespace wren::train {
namespace {

namespace fs = std::filesystem;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Runs body(dist) on `world` ranks, one thread each, over a fresh loopback group.
void on_ranks(int world, const std::function<void(Dist&)>& body) {
  const int port = free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(world), std::string());
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        DistOptions o;
        o.rank = r;
        o.world = world;
        o.master_port = port;
        o.timeout = std::chrono::milliseconds(30'000);
        Dist dist(o);
        body(dist);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// -0 and +0 are one value to kthvalue, two keys to the radix select: compare values.
torch::Tensor plus_zero(const torch::Tensor& t) { return t + 0.0f; }

// Scores with ties (rounded to 1/8) and both signs, zeros of both signs included.
torch::Tensor tied_scores(int64_t T, int64_t E, uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor s = torch::round(torch::randn({T, E}) * 8) / 8;
  s.index_put_({0, 0}, -0.0f);
  return s;
}

TEST(DistributedBalance, RadixSelectEqualsKthvalue) {
  // One rank with a reduce that does nothing: the radix path, against kthvalue's.
  const AllReduceSum identity = [](torch::Tensor&) {};
  for (uint64_t seed : {1, 2, 3}) {
    const torch::Tensor smooth = torch::randn({53, 7}) * 3, tied = tied_scores(53, 7, seed);
    for (const torch::Tensor& v : {smooth, tied})
      for (int64_t n : {1, 2, 17, 52, 53}) {
        const torch::Tensor want = plus_zero(nth_largest_over_ranks(v, n, {}));
        const torch::Tensor got = plus_zero(nth_largest_over_ranks(v, n, identity));
        EXPECT_TRUE(torch::equal(got, want)) << "n = " << n << "\n" << got << "\n" << want;
      }
  }
  EXPECT_THROW(nth_largest_over_ranks(torch::randn({4, 3}), 5, identity), BalanceError);
}

TEST(DistributedBalance, BalancingOverTwoRanksEqualsTheWholeBatch) {
  // 37 tokens: ranks hold 19 and 18 of them.
  const int64_t T = 37, E = 8, k = 2;
  for (uint64_t seed : {4, 5}) {
    const torch::Tensor scores = seed == 4 ? torch::sigmoid(torch::randn({T, E})) : tied_scores(T, E, seed);
    const torch::Tensor bias = torch::randn({E}) * 0.1;
    const torch::Tensor eqb = plus_zero(eqb_update(scores, bias, k));
    const torch::Tensor quantile = plus_zero(quantile_balance(scores, bias, k));
    std::vector<torch::Tensor> eqb_of(2), quantile_of(2);
    on_ranks(2, [&](Dist& dist) {
      const Shard mine = shard_of(T, dist.rank(), dist.world());
      const torch::Tensor share = scores.narrow(0, mine.begin, mine.end - mine.begin);
      const AllReduceSum reduce = [&](torch::Tensor& t) { dist.all_reduce_sum(t); };
      eqb_of[size_t(dist.rank())] = plus_zero(eqb_update(share, bias, k, reduce));
      quantile_of[size_t(dist.rank())] = plus_zero(quantile_balance(share, bias, k, reduce));
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(eqb_of[size_t(r)].defined());
      EXPECT_TRUE(torch::equal(eqb_of[size_t(r)], eqb)) << "rank " << r << "\n" << eqb_of[size_t(r)] << "\n" << eqb;
      EXPECT_TRUE(torch::equal(quantile_of[size_t(r)], quantile)) << "rank " << r;
    }
  }
}

TEST(DistributedGradients, BucketsSumEveryRanksGradient) {
  // Three tensors of different shapes; a bucket of 64 bytes splits them over several all-reduces.
  const std::vector<std::vector<int64_t>> shapes = {{5, 3}, {7}, {2, 2, 4}};
  // Drawn before the ranks start: their threads share torch's global generator, so seeding
  // it inside them would race.
  std::vector<std::vector<torch::Tensor>> grads(2);
  for (int rank = 0; rank < 2; ++rank)
    for (size_t i = 0; i < shapes.size(); ++i) {
      torch::manual_seed(100 * uint64_t(rank) + i);
      grads[size_t(rank)].push_back(torch::randn(shapes[i]));
    }
  auto grad_of = [&](int rank, size_t i) { return grads[size_t(rank)][i]; };
  std::vector<std::vector<torch::Tensor>> summed(2);
  on_ranks(2, [&](Dist& dist) {
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < shapes.size(); ++i) {
      torch::Tensor p = torch::zeros(shapes[i]).requires_grad_(true);
      p.mutable_grad() = grad_of(dist.rank(), i).clone();
      params.push_back(p);
    }
    dist.all_reduce_gradients(params, 64);
    for (const torch::Tensor& p : params) summed[size_t(dist.rank())].push_back(p.grad().clone());
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(summed[size_t(r)].size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_TRUE(torch::allclose(summed[size_t(r)][i], grad_of(0, i) + grad_of(1, i), 0, 0)) << "tensor " << i;
  }
}

TEST(DistributedOptions, FromTheEnvironment) {
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  DistOptions o = dist_options_from_env();
  EXPECT_EQ(o.world, 4);
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.master_port, 1234);
  ::setenv("RANK", "4", 1);
  try {
    dist_options_from_env();
    ADD_FAILURE() << "RANK 4 of 4 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
  }
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("RANK");
  ::unsetenv("MASTER_PORT");
  o = dist_options_from_env();
  EXPECT_EQ(o.world, 1);
  EXPECT_EQ(o.rank, 0);
}

// ---- End to end, through `wren train`.

using Result = testing_util::CommandResult;

std::string train_command(const TrainOptions& w, const std::string& extra, int steps = 6, int eval_every = 3) {
  return std::string(WREN_BINARY) + " train embla-mini --data " + w.data[0] + " --tokenizer " + w.tokenizer +
         " --heldout doc3.txt --seq-len 16 --batch 4 --steps " + std::to_string(steps) + " --warmup 1 --eval-every " +
         std::to_string(eval_every) + " --eval-rows 4 --seed 3 -t 1 --dtype f32 " + extra;
}

// The losses of a training log, in step order.
std::vector<double> logged_losses(const fs::path& log) {
  std::vector<double> out;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line);
    if (j.contains("step")) out.push_back(j.at("loss").get<double>());
  }
  return out;
}

// The gradient sum over ranks reorders float additions; Muon's Newton-Schulz steps amplify a
// rounding difference a little each step. Over 6 steps of this tiny model the loss differs by
// at most 1.0e-7 relative (measured); a wrong shard or a missing reduction moves it by 1e-2 or more.
constexpr double kLossTolerance = 2e-6;

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want, size_t from = 0) {
  ASSERT_EQ(got.size() + from, want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i + from], kLossTolerance * std::abs(want[i + from])) << "step " << i + from + 1;
}

TEST(DistributedTraining, TwoProcessesGiveTheLossesOfOne) {
  train_test::TempDir dir("dist_losses");
  const TrainOptions w = train_test::tiny_training_workspace(dir.path, "embla-mini");
  const Result one = testing_util::run_command(train_command(w, "--log " + (dir.path / "one.log").string()));
  ASSERT_EQ(one.status, 0) << one.output;
  const Result two = testing_util::run_command(
      train_command(w, "--nproc 2 --log " + (dir.path / "two.log").string() + " -o " + (dir.path / "model").string()));
  ASSERT_EQ(two.status, 0) << two.output;
  const std::vector<double> a = logged_losses(dir.path / "one.log"), b = logged_losses(dir.path / "two.log");
  ASSERT_EQ(a.size(), 6u);
  expect_same_losses(b, a);
  EXPECT_TRUE(fs::exists(dir.path / "model" / "config.json")) << two.output;
  EXPECT_NE(two.output.find("all-reduce:"), std::string::npos) << two.output;
  // Three processes share a batch of 4 unevenly (2, 1, 1): still the same global batch.
  const Result three = testing_util::run_command(train_command(w, "--nproc 3 --log " + (dir.path / "three.log").string()));
  ASSERT_EQ(three.status, 0) << three.output;
  expect_same_losses(logged_losses(dir.path / "three.log"), a);
}

TEST(DistributedTraining, CheckpointsResumeAcrossProcessCounts) {
  train_test::TempDir dir("dist_resume");
  const TrainOptions w = train_test::tiny_training_workspace(dir.path, "embla-mini");
  const Result straight = testing_util::run_command(train_command(w, "--log " + (dir.path / "straight.log").string()));
  ASSERT_EQ(straight.status, 0) << straight.output;
  const std::vector<double> want = logged_losses(dir.path / "straight.log");
  ASSERT_EQ(want.size(), 6u);
  // 2 processes for 3 steps, then 1 to the end; and 1 then 2.
  for (const auto& [first, then] : {std::pair<std::string, std::string>{"--nproc 2", ""}, {"", "--nproc 2"}}) {
    const std::string tag = first.empty() ? "1-2" : "2-1";
    const std::string ck = (dir.path / ("ck" + tag)).string(), log = (dir.path / ("resumed" + tag + ".log")).string();
    const Result a = testing_util::run_command(train_command(w, first + " --stop-after 3 --checkpoint " + ck));
    ASSERT_EQ(a.status, 0) << a.output;
    const Result b = testing_util::run_command(train_command(w, then + " --checkpoint " + ck + " --log " + log));
    ASSERT_EQ(b.status, 0) << b.output;
    expect_same_losses(logged_losses(log), want, 3);
  }
}

TEST(DistributedTraining, ARankThatDiesEndsTheOthers) {
  train_test::TempDir dir("dist_death");
  const TrainOptions w = train_test::tiny_training_workspace(dir.path, "embla-mini");
  const fs::path log = dir.path / "run.log";
  const std::string port = std::to_string(free_port());
  const std::string cmd = train_command(w, "--dist-timeout 10 --log " + log.string(), 100000, 0);
  std::vector<pid_t> ranks;
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " >/dev/null 2>&1").c_str(), (char*)nullptr);
      ::_exit(127);
    }
    ranks.push_back(pid);
  }
  // Wait until both train (rank 0 logs a step only after the first all-reduce), then kill rank 1.
  const auto started = std::chrono::steady_clock::now();
  while (logged_losses(log).empty() && std::chrono::steady_clock::now() - started < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(logged_losses(log).empty()) << "the ranks never took a step";
  // `exec` in the shell, then wren exec-ing wren-train: the pid is the rank itself.
  ::kill(ranks[1], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(ranks[0], &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() - killed < std::chrono::seconds(40))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  if (done == 0) ::kill(ranks[0], SIGKILL), ::waitpid(ranks[0], &status, 0);
  ::waitpid(ranks[1], nullptr, 0);
  ASSERT_EQ(done, ranks[0]) << "rank 0 still ran " << waited << " s after rank 1 died";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "status " << status;
  // The timeout is 10 s; allow for a loaded machine.
  EXPECT_LT(waited, 25.0);
}

}  // namespace
}  // namespace wren::train
