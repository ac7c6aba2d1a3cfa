// kernels/: the thread pool. A job is a function pointer, its context and n items; the
// workers spin briefly on the job epoch, then sleep on it (a futex: std::atomic::wait).
#include "kernels/threads.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

namespace wren::kernels {

namespace {

thread_local bool t_inside_job = false;  // set while an item runs: nested calls go serial

// How long a worker keeps polling for the next job before it sleeps. Decode's regions are
// microseconds apart, a futex wake-up costs tens of microseconds under a hypervisor; past
// this a worker stops taking a core from whatever else runs.
constexpr auto kSpin = std::chrono::microseconds(100);
// How long a caller polls for the workers' last items before it sleeps: items are ~10 us.
constexpr auto kCallerSpin = std::chrono::microseconds(50);

// The spin-wait hint: lets the sibling hyper-thread run and saves power while polling.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The thread count meant by n_threads (0: one per core).
int resolve(int n_threads) {
  return n_threads > 0 ? n_threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

constexpr uint64_t pack(uint64_t end, uint64_t next) { return end << 32 | next; }
constexpr uint32_t end_of(uint64_t share) { return uint32_t(share >> 32); }
constexpr uint32_t next_of(uint64_t share) { return uint32_t(share); }
// Items beyond this many run serially: a share's bounds are 32 bits.
constexpr int64_t kMaxItems = int64_t(UINT32_MAX);

}  // namespace

ThreadPool::ThreadPool(int n_threads) : shares_(size_t(resolve(n_threads))) {
  for (int i = 1; i < int(shares_.size()); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  epoch_.fetch_add(1);
  epoch_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::shared(int n_threads) {
  n_threads = resolve(n_threads);
  static std::mutex mu;
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  std::lock_guard<std::mutex> lock(mu);
  auto& pool = pools[n_threads];
  if (!pool) pool = std::make_unique<ThreadPool>(n_threads);
  return *pool;
}

ThreadPool::Run ThreadPool::next_items(int slot) {
  std::atomic<uint64_t>& own = shares_[size_t(slot)].items;
  for (uint64_t s = own.load(std::memory_order_acquire); next_of(s) < end_of(s);) {
    const int64_t take = owner_run(end_of(s) - next_of(s), chunk_);
    if (own.compare_exchange_weak(s, pack(end_of(s), next_of(s) + take), std::memory_order_acq_rel,
                                  std::memory_order_acquire))
      return {next_of(s), next_of(s) + take};
  }
  // Our share is done: take the last item of the next share that has one.
  const int n = int(shares_.size());
  for (int k = 1; k < n; ++k) {
    std::atomic<uint64_t>& other = shares_[size_t((slot + k) % n)].items;
    for (uint64_t s = other.load(std::memory_order_acquire); next_of(s) < end_of(s);)
      if (other.compare_exchange_weak(s, pack(end_of(s) - 1, next_of(s)), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        return {end_of(s) - 1, end_of(s)};
  }
  return {-1, -1};
}

void ThreadPool::take_items(int slot) {
  uint32_t ran = 0;
  for (Run r; (r = next_items(slot)).begin >= 0;) {
    // body_ and ctx_ stay fixed until these items are counted done: the caller waits for that.
    try {
      body_(ctx_, r.begin, r.end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    ran += uint32_t(r.end - r.begin);
  }
  if (ran == 0) return;
  // One count per thread and job, not per item: the counter's cache line is shared.
  // The caller counts itself as waiting before it reads done_ and sleeps (both sequentially
  // consistent), so the last count either is seen by it or sees it and wakes it.
  done_.fetch_add(ran, std::memory_order_seq_cst);
  if (caller_waiting_.load(std::memory_order_seq_cst)) done_.notify_one();
}

void ThreadPool::run(int64_t n, int64_t chunk, Body body, void* ctx) {
  if (n <= 0) return;
  const auto serial = [&] { body(ctx, 0, n); };
  if (t_inside_job || workers_.empty() || n == 1 || n > kMaxItems) return serial();
  std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
  if (!job.owns_lock()) return serial();  // another session's job has the workers

  body_ = body;
  ctx_ = ctx;
  chunk_ = std::max<int64_t>(1, chunk);
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  caller_waiting_.store(false, std::memory_order_relaxed);
  // Share k: items [k n / P, (k + 1) n / P) of P threads.
  const uint64_t threads = shares_.size();
  for (uint64_t k = 0; k < threads; ++k)
    shares_[k].items.store(pack((k + 1) * uint64_t(n) / threads, k * uint64_t(n) / threads),
                           std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();

  t_inside_job = true;
  take_items(0);
  t_inside_job = false;
  // The last items may still run on workers: spin briefly, then sleep (on a loaded
  // machine the worker may have lost its core, and needs ours more than we do).
  const uint32_t all = uint32_t(n);
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 1; done_.load(std::memory_order_acquire) < all; ++spins) {
    cpu_relax();
    if (spins % 64 == 0 && std::chrono::steady_clock::now() - start > kCallerSpin) {
      caller_waiting_.store(true, std::memory_order_seq_cst);
      for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) < all;) done_.wait(d, std::memory_order_seq_cst);
      break;
    }
  }
  if (error_) std::rethrow_exception(error_);
}

uint32_t ThreadPool::wait_for_job(uint32_t seen) {
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 1;; ++spins) {
    if (const uint32_t e = epoch_.load(std::memory_order_acquire); e != seen) return e;
    cpu_relax();
    if (spins % 256 == 0 && std::chrono::steady_clock::now() - start > kSpin) break;
  }
  // Sleep. A caller bumps epoch_ before it reads sleepers_, and we count ourselves before
  // we read epoch_ again (both sequentially consistent): either it sees us and wakes us,
  // or we see its job and do not sleep.
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  uint32_t e;
  while ((e = epoch_.load(std::memory_order_seq_cst)) == seen) epoch_.wait(seen, std::memory_order_seq_cst);
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return e;
}

void ThreadPool::worker_loop(int slot) {
  t_inside_job = true;  // a worker never fans out again
  // The epoch the pool was made with, not the current one: a job (or the destructor) that
  // bumped it before this thread got here must not be missed.
  // The next wait is for an epoch past the one this wake-up saw, never past a later read:
  // reading epoch_ again after checking stop_ could take in the destructor's bump (made
  // between the check and the read) and then sleep through it forever.
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for_job(seen);
    if (stop_.load()) return;
    take_items(slot);
  }
}

}  // namespace wren::kernels
