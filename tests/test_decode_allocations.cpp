// No heap allocation per decode token: the generation loop (sampling with its truncations and
// repetition penalty, stop matching, the stream decoder, the session step and the LM head
// pre-score) run for 100 tokens of the shipped model with every global operator new of this
// binary counted while a flag is set. The oracle is the allocator itself: any new in the
// window is counted, whoever calls it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>

#include "runtime/generation.h"
#include "runtime/model_files.h"
#include "text/tokenizer.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};

void* counted(std::size_t n, std::size_t align) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

// Every replaceable form, so that new and delete always pair with malloc and free.
void* operator new(std::size_t n) { return counted(n, 0); }
void* operator new[](std::size_t n) { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n, 0); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n, 0); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace wren {
namespace {

const std::string kShipped = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();

// Allocations during `steps` generation steps after a one-step warm-up (thread-local kernel
// scratch grows on first use).
int64_t allocations_over_steps(const SamplerParams& sampling, bool prescore, int threads, int steps) {
  auto model = open_model(kShipped);
  const text::Tokenizer tok = text::Tokenizer::load(kShipped + "/tokenizer.json");
  GenerationOptions o{.sampling = sampling, .stops = {"\n\nUser:", "THE END"}, .max_tokens = steps + 2,
                      .eos = tok.token_id("<|endoftext|>"), .ignore_eos = true};
  Session session(model, {.context = 512, .threads = threads, .lm_head = lm_head_for(sampling, prescore)});
  Generation gen(session, tok, o);
  gen.prefill(tok.encode("It was a dark and stormy night"), true);
  std::string text;
  text.reserve(size_t(steps) * 1024);
  text += gen.step();
  allocations = 0;
  counting = true;
  int64_t decoded = gen.times().decode_steps;
  for (int i = 0; i < steps && !gen.done(); ++i) text += gen.step();
  counting = false;
  decoded = gen.times().decode_steps - decoded;
  EXPECT_EQ(decoded, steps) << "the window must hold " << steps << " decode steps";
  EXPECT_FALSE(text.empty());
  return allocations.load();
}

TEST(DecodeAllocations, CountingOperatorNewSeesAllocations) {
  // The counter works: an allocation inside the window is counted, one outside it is not.
  allocations = 0;
  void* before = ::operator new(64);
  counting = true;
  void* inside = ::operator new(64);
  counting = false;
  ::operator delete(before);
  ::operator delete(inside);
  EXPECT_EQ(allocations.load(), 1);
}

TEST(DecodeAllocations, GreedyWithPrescoreAllocatesNothing) {
  SamplerParams p;
  p.temperature = 0;
  EXPECT_EQ(allocations_over_steps(p, true, 1, 100), 0);
}

TEST(DecodeAllocations, SamplingWithPenaltyAndTwoThreadsAllocatesNothing) {
  SamplerParams p;  // temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.repeat_penalty = 1.1f;
  p.seed = 3;
  EXPECT_EQ(allocations_over_steps(p, false, 2, 100), 0);
}

TEST(DecodeAllocations, TopKSamplingWithPrescoreAllocatesNothing) {
  SamplerParams p;
  p.seed = 5;
  EXPECT_EQ(allocations_over_steps(p, true, 2, 100), 0);
}

}  // namespace
}  // namespace wren
