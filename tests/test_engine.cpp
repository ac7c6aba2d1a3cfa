// The engine on a randomly initialised small Embla (embla-mini): quantised weights, padding
// rows, and the mechanisms' defining properties on hand-made inputs. Early exit and cached
// decode, for every architecture, are in test_architectures.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/parse.h"
#include "model/attention.h"
#include "model/attn_residuals.h"
#include "model/engram.h"
#include "model/model.h"
#include "model/rope.h"
#include "runtime/session.h"
#include "temp_dir.h"
#include "test_util.h"

namespace wren {
namespace {

using testing_util::random_tokens;

std::shared_ptr<const Model> random_model(const std::string& preset, kernels::DType type = kernels::DType::f32) {
  return testing_util::random_model(load_preset(preset), 1, type);
}

TEST(Engine, QuantisedWeightsStayCloseToF32) {
  auto f32 = random_model("embla-mini", kernels::DType::f32);
  auto q8 = random_model("embla-mini", kernels::DType::q8);
  auto tokens = random_tokens(40, f32->config.vocab_size, 5);
  Session a(f32), b(q8);
  std::vector<float> la(size_t(a.vocab_rows())), lb(la.size());
  a.prefill(tokens, la.data());
  b.prefill(tokens, lb.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < size_t(f32->config.vocab_size); ++i) num += (la[i] - lb[i]) * (la[i] - lb[i]), den += la[i] * la[i];
  EXPECT_LT(std::sqrt(num / den), 0.05) << "relative logit error of 8-bit weights";
  EXPECT_GT(num, 0.0) << "q8 weights gave bit-identical logits: were they really quantised?";
}

TEST(Engine, PaddingRowsAreNeverLogits) {
  ModelConfig c = load_preset("embla-mini");
  c.vocab_pad = 3;
  auto model = load_model(c, std::make_shared<OwnedWeights>(init_weights(c, build_weight_map(c), 2, kernels::DType::f32)));
  Session s(model);
  std::vector<float> logits(size_t(s.vocab_rows()));
  int32_t tok = 3;
  s.prefill(std::span(&tok, 1), logits.data());
  for (int v = c.vocab_size; v < c.rows(); ++v) EXPECT_EQ(logits[size_t(v)], -INFINITY);
  EXPECT_THROW(s.decode(c.rows(), logits.data()), std::out_of_range);
}

TEST(Sparse, SelectionSemantics) {
  std::vector<int32_t> out(64);
  // All keys when there are top_k + recent or fewer.
  std::vector<float> few{0.5f, -1.f, 2.f};
  ASSERT_EQ(select_keys(few.data(), 3, 2, 1, out.data()), 3);
  // Fewer than top_k positive: keys scored just below zero come next.
  std::vector<float> s(20, -5.0f);
  s[2] = 0.7f, s[9] = -0.01f, s[4] = -0.02f, s[11] = 0.1f;
  int64_t n = select_keys(s.data(), 20, 4, 3, out.data());
  std::set<int32_t> got(out.begin(), out.begin() + n);
  EXPECT_EQ(got, (std::set<int32_t>{2, 4, 9, 11, 17, 18, 19}));
  // More positive than top_k: only the highest; the recent window is always in.
  std::vector<float> pos(20);
  for (int j = 0; j < 20; ++j) pos[size_t(j)] = 1.0f + float(j % 10);  // highest at 9 and 19, then 8, 18
  n = select_keys(pos.data(), 20, 3, 2, out.data());
  got = std::set<int32_t>(out.begin(), out.begin() + n);
  EXPECT_EQ(got, (std::set<int32_t>{8, 9, 18, 19}));
  EXPECT_TRUE(std::is_sorted(out.begin(), out.begin() + n));
}

TEST(Relu2, ZeroWeightForKeysScoredAtOrBelowZero) {
  std::vector<float> s{-1.0f, 0.0f, 1e-8f, 0.5f, -0.0f, 2.0f};
  relu2_weights(s.data(), int64_t(s.size()));
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(s[4], 0.0f);
  EXPECT_GT(s[2], 0.0f);
  EXPECT_FLOAT_EQ(s[3], 0.25f);
  EXPECT_FLOAT_EQ(s[5], 4.0f);
}

TEST(AttnResiduals, MixWeightsSumToOne) {
  const int d = 16;
  std::mt19937 rng(3);
  std::normal_distribution<float> n01;
  MixWeights w{Vec(d), Vec(d, 1.0f)};
  for (auto& x : w.query) x = n01(rng);
  std::vector<std::vector<float>> src(5, std::vector<float>(d));
  ResidualSources sources;
  for (auto& v : src) {
    for (auto& x : v) x = n01(rng);
    sources.x.push_back(v.data());
  }
  std::vector<float> weights(5), h(d), tmp(d);
  attn_res_mix(w, sources, d, 1e-6f, false, weights.data(), h.data(), tmp.data());
  float sum = 0;
  for (float x : weights) {
    sum += x;
    EXPECT_GT(x, 0.0f);
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
  for (int i = 0; i < d; ++i) {
    float expect = 0;
    for (int s = 0; s < 5; ++s) expect += weights[size_t(s)] * src[size_t(s)][size_t(i)];
    EXPECT_NEAR(h[size_t(i)], expect, 1e-5f);
  }
  // A zero pseudo-query (the initial state) mixes uniformly.
  MixWeights zero{Vec(d, 0.0f), Vec(d, 1.0f)};
  attn_res_mix(zero, sources, d, 1e-6f, false, weights.data(), h.data(), tmp.data());
  for (float x : weights) EXPECT_NEAR(x, 0.2f, 1e-6f);
}

TEST(Engram, LookupReadsExactlyTheRowsItNames) {
  ModelConfig c = load_preset("embla-mini");
  const EngramSpec& e = *c.engram;
  EngramHasher hasher(e);
  const int64_t rows = hasher.total_rows(), cols = e.row_dim;
  // A table whose every row holds its own index: the lookup's output tells which rows it read.
  std::vector<float> values(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) values[size_t(r * cols + j)] = float(r) + 0.001f * float(j);
  auto table = kernels::MatrixView::f32(values.data(), rows, cols);
  std::vector<int32_t> ctx{EngramHasher::kPad, 17, 42};
  std::vector<float> g(size_t(e.width()));
  std::vector<int64_t> read(size_t(hasher.tables())), named(read.size());
  engram_lookup(hasher, table, ctx, g.data(), read);
  hasher.rows(ctx, named);
  EXPECT_EQ(read, named);
  for (int t = 0; t < hasher.tables(); ++t)
    for (int64_t j = 0; j < cols; ++j) EXPECT_FLOAT_EQ(g[size_t(t * cols + j)], float(named[size_t(t)]) + 0.001f * float(j));
}

// request_engram_rows on a table mapped from a file the page cache has dropped: the pages of
// the requested rows are read in (mincore), a page between them is not.
TEST(Engram, RequestedRowsOfAFileAreReadIn) {
  const long page = sysconf(_SC_PAGESIZE);
  const int64_t rows = 64, cols = page / int64_t(sizeof(float));  // one row per page
  testing_util::TempDir dir;
  const std::string path = dir / "table.bin";
  const std::vector<float> values(size_t(rows * cols), 0.5f);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  const size_t bytes = values.size() * sizeof(float);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  const auto resident = [&](int64_t row) {
    unsigned char in = 0;
    EXPECT_EQ(::mincore(static_cast<char*>(map) + row * page, size_t(page), &in), 0);
    return (in & 1) != 0;
  };
  ASSERT_FALSE(resident(3) || resident(40)) << "the page cache kept the file: nothing to test";
  const auto table = kernels::MatrixView::f32(static_cast<const float*>(map), rows, cols);
  const std::vector<int64_t> wanted{3, 40};
  EXPECT_EQ(request_engram_rows(table, wanted), double(2 * page));
  // The reads are asynchronous: wait for them (a read of two pages, far below this bound).
  for (int i = 0; i < 400 && !(resident(3) && resident(40)); ++i) ::usleep(5000);
  EXPECT_TRUE(resident(3));
  EXPECT_TRUE(resident(40));
  EXPECT_FALSE(resident(20)) << "a row nobody asked for was read in";
  ::munmap(map, bytes);
  ::close(fd);
}

// A session requests, at each token, every engram row its step reads: Embla's residual
// engram and each of Nenya's gated engram layers, values and (where stored) scales.
TEST(Engram, SessionRequestsEveryRowOfEachStep) {
  for (const char* preset : {"embla-mini", "nenya-mini"}) {
    auto model = random_model(preset, kernels::DType::q8);
    double per_token = 0;
    const auto add = [&](const EngramHasher& h, const MatrixView& t) {
      const int64_t scales = t.scales ? t.groups() * int64_t(sizeof(kernels::F16)) : 0;
      per_token += double(h.tables()) * double(t.row_bytes() + scales);
    };
    if (model->engram) add(*model->engram, model->engram_tables);
    for (const LayerWeights& w : model->layers)
      if (w.engram_hasher) add(*w.engram_hasher, w.engram.tables);
    ASSERT_GT(per_token, 0) << preset << " has no engram";
    Session s(model);
    std::vector<float> logits(size_t(s.vocab_rows()));
    const std::vector<int32_t> tokens = random_tokens(5, model->config.vocab_size, 3);
    s.prefill(tokens, logits.data());
    s.decode(7, logits.data());
    EXPECT_EQ(s.engram_bytes_requested(), 6 * per_token) << preset;
  }
}

}  // namespace
}  // namespace wren

namespace wren {
namespace {

// YaRN (DeepSeek-V2 settings): the fastest-rotating dimensions keep their frequency, the
// slowest are interpolated by the factor, and the softmax scale grows by m(s, k)^2.
TEST(Rope, YarnFrequenciesAndScales) {
  Rope r;
  r.theta = 10000;
  r.yarn_factor = 40;
  r.yarn_mscale = 0.707;
  r.yarn_mscale_all_dim = 0.707;
  r.yarn_original_context = 4096;
  const int dim = 64;
  RopeTable t = rope_table(r, dim);
  ASSERT_EQ(t.inv_freq.size(), size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const double base = std::pow(10000.0, -2.0 * i / dim);
    const double wavelength = 2 * M_PI / base;
    // Fewer than beta_slow = 1 rotations over the original context: fully interpolated.
    if (wavelength > 4096) {
      EXPECT_NEAR(t.inv_freq[size_t(i)], base / 40, 1e-6 * base) << i;
    }
    // More than beta_fast = 32 rotations: untouched.
    if (4096 / wavelength > 32) {
      EXPECT_NEAR(t.inv_freq[size_t(i)], base, 1e-6 * base) << i;
    }
    EXPECT_LE(t.inv_freq[size_t(i)], base * (1 + 1e-6));
    EXPECT_GE(t.inv_freq[size_t(i)], base / 40 * (1 - 1e-6));
  }
  const double m = 0.1 * 0.707 * std::log(40.0) + 1;
  EXPECT_FLOAT_EQ(t.magnitude, 1.0f);  // mscale == mscale_all_dim
  EXPECT_NEAR(t.score_scale, m * m, 1e-6);
  r.yarn_mscale_all_dim = 0;  // gpt-oss: the factor lands on cos and sin instead
  t = rope_table(r, dim);
  EXPECT_NEAR(t.magnitude, m, 1e-6);
  EXPECT_FLOAT_EQ(t.score_scale, 1.0f);
}

}  // namespace
}  // namespace wren
