// serve/: the slots. `parallel` sessions over one shared Model, run by one engine thread.
// Each iteration of its loop does, in order:
//   admit:   queued jobs take free slots (the slot whose token history is the longest prefix
//            of the job's prompt, so a chat's next turn continues from its state);
//   prefill: one chunk of at most `prefill_chunk` prompt tokens, for one prefilling slot
//            (round robin), so a new prompt delays the running streams by one chunk at most;
//   decode:  every decoding slot samples its next token, then all run together in one
//            decode_batch step (runtime/decode_batch.h: the weights read once for all).
// A job whose client went away (cancel()) leaves its slot at the next iteration.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/generation.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

namespace wren::serve {

// One request between its HTTP thread and the engine thread.
class Job {
 public:
  Job(std::vector<int32_t> prompt, GenerationOptions gen) : prompt(std::move(prompt)), gen(std::move(gen)) {}
  const std::vector<int32_t> prompt;
  const GenerationOptions gen;

  struct Result {
    std::string text;           // everything since the last take()
    bool finished = false;
    std::string finish_reason;  // "stop" or "length" (OpenAI's); "cancelled" when the server stopped it
    std::string error;          // set when the engine failed it
    int64_t prompt_tokens = 0, completion_tokens = 0, reused_tokens = 0;
  };
  // Waits until there is text or the job finished, or `timeout_ms` passed; takes the text.
  Result take(int timeout_ms);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // The engine's side.
  void emit(std::string_view text);
  void finish(const std::string& reason, int64_t completion_tokens, const std::string& error = "");
  void set_reused(int64_t n);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  Result result_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int parallel = 1;
  int queue = 16;          // jobs waiting for a slot beyond this are refused
  int64_t context = 0;     // each slot's session context
  int threads = 2;
  int prefill_chunk = 8;   // prompt tokens per prefill step
  bool lm_head_prescore = true;
  std::optional<KvType> kv = std::nullopt;  // the slots' cache storage; unset: the session's rule (Session::default_kv_type)
};

struct SchedulerStats {
  int64_t prompt_tokens = 0, reused_tokens = 0, completion_tokens = 0, decode_steps = 0;
  int64_t decode_tokens = 0;  // tokens the decode steps ran (each step runs one per decoding slot)
  double decode_seconds = 0;  // wall time of the decode steps (all slots together)
  // What a running stream waited for between two of its decode steps: the most prompt tokens
  // of other requests run in such a gap (at most one chunk), and the longest gap in seconds.
  int64_t most_prompt_tokens_between_steps = 0;
  double longest_step_gap_seconds = 0;
  int queued = 0, busy = 0, slots = 0;
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Model> model, const text::Tokenizer& tok, const SchedulerOptions& o);
  ~Scheduler();
  // Queues a job; false when the queue is full or the scheduler stopped.
  bool submit(std::shared_ptr<Job> job);
  // Stops the engine: queued and running jobs finish as "cancelled".
  void stop();
  SchedulerStats stats() const;
  int64_t context() const { return o_.context; }

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    std::shared_ptr<Job> job;
    std::unique_ptr<Generation> gen;
    size_t prefilled = 0;  // prompt tokens in the session
    bool decoding = false;
    uint64_t last_used = 0;
  };
  void loop();
  void admit();
  Slot* choose_slot(const std::vector<int32_t>& prompt);
  void start(Slot& s, std::shared_ptr<Job> job);
  void prefill_step();
  void decode_step();
  void release(Slot& s, const std::string& reason, const std::string& error = "");
  bool busy(const Slot& s) const { return s.job != nullptr; }

  std::shared_ptr<const Model> model_;
  const text::Tokenizer& tok_;
  SchedulerOptions o_;
  std::vector<Slot> slots_;
  std::vector<float> scratch_logits_;  // a non-final prefill chunk's logits, never read
  size_t next_prefill_ = 0;
  uint64_t clock_ = 0;
  // Since the last decode step: prompt tokens run, and when it ended (none: no stream waits).
  int64_t prompt_since_step_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_step_end_;

  mutable std::mutex mutex_;  // guards queue_, stopping_, stats_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace wren::serve
