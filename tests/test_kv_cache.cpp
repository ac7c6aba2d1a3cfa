// The KV cache's storage (f32, bf16, q8: model/kv_cache.h), its size against the explorer's,
// the group kernels that read each cache row once for all query heads of a KV group against
// plain per-head loops, V-skip's poison test, and q8 KV's cost on the shipped model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "config/parse.h"
#include "explore/cost_model.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "runtime/model_files.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace wren {
namespace {

using testing_util::normal;

// Round trip of one row per type: f32 exact; bf16 within half an ulp of 8 bits, f16 of 11 (values
// here are normal f16s); q8 within
// s / 2 of each value, s = max|x| / 127 of its group of 32 (rounded up to f16: at most
// 2^-11 relative more), computed here from the row itself.
TEST(KvRows, StoresEachTypeWithinItsRounding) {
  const int width = 96;  // three groups of 32
  const std::vector<float> x = normal(width, 2.0f, 3);
  for (KvType t : {KvType::f32, KvType::bf16, KvType::f16, KvType::q8}) {
    SCOPED_TRACE(to_string(t));
    KvRows rows;
    rows.init(t, width, 32, 3);
    rows.write(2, x.data());
    std::vector<float> buf(width);
    const float* y = rows.read(2, 0, width, buf.data());
    for (int i = 0; i < width; ++i) {
      float bound = 0;
      if (t == KvType::bf16) bound = std::fabs(x[size_t(i)]) * 0x1p-8f;
      if (t == KvType::f16) bound = std::fabs(x[size_t(i)]) * 0x1p-11f;
      if (t == KvType::q8) {
        float top = 0;
        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) top = std::max(top, std::fabs(x[size_t(j)]));
        bound = top / 127 * (1 + 0x1p-10f) / 2;
      }
      ASSERT_LE(std::fabs(y[i] - x[size_t(i)]), bound) << i;
    }
    // A part of the row (one head) reads the same values.
    std::vector<float> part(32);
    const float* z = rows.read(2, 32, 32, part.data());
    for (int i = 0; i < 32; ++i) EXPECT_EQ(z[i], y[32 + i]);
    const double expect = t == KvType::f32 ? 4.0 * width : t == KvType::q8 ? width + 2.0 * width / 32 : 2.0 * width;
    EXPECT_EQ(rows.bytes_per_row(), expect);
  }
  EXPECT_THROW(parse_kv_type("int8"), std::invalid_argument);
  KvRows bad;
  EXPECT_THROW(bad.init(KvType::q8, 40, 32, 1), std::invalid_argument);
  // f16 holds up to 65504 (65519 rounds to it); past that a write is refused, not made inf.
  KvRows f16;
  f16.init(KvType::f16, 2, 2, 1);
  const float fits[2] = {65519.0f, -3.0f}, beyond[2] = {1.0f, -65520.0f};
  f16.write(0, fits);
  std::vector<float> back(2);
  EXPECT_EQ(f16.read(0, 0, 2, back.data())[0], 65504.0f);
  EXPECT_THROW(f16.write(0, beyond), kernels::KernelError);
  // A cache whose row is refused holds no new position.
  KvCache cache;
  cache.init(1, 2, 4, false, KvType::f16);
  cache.append(fits, fits);
  EXPECT_THROW(cache.append(fits, beyond), kernels::KernelError);
  EXPECT_EQ(cache.count, 1);
}

// Rows of three heads stored head-major: each head's part of each row reads back as written
// (within the type's rounding, checked above; here against one-head rows of the same values),
// a tile of one head's rows holds those rows in order, and consecutive rows of a head are
// consecutive in memory (what lets a step stream a head's context).
TEST(KvRows, HeadMajorRowsReadAsWrittenAndLieInOneRun) {
  const int heads = 3, n = 32, rows = 5;
  for (KvType t : {KvType::f32, KvType::bf16, KvType::f16, KvType::q8}) {
    SCOPED_TRACE(to_string(t));
    KvRows all;
    all.init(t, heads * n, n, rows, heads);
    std::vector<KvRows> one(heads);
    for (auto& h : one) h.init(t, n, n, rows);
    std::vector<std::vector<float>> x;
    for (int r = 0; r < rows; ++r) {
      x.push_back(normal(heads * n, 1.5f, uint64_t(40 + r)));
      all.write(r, x.back().data());
      for (int h = 0; h < heads; ++h) one[size_t(h)].write(r, x.back().data() + h * n);
    }
    std::vector<float> a(n), b(n);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h) {
        const float* got = all.read(r, h * n, n, a.data());
        const float* want = one[size_t(h)].read(r, 0, n, b.data());
        for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << r << " " << h << " " << i;
      }
    EXPECT_THROW(all.read(0, n / 2, n, a.data()), std::logic_error);  // crosses two head rows
    KvTile tile;
    all.to_tile(1, rows - 1, 2, n, tile, 0);
    ASSERT_EQ(tile.type, t);
    for (int j = 0; j < rows - 1; ++j) {
      const float* want = one[2].read(1 + j, 0, n, b.data());
      for (int i = 0; i < n; ++i) {
        const float got = t == KvType::q8     ? tile.scale[j] * float(tile.q8[j][i])
                          : t == KvType::bf16 ? kernels::bf16_to_f32(tile.bf16[j][i])
                          : t == KvType::f16  ? kernels::f16_to_f32(tile.f16[j][i])
                                              : tile.f32[j][i];
        ASSERT_EQ(got, want[i]) << j << " " << i;
      }
      if (j == 0) continue;
      if (t == KvType::q8) {
        EXPECT_EQ(tile.q8[j], tile.q8[j - 1] + n);
      }
      if (t == KvType::bf16) {
        EXPECT_EQ(tile.bf16[j], tile.bf16[j - 1] + n);
      }
      if (t == KvType::f16) {
        EXPECT_EQ(tile.f16[j], tile.f16[j - 1] + n);
      }
      if (t == KvType::f32) {
        EXPECT_EQ(tile.f32[j], tile.f32[j - 1] + n);
      }
    }
  }
  KvRows bad;
  EXPECT_THROW(bad.init(KvType::q8, 96, 32, 1, 2), std::invalid_argument);  // a head row of 48
}

ModelConfig preset(const std::string& name) { return load_preset(name); }

// The q8 group the engine uses for a config: the head row of its K/V caches, the gcd of the
// latent and shared-key widths for MLA (model/kv_cache.h); the configs here have one.
int q8_group(const ModelConfig& c) {
  std::set<int> groups;
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    if (m.kind == MixerKind::mla) groups.insert(std::gcd(m.kv_lora_rank, m.qk_rope_dim));
    if (c.has_cache(i) && (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention)) groups.insert(m.head_dim);
  }
  EXPECT_EQ(groups.size(), 1u) << c.name;
  return groups.empty() ? 0 : *groups.begin();
}

// The engine's allocation per token of context equals the explorer's figure for the same
// storage: f32, bf16, f16, and q8 = the explorer's "int8:gG" with the engine's group G.
TEST(KvCache, BytesPerTokenEqualTheExplorers) {
  for (const char* name : {"embla-1", "embla-small", "llama-3.1-8b", "deepseek-v2-lite", "olmoe-1b-7b", "nenya"}) {
    const ModelConfig c = preset(name);
    const std::pair<KvType, std::string> types[] = {
        {KvType::f32, "f32"}, {KvType::bf16, "bf16"}, {KvType::f16, "f16"}, {KvType::q8, "int8:g" + std::to_string(q8_group(c))}};
    for (const auto& [type, precision] : types) {
      SCOPED_TRACE(std::string(name) + " " + precision);
      const double engine = Session::cache_bytes_per_token(c, type);
      EXPECT_GT(engine, 0.0);
      EXPECT_DOUBLE_EQ(engine, explore::cache_bytes_per_token(c, explore::parse_precision(precision)));
    }
  }
  // The figure: Embla 1 at 8-bit, 2.6 KB per token (5 full layers x K and V x 2 KV
  // heads x 128 values x (1 + 2 / 128) bytes).
  EXPECT_DOUBLE_EQ(Session::cache_bytes_per_token(preset("embla-1"), KvType::q8), 2600.0);
}

// A session's own caches, as allocated, grow by the same figure (small models; embla-small's
// shape with a shorter context, so its window stays a ring).
TEST(KvCache, SessionAllocationEqualsTheFigure) {
  for (const char* name : {"embla-small", "nenya-mini"}) {
    const ModelConfig c = preset(name);
    auto model = testing_util::random_model(c, 1, kernels::DType::q8);
    for (KvType t : {KvType::f32, KvType::bf16, KvType::f16, KvType::q8}) {
      SCOPED_TRACE(std::string(name) + " " + to_string(t));
      Session s(model, {.context = c.context_length, .kv = t});
      EXPECT_EQ(s.kv_type(), t);
      EXPECT_DOUBLE_EQ(s.cache_bytes_per_token(), Session::cache_bytes_per_token(c, t));
    }
  }
  // The default rule: f16 when it fits the budget, q8 otherwise.
  const ModelConfig c = preset("embla-1");
  const double f16 = Session::cache_bytes_per_token(c, KvType::f16);
  EXPECT_EQ(Session::default_kv_type(c, 1000, f16 * 1000), KvType::f16);
  EXPECT_EQ(Session::default_kv_type(c, 1001, f16 * 1000), KvType::q8);
}

// --- The group kernels ----------------------------------------------------------------

struct GroupCase {
  int kv_heads, head_dim, group;
  int64_t n;
};

// A cache of n random keys and values; also returns the values it holds, read back.
KvCache random_cache(const GroupCase& g, KvType t, uint32_t seed) {
  KvCache cache;
  cache.init(g.kv_heads, g.head_dim, g.n, false, t);
  const int dim = g.kv_heads * g.head_dim;
  const std::vector<float> k = normal(size_t(g.n * dim), 1.0f, seed), v = normal(size_t(g.n * dim), 1.0f, seed + 1);
  for (int64_t j = 0; j < g.n; ++j) cache.append(k.data() + j * dim, v.data() + j * dim);
  return cache;
}

// The plain per-head ReLU^2 attention of head h of KV group kv over the cache's stored
// values (read one at a time through the cache): o = sum_j w_j v_j / (c + sum_j w_j).
std::vector<double> plain_relu2(const KvCache& cache, int kv, const float* q, int64_t n, double c) {
  const int dh = cache.head_dim;
  std::vector<float> buf(static_cast<size_t>(dh));
  std::vector<double> o(size_t(dh), 0.0);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = cache.key(j, kv, buf.data());
    double s = 0;
    for (int i = 0; i < dh; ++i) s += double(q[i]) * k[i];
    s /= std::sqrt(double(dh));
    const double w = s > 0 ? s * s : 0.0;
    if (w == 0) continue;
    sum += w;
    const float* v = cache.value(j, kv, buf.data());
    for (int i = 0; i < dh; ++i) o[size_t(i)] += w * v[i];
  }
  for (double& x : o) x /= c + sum;
  return o;
}

// relu2_group (the chunk kernels one after another) against plain_relu2, for odd sizes, key
// counts within one chunk and across chunk bounds, every storage type, on every SIMD target.
TEST(KvKernels, Relu2GroupEqualsPlainPerHeadAttention) {
  const GroupCase cases[] = {{2, 16, 2, 37}, {1, 24, 3, 9}, {3, 32, 4, 70}, {1, 8, 1, 1}, {1, 16, 2, kChunkKeys}, {2, 8, 3, 2 * kChunkKeys + 13}};
  testing_util::for_each_target([&] {
    for (const GroupCase& g : cases)
      for (KvType t : {KvType::f32, KvType::bf16, KvType::f16, KvType::q8}) {
        SCOPED_TRACE(std::to_string(g.head_dim) + "x" + std::to_string(g.group) + " n=" + std::to_string(g.n) + " " +
                     to_string(t));
        const KvCache cache = random_cache(g, t, 5);
        AttentionScratch s;
        s.scores.resize(size_t(g.group * g.n));
        s.reserve_chunks(1, g.group, g.head_dim, g.n);
        const std::vector<float> q = normal(size_t(g.group * g.head_dim), 1.0f, 9);
        for (int kv = 0; kv < g.kv_heads; ++kv) {
          std::vector<float> o(static_cast<size_t>(g.group * g.head_dim));
          relu2_group(cache, kv, q.data(), g.group, g.n, 1.0f, s, o.data());
          for (int h = 0; h < g.group; ++h) {
            const std::vector<double> ref = plain_relu2(cache, kv, q.data() + h * g.head_dim, g.n, 1.0);
            for (int i = 0; i < g.head_dim; ++i) ASSERT_NEAR(o[size_t(h * g.head_dim + i)], ref[size_t(i)], 1e-5) << h;
          }
        }
      }
  });
}

// V-skip's poison test: NaN in the V rows of every key that all heads of the group weight
// zero leaves the output unchanged; NaN in a row that one head weights makes it NaN (the
// test can fail).
TEST(KvKernels, VSkipNeverReadsRowsNoHeadWeights) {
  const GroupCase g{1, 16, 2, kChunkKeys + 44};  // two chunks
  const int dh = g.head_dim;
  const std::vector<float> k = normal(size_t(g.n * dh), 1.0f, 21), v = normal(size_t(g.n * dh), 1.0f, 22);
  const std::vector<float> q = normal(size_t(g.group * dh), 1.0f, 23);
  // Which keys some head scores above zero, computed here.
  std::vector<bool> used(size_t(g.n), false);
  for (int64_t j = 0; j < g.n; ++j)
    for (int h = 0; h < g.group; ++h) {
      double s = 0;
      for (int i = 0; i < dh; ++i) s += double(q[size_t(h * dh + i)]) * k[size_t(j * dh + i)];
      if (s > 0) used[size_t(j)] = true;
    }
  const int64_t unused = std::count(used.begin(), used.end(), false);
  ASSERT_GT(unused, 4) << "pick another seed: too few keys all heads weight zero";
  ASSERT_LT(unused, g.n);
  auto run = [&](const std::vector<float>& values, VReads* reads) {
    KvCache cache;
    cache.init(1, dh, g.n, false, KvType::f32);
    for (int64_t j = 0; j < g.n; ++j) cache.append(k.data() + j * dh, values.data() + j * dh);
    AttentionScratch s;
    s.scores.resize(size_t(g.group * g.n));
    s.reserve_chunks(1, g.group, dh, g.n);
    std::vector<float> o(static_cast<size_t>(g.group * dh));
    relu2_group(cache, 0, q.data(), g.group, g.n, 1.0f, s, o.data());
    if (reads) *reads = s.v_reads;
    return o;
  };
  VReads reads;
  const std::vector<float> clean = run(v, &reads);
  EXPECT_EQ(reads.skipped, unused);
  EXPECT_EQ(reads.read, g.n - unused);
  EXPECT_DOUBLE_EQ(reads.bytes_skipped, double(unused) * dh * sizeof(float));
  std::vector<float> poisoned = v;
  for (int64_t j = 0; j < g.n; ++j)
    if (!used[size_t(j)]) std::fill_n(poisoned.begin() + j * dh, dh, NAN);
  const std::vector<float> after = run(poisoned, nullptr);
  for (size_t i = 0; i < clean.size(); ++i) ASSERT_EQ(after[i], clean[i]) << i;
  // Poison one row that some head uses: the output must notice.
  std::vector<float> wrong = v;
  const int64_t j = std::find(used.begin(), used.end(), true) - used.begin();
  std::fill_n(wrong.begin() + j * dh, dh, NAN);
  const std::vector<float> broken = run(wrong, nullptr);
  EXPECT_TRUE(std::any_of(broken.begin(), broken.end(), [](float x) { return std::isnan(x); }));
}

// --- q8 KV on the shipped model -------------------------------------------------------

// Perplexity of the shipped model (embla-small) with q8, bf16 and f16 (the default) KV against
// f32 KV, on docs text (the same text for each), windows of its trained context length: within
// 1%. (The small model's perplexity here moves by ~0.1% for any change of rounding, f16's too:
// f16's own precision is checked value by value in the tests above.)
TEST(KvCache, Q8KeepsTheShippedModelsPerplexityWithinOnePercent) {
  const std::string dir = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();
  const auto model = open_model(dir);
  const text::Tokenizer tok = text::Tokenizer::load(dir + "/tokenizer.json");
  std::ifstream in(std::filesystem::path(WREN_SOURCE_DIR) / "docs" / "architecture.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<int32_t> tokens = tok.encode(text.str());
  const int64_t n_ctx = 512;
  ASSERT_GE(int64_t(tokens.size()), 2 * n_ctx);
  auto perplexity = [&](KvType t) {
    WindowOptions o;
    o.context = n_ctx;
    o.threads = 2;
    o.kv = t;
    WindowScore score;
    score_windows(model, tok, tokens, 2, o, score);
    return score.perplexity();
  };
  const double f32 = perplexity(KvType::f32), q8 = perplexity(KvType::q8), bf16 = perplexity(KvType::bf16),
               f16 = perplexity(KvType::f16);
  std::printf("embla-small perplexity, 2 windows of %lld: f32 KV %.4f, f16 %.4f (%+.4f%%), bf16 %.4f (%+.3f%%), q8 %.4f "
              "(%+.3f%%)\n",
              (long long)n_ctx, f32, f16, 100 * (f16 / f32 - 1), bf16, 100 * (bf16 / f32 - 1), q8, 100 * (q8 / f32 - 1));
  EXPECT_NE(f16, f32) << "f16 gave the f32 perplexity exactly: was the cache really rounded?";
  EXPECT_LT(std::fabs(f16 / f32 - 1), 0.01);
  EXPECT_NE(q8, f32) << "q8 gave the f32 perplexity exactly: was the cache really quantised?";
  EXPECT_LT(std::fabs(q8 / f32 - 1), 0.01);
  EXPECT_LT(std::fabs(bf16 / f32 - 1), 0.01);
}

}  // namespace
}  // namespace wren
