// kernels/: the thread pool that splits a parallel region's work items across cores.
//
// Decode runs a few hundred short regions per token, so the hand-off must cost far less
// than a region's work: workers spin (a bounded time, with the CPU's pause instruction) on
// the job counter before they sleep, and the caller wakes sleepers only when there are any.
// One pool per thread count serves the whole process (shared()), so several sessions never
// start more threads than the machine has cores.
//
// Deterministic by construction: a job is n items whose bounds the caller fixed from the
// work alone (never from the thread count); any thread may run any item (run_ranges: any
// run of consecutive items), each item computes its outputs whole, so results do not
// depend on the number of threads, on which thread ran what, or on timing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace wren::kernels {

class ThreadPool {
 public:
  // n_threads >= 1 counts the caller; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool of n_threads threads (0: one per core), made on first use and kept
  // until exit; every caller asking for the same count shares it.
  static ThreadPool& shared(int n_threads);

  int size() const { return int(workers_.size()) + 1; }

  // Calls f(i) once for every item i < n and returns when all have finished. Each thread
  // (the caller too) owns a contiguous share of the items and runs it in order; one that
  // finishes early takes items from the end of another's share, so uneven items balance
  // themselves while each thread still streams one run of memory (decode's weights: two
  // threads taking 128 KB items in turn read about 16% slower than each reading its half).
  // An exception thrown by f is rethrown here (the first one; the other items still run).
  // Called from inside an item, or while another caller's job holds the pool, it runs every
  // item on the calling thread: the same results, no nesting and no waiting.
  template <class F>
  void run_items(int64_t n, F&& f) {
    using Fn = std::remove_reference_t<F>;
    run(n, 1, [](void* ctx, int64_t begin, int64_t end) { for (int64_t i = begin; i < end; ++i) (*static_cast<Fn*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

  // run_items with f(begin, end) over runs of consecutive items: a thread takes up to `chunk`
  // items of its own share in one run while it has plenty left (min(chunk, half of what is
  // left)), a thief one from the end of another's share. So the items can be a fraction of
  // what a call should stream (one call per chunk) and the threads still end a job within
  // one small item of each other: decode's regions are tens of microseconds, and with whole
  // 128 KB items each thread waited ~6% of its time at their ends (nenya, 2 threads).
  // How many items a thread takes from its own share with `left` of it left: a whole chunk
  // while at least two are left, then half of what is left (at least one).
  static constexpr int64_t owner_run(int64_t left, int64_t chunk) {
    return std::min(chunk, std::max<int64_t>(1, left / 2));
  }

  template <class F>
  void run_ranges(int64_t n, int64_t chunk, F&& f) {
    using Fn = std::remove_reference_t<F>;
    run(n, chunk, [](void* ctx, int64_t begin, int64_t end) { (*static_cast<Fn*>(ctx))(begin, end); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

  // Calls f(begin, end) once per non-empty chunk of [0, n): size() contiguous chunks whose
  // bounds are multiples of `align` (except n itself), the first n_units % size() one unit
  // longer. For kernels whose every output element lies inside one chunk.
  template <class F>
  void parallel_for(int64_t n, int64_t align, F&& f) {
    if (n <= 0) return;
    align = align < 1 ? 1 : align;
    const int64_t units = (n + align - 1) / align, parts = size();
    const int64_t per = units / parts, extra = units % parts;
    run_items(parts, [&](int64_t i) {
      const int64_t first = i * per + (i < extra ? i : extra), count = per + (i < extra ? 1 : 0);
      const int64_t begin = first * align < n ? first * align : n;
      const int64_t end = (first + count) * align < n ? (first + count) * align : n;
      if (begin < end) f(begin, end);
    });
  }

 private:
  using Body = void (*)(void*, int64_t begin, int64_t end);
  void run(int64_t n, int64_t chunk, Body body, void* ctx);
  void worker_loop(int slot);
  // Runs the items of the current job that thread `slot` takes (its share, then others'
  // last items) until none is left.
  void take_items(int slot);
  // The next run of items [begin, end) of the current job for thread `slot` (begin = -1
  // when none is left).
  struct Run {
    int64_t begin, end;
  };
  Run next_items(int slot);
  // Returns once epoch_ differs from `seen`, with the value it read.
  uint32_t wait_for_job(uint32_t seen);

  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // held by the caller whose job the workers run
  // The job's items, one share per thread (slot 0 the caller's, slot i + 1 worker i's): the
  // end of the share (high 32 bits) and its next item (low 32). The owner takes the next
  // item, a thief the last, each by one compare-and-swap of the pair, so every item runs
  // once. A job starts only once every item of the one before has run, so a share that is
  // not empty belongs to the current job, and a worker arriving late takes nothing of a
  // finished one.
  struct alignas(64) Share {
    std::atomic<uint64_t> items{0};
  };
  std::vector<Share> shares_;
  std::atomic<uint32_t> done_{0};     // items of the current job finished
  std::atomic<bool> caller_waiting_{false};  // the caller sleeps on done_
  std::atomic<uint32_t> epoch_{0};    // bumped per job; sleeping workers wait on it
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  // The job: written by the caller before it publishes the shares.
  Body body_ = nullptr;
  void* ctx_ = nullptr;
  int64_t chunk_ = 1;  // the longest run an owner takes (owner_run)
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// f(i) for i < n on `pool`, or on the caller when pool is null.
template <class F>
void run_items(ThreadPool* pool, int64_t n, F&& f) {
  if (pool && pool->size() > 1 && n > 1)
    pool->run_items(n, f);
  else
    for (int64_t i = 0; i < n; ++i) f(i);
}

// f(begin, end) over runs of [0, n) on `pool` (ThreadPool::run_ranges), or f(0, n) on the
// caller when pool is null.
template <class F>
void run_ranges(ThreadPool* pool, int64_t n, int64_t chunk, F&& f) {
  if (pool && pool->size() > 1 && n > 1)
    pool->run_ranges(n, chunk, f);
  else if (n > 0)
    f(int64_t(0), n);
}

// Runs f over [0, n) on `pool`, or inline when pool is null or the work is small.
template <class F>
void parallel_rows(ThreadPool* pool, int64_t n, int64_t align, F&& f) {
  if (pool && pool->size() > 1 && n > align)
    pool->parallel_for(n, align, f);
  else
    f(int64_t(0), n);
}

}  // namespace wren::kernels
