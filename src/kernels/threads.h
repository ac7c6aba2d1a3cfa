// kernels/: a tiny fixed-size thread pool for splitting matrix rows across cores.
//
// Deterministic by construction: parallel_for cuts [0, n) into size() contiguous chunks
// whose bounds depend only on n, the alignment and size(); chunk i always runs on worker
// i (chunk 0 on the caller). Kernels compute each output element entirely inside one
// chunk, so results do not depend on the number of threads or on timing.
#pragma once

#include <condition_variable>
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

  int size() const { return int(workers_.size()) + 1; }

  // Calls f(begin, end) once per non-empty chunk and returns when all have finished.
  // Chunk bounds are multiples of `align` (except n itself). An exception thrown by f is
  // rethrown here. Called from inside a running chunk it runs serially (no nesting).
  template <class F>
  void parallel_for(int64_t n, int64_t align, F&& f) {
    using Fn = std::remove_reference_t<F>;
    run(n, align, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  using Body = void (*)(void*, int64_t, int64_t);
  void run(int64_t n, int64_t align, Body body, void* ctx);
  void worker_loop(int index);
  void chunk(int index, int64_t& begin, int64_t& end) const;

  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // one job at a time when several callers share the pool
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // incremented per job; workers wait for a new value
  int pending_ = 0;          // workers still running the current job
  bool stop_ = false;
  // The current job.
  Body body_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, align_ = 1;
  std::exception_ptr error_;
};

// Runs f over [0, n) on `pool`, or inline when pool is null or the work is small.
template <class F>
void parallel_rows(ThreadPool* pool, int64_t n, int64_t align, F&& f) {
  if (pool && pool->size() > 1 && n > align)
    pool->parallel_for(n, align, f);
  else
    f(int64_t(0), n);
}

}  // namespace wren::kernels
