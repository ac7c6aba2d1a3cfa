// kernels/: the read-bandwidth probe (kernels/bandwidth.h). The read loop is Highway SIMD
// with four independent accumulators (so no add waits on the previous one) and run-time
// dispatch; threads are started once per probe (ReadProbe) and meet at a barrier before and after
// every pass, so a pass is timed from the moment all threads start reading until the last
// one finishes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/bandwidth_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>

#include "kernels/bandwidth.h"
#include "kernels/huge_pages.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

uint64_t ReadSum(const uint64_t* p, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, p + i));
    s1 = hn::Add(s1, hn::LoadU(d, p + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * N));
  }
  // The lanes are added in uint64_t (wrapping, as the checksum is meant to), not by
  // SumOfLanes: its AVX-512 form reduces in signed 64-bit lanes, which may overflow.
  HWY_ALIGN uint64_t lanes[hn::MaxLanes(d)];
  hn::Store(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)), d, lanes);
  uint64_t r = 0;
  for (size_t k = 0; k < N; ++k) r += lanes[k];
  for (; i < n; ++i) r += p[i];
  return r;
}

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace wren::kernels {

HWY_EXPORT(ReadSum);

uint64_t read_sum(const void* p, size_t bytes) {
  return HWY_DYNAMIC_DISPATCH(ReadSum)(static_cast<const uint64_t*>(p), bytes / 8);
}

// The readers: thread 0 is the caller of pass(), threads 1.. live as long as the probe and
// meet the caller at a barrier before and after every pass (and once more to stop).
struct ReadProbe::Shared {
  Shared(size_t part, int threads) : part(part), buffer(huge_alloc(part * size_t(threads))), sums(size_t(threads)), sync(threads) {}
  size_t part;
  // Not initialised: no page is touched until its reader writes it. In huge pages, as the
  // packed weights decode streams are (kernels/huge_pages.h), so the roofline compares like
  // with like.
  HugeBuffer buffer;
  std::vector<uint64_t> sums;
  std::barrier<> sync;
  std::chrono::steady_clock::time_point start;
  bool stop = false;
  std::vector<std::jthread> others;

  uint8_t* part_of(int t) { return buffer.get() + size_t(t) * part; }
  // One pass of thread t; the caller's clock starts once every reader is at the line.
  void read(int t) {
    sync.arrive_and_wait();
    if (t == 0) start = std::chrono::steady_clock::now();
    sync.arrive_and_wait();
    sums[size_t(t)] = read_sum(part_of(t), part);
    sync.arrive_and_wait();
  }
};

ReadProbe::ReadProbe(size_t bytes, int threads) : threads_(threads) {
  if (threads < 1) throw std::invalid_argument("bandwidth probe: threads " + std::to_string(threads) + ", expected >= 1");
  // Parts are whole cache lines; the few bytes past threads x part are not read.
  const size_t part = bytes / size_t(threads) / 64 * 64;
  if (part == 0) throw std::invalid_argument("bandwidth probe: " + std::to_string(bytes) + " bytes for " +
                                             std::to_string(threads) + " threads, expected >= 64 bytes per thread");
  shared_ = std::make_unique<Shared>(part, threads);
  Shared& s = *shared_;
  for (int t = 1; t < threads; ++t)
    s.others.emplace_back([&s, t] {
      std::memset(s.part_of(t), t + 1, s.part);  // first touch: the pages land where this thread runs
      for (;;) {
        s.sync.arrive_and_wait();  // a pass, or the end
        if (s.stop) return;
        s.read(t);
      }
    });
  std::memset(s.part_of(0), 1, part);
}

ReadProbe::~ReadProbe() {
  shared_->stop = true;
  shared_->sync.arrive_and_wait();
  shared_->others.clear();  // joins
}

double ReadProbe::pass() {
  Shared& s = *shared_;
  s.sync.arrive_and_wait();
  s.read(0);
  return double(s.part) * threads_ / std::chrono::duration<double>(std::chrono::steady_clock::now() - s.start).count();
}

uint64_t ReadProbe::checksum() const {
  uint64_t sum = 0;
  for (uint64_t x : shared_->sums) sum += x;
  return sum;
}

Bandwidth measure_read_bandwidth(const BandwidthOptions& o) {
  if (o.passes < 1) throw std::invalid_argument("bandwidth probe: passes " + std::to_string(o.passes) + ", expected >= 1");
  ReadProbe probe(o.bytes, o.threads);
  Bandwidth result;
  for (int p = 0; p < o.passes; ++p) result.passes.push_back(probe.pass());
  result.checksum = probe.checksum();
  result.best = *std::max_element(result.passes.begin(), result.passes.end());
  return result;
}

}  // namespace wren::kernels
#endif  // HWY_ONCE
