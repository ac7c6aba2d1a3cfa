// kernels/: the machine's read bandwidth, the denominator of the decode roofline
//   tokens/s <= bandwidth / bytes read per token.
// Decode streams weights from DRAM on every core at once, so the probe does the same: a
// buffer far larger than any cache (1 GiB by default, in huge pages as the packed weights
// are: kernels/huge_pages.h) is split into one contiguous part per thread, each part first
// touched (written) by the thread that later reads it, and every thread reads its part with
// SIMD loads at the same time. The figure is the best of several
// passes (the machine is shared: the best pass is the one least disturbed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace wren::kernels {

// Sum of the 64-bit words of [p, p + bytes) (bytes a multiple of 8): a full read of the
// region that the compiler cannot drop. SIMD, dispatched at run time.
uint64_t read_sum(const void* p, size_t bytes);

struct BandwidthOptions {
  size_t bytes = size_t(1) << 30;
  int threads = 1;
  int passes = 5;
};

struct Bandwidth {
  double best = 0;              // bytes per second of the fastest pass
  std::vector<double> passes;   // bytes per second of every pass
  uint64_t checksum = 0;        // sum of every word read in the last pass (keeps the reads)
};

// The probe's buffer and readers, kept so that passes can be run one at a time between other
// work: `wren bench` pairs every decode step with a pass just before it, so that on a shared
// host whose bandwidth moves from second to second a step is compared with the bandwidth of
// its own moment. The readers sleep between passes (they never compete with the work timed
// between them). Throws std::invalid_argument for threads < 1 or a buffer smaller than 64
// bytes per thread; std::bad_alloc when the buffer cannot be had.
class ReadProbe {
 public:
  ReadProbe(size_t bytes, int threads);
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  // Every thread reads its part at once; bytes per second, from the moment all start until
  // the last one finishes.
  double pass();
  uint64_t checksum() const;  // sum of every word read in the last pass
  int threads() const { return threads_; }

 private:
  struct Shared;
  int threads_;
  std::unique_ptr<Shared> shared_;
};

// Throws std::invalid_argument for threads < 1, passes < 1 or a buffer smaller than
// 64 bytes per thread; std::bad_alloc when the buffer cannot be had.
Bandwidth measure_read_bandwidth(const BandwidthOptions& o = {});

}  // namespace wren::kernels
