// kernels/: the thread pool. Workers sleep on a condition variable between jobs; a job is
// a function pointer, its context and the range [0, n), cut the same way every time.
#include "kernels/threads.h"

#include <algorithm>

namespace wren::kernels {

namespace {
thread_local bool t_inside_job = false;  // set while a chunk runs: nested calls go serial
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

// Chunk i of size(): the [0, n) range in units of `align`, the first n_units % size()
// chunks one unit longer.
void ThreadPool::chunk(int index, int64_t& begin, int64_t& end) const {
  const int64_t units = (n_ + align_ - 1) / align_, parts = size();
  const int64_t per = units / parts, extra = units % parts;
  const int64_t first = index * per + std::min<int64_t>(index, extra);
  const int64_t count = per + (index < extra ? 1 : 0);
  begin = std::min(n_, first * align_);
  end = std::min(n_, (first + count) * align_);
}

void ThreadPool::run(int64_t n, int64_t align, Body body, void* ctx) {
  if (n <= 0) return;
  if (t_inside_job || workers_.empty()) {
    body(ctx, 0, n);
    return;
  }
  std::lock_guard<std::mutex> job_lock(job_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = body;
    ctx_ = ctx;
    n_ = n;
    align_ = std::max<int64_t>(1, align);
    error_ = nullptr;
    pending_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();

  int64_t begin, end;
  chunk(0, begin, end);
  std::exception_ptr mine;
  t_inside_job = true;
  try {
    if (begin < end) body(ctx, begin, end);
  } catch (...) {
    mine = std::current_exception();
  }
  t_inside_job = false;

  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  t_inside_job = true;  // a worker never fans out again
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    int64_t begin, end;
    chunk(index, begin, end);
    Body body = body_;
    void* ctx = ctx_;
    lock.unlock();

    std::exception_ptr error;
    try {
      if (begin < end) body(ctx, begin, end);
    } catch (...) {
      error = std::current_exception();
    }

    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace wren::kernels
