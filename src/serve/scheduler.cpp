#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>

#include "runtime/decode_batch.h"

namespace wren::serve {

Job::Result Job::take(int timeout_ms) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !result_.text.empty() || result_.finished; });
  Result r = result_;
  result_.text.clear();
  return r;
}

void Job::emit(std::string_view text) {
  if (text.empty()) return;
  {
    std::lock_guard lock(mutex_);
    result_.text += text;
  }
  cv_.notify_all();
}

void Job::finish(const std::string& reason, int64_t completion_tokens, const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    result_.finished = true;
    result_.finish_reason = reason;
    result_.error = error;
    result_.prompt_tokens = int64_t(prompt.size());
    result_.completion_tokens = completion_tokens;
  }
  cv_.notify_all();
}

void Job::set_reused(int64_t n) {
  std::lock_guard lock(mutex_);
  result_.reused_tokens = n;
}

Scheduler::Scheduler(std::shared_ptr<const Model> model, const text::Tokenizer& tok, const SchedulerOptions& o)
    : model_(std::move(model)), tok_(tok), o_(o), slots_(size_t(std::max(1, o.parallel))),
      scratch_logits_(size_t(model_->config.rows())) {
  if (o_.context <= 0) o_.context = model_->config.context_length;
  o_.prefill_chunk = std::max(1, o_.prefill_chunk);
  stats_.slots = int(slots_.size());
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

bool Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || int(queue_.size()) >= o_.queue) return false;
    queue_.push_back(std::move(job));
    stats_.queued = int(queue_.size());
  }
  cv_.notify_all();
  return true;
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      const auto idle = [&] { return std::none_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return busy(s); }); };
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !idle(); });
      if (stopping_) {
        for (auto& job : queue_) job->finish("cancelled", 0, "the server is shutting down");
        queue_.clear();
        break;
      }
    }
    admit();
    prefill_step();
    decode_step();
  }
  for (Slot& s : slots_)
    if (busy(s)) release(s, "cancelled", "the server is shutting down");
}

// Free slots take queued jobs in arrival order; a cancelled job never takes one.
void Scheduler::admit() {
  for (;;) {
    std::shared_ptr<Job> job;
    Slot* slot = nullptr;
    {
      std::lock_guard lock(mutex_);
      while (!queue_.empty() && queue_.front()->cancelled()) {
        queue_.front()->finish("cancelled", 0);
        queue_.pop_front();
      }
      if (queue_.empty()) break;
      slot = choose_slot(queue_.front()->prompt);
      if (!slot) break;
      job = std::move(queue_.front());
      queue_.pop_front();
      stats_.queued = int(queue_.size());
    }
    start(*slot, std::move(job));
  }
}

// The free slot whose history is the longest proper prefix of the prompt (its state is
// the prompt's first tokens already run); else the free slot used longest ago.
Scheduler::Slot* Scheduler::choose_slot(const std::vector<int32_t>& prompt) {
  Slot* best = nullptr;
  size_t best_len = 0;
  Slot* oldest = nullptr;
  for (Slot& s : slots_) {
    if (busy(s)) continue;
    if (!oldest || s.last_used < oldest->last_used) oldest = &s;
    if (!s.session) continue;
    const std::vector<int32_t>& h = s.session->history();
    if (h.empty() || h.size() >= prompt.size() || h.size() <= best_len) continue;
    if (std::equal(h.begin(), h.end(), prompt.begin())) {
      best = &s;
      best_len = h.size();
    }
  }
  return best ? best : oldest;
}

void Scheduler::start(Slot& s, std::shared_ptr<Job> job) {
  const std::vector<int32_t>& p = job->prompt;
  const bool reuse = s.session && s.session->position() > 0 && size_t(s.session->position()) < p.size() &&
                     std::equal(s.session->history().begin(), s.session->history().end(), p.begin());
  try {
    if (!reuse || s.session->position() + int64_t(p.size() - s.session->history().size()) + job->gen.max_tokens >
                      s.session->context()) {
      s.session.reset();  // the old caches go before the new ones are allocated
      s.session = std::make_unique<Session>(
          model_, SessionOptions{.context = o_.context, .threads = o_.threads,
                                 .lm_head = lm_head_for(job->gen.sampling, o_.lm_head_prescore), .kv = o_.kv});
    }
    s.prefilled = size_t(s.session->position());
    s.gen = std::make_unique<Generation>(*s.session, tok_, job->gen);
  } catch (const std::exception& e) {
    job->finish("error", 0, e.what());
    return;
  }
  job->set_reused(int64_t(s.prefilled));
  s.job = std::move(job);
  s.decoding = false;
  s.last_used = ++clock_;
  std::lock_guard lock(mutex_);
  stats_.reused_tokens += int64_t(s.prefilled);
  stats_.busy = int(std::count_if(slots_.begin(), slots_.end(), [&](const Slot& x) { return busy(x); }));
}

void Scheduler::prefill_step() {
  for (size_t k = 0; k < slots_.size(); ++k) {
    Slot& s = slots_[(next_prefill_ + k) % slots_.size()];
    if (!busy(s) || s.decoding) continue;
    next_prefill_ = (next_prefill_ + k + 1) % slots_.size();
    if (s.job->cancelled()) return release(s, "cancelled");
    const std::vector<int32_t>& p = s.job->prompt;
    const size_t n = std::min(p.size() - s.prefilled, size_t(o_.prefill_chunk));
    const std::span<const int32_t> chunk(p.data() + s.prefilled, n);
    try {
      if (s.prefilled + n < p.size()) s.session->prefill(chunk, scratch_logits_.data());
      else s.gen->prefill(chunk, true);
    } catch (const std::exception& e) {
      return release(s, "error", e.what());
    }
    s.prefilled += n;
    prompt_since_step_ += int64_t(n);
    std::lock_guard lock(mutex_);
    stats_.prompt_tokens += int64_t(n);
    if (s.prefilled == p.size()) s.decoding = true;
    return;
  }
}

void Scheduler::decode_step() {
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens;
  std::vector<float*> logits;
  std::vector<Slot*> batch;
  for (Slot& s : slots_) {
    if (!busy(s) || !s.decoding) continue;
    if (s.job->cancelled()) {
      release(s, "cancelled");
      continue;
    }
    s.job->emit(s.gen->choose());
    if (s.gen->done()) {
      s.job->emit(s.gen->finish());
      release(s, s.gen->hit_length() ? "length" : "stop");
      continue;
    }
    sessions.push_back(s.session.get());
    tokens.push_back(s.gen->chosen());
    logits.push_back(s.gen->logits());
    batch.push_back(&s);
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!sessions.empty()) decode_batch(sessions, tokens, logits);
  } catch (const std::exception& e) {
    // A refused step (say a value the cache's type cannot hold) may have left any session of the
    // batch half-written: each of its requests ends with the error and drops its session, and
    // the server goes on.
    for (Slot* s : batch) release(*s, "error", e.what());
    return;
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  for (Slot* s : batch) s->gen->advanced(dt / double(batch.size()));
  std::lock_guard lock(mutex_);
  if (sessions.empty()) {
    last_step_end_.reset();  // no stream waits for the next step
  } else {
    if (last_step_end_) {
      stats_.most_prompt_tokens_between_steps = std::max(stats_.most_prompt_tokens_between_steps, prompt_since_step_);
      stats_.longest_step_gap_seconds =
          std::max(stats_.longest_step_gap_seconds, std::chrono::duration<double>(t0 - *last_step_end_).count());
    }
    last_step_end_ = t1;
  }
  prompt_since_step_ = 0;
  if (!sessions.empty()) {
    stats_.decode_steps += 1;
    stats_.decode_tokens += int64_t(sessions.size());
    stats_.decode_seconds += dt;
  }
}

void Scheduler::release(Slot& s, const std::string& reason, const std::string& error) {
  const int64_t generated = s.gen ? s.gen->times().generated : 0;
  s.job->finish(reason, generated, error);
  s.job.reset();
  s.gen.reset();
  s.decoding = false;
  if (!error.empty()) s.session.reset();  // a failed step may have left the state half-written
  std::lock_guard lock(mutex_);
  stats_.completion_tokens += generated;
  stats_.busy = int(std::count_if(slots_.begin(), slots_.end(), [&](const Slot& x) { return busy(x); }));
}

}  // namespace wren::serve
