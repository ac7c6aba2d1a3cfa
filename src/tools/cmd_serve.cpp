// wren serve: an OpenAI-compatible HTTP server over one model directory (serve/server.h),
// --parallel sessions decoding together (serve/scheduler.h). SIGINT and SIGTERM stop it:
// it stops accepting, cancels what is in flight and exits 0.
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "runtime/model_files.h"
#include "serve/chat_template.h"
#include "serve/scheduler.h"
#include "serve/server.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/kv_option.h"

namespace wren::tools {

namespace {

struct ServeArgs {
  std::string model, chat_template, lm_head = "prescore", kv = "auto";
  serve::SchedulerOptions sched;
  serve::ServerOptions server;
};

void run(ServeArgs a) {
  // Signals go to one waiting thread only: blocked here, before any thread exists to inherit them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not the end of the server

  auto model = open_model(a.model);
  const text::Tokenizer tok = text::Tokenizer::load(a.model + "/tokenizer.json");
  const serve::ChatFormat format = serve::chat_format_for(a.model, a.chat_template);
  const serve::ChatTemplate chat(format, tok);
  if (a.sched.context == 0) a.sched.context = std::min<int64_t>(model->config.context_length, 4096);
  if (a.sched.context > model->config.context_length)
    throw std::runtime_error("--ctx-size " + std::to_string(a.sched.context) + " is more than the model's context of " +
                             std::to_string(model->config.context_length));
  a.sched.lm_head_prescore = a.lm_head == "prescore";
  a.sched.kv = kv_choice(a.kv);
  if (a.server.model_id.empty()) a.server.model_id = std::filesystem::path(a.model).lexically_normal().filename().string();
  if (a.server.model_id.empty()) a.server.model_id = std::filesystem::path(a.model).lexically_normal().parent_path().filename().string();

  serve::Scheduler scheduler(model, tok, a.sched);
  serve::Server server(scheduler, tok, chat, a.server);
  const int port = server.bind();
  std::fprintf(stderr, "wren serve: %s (chat template %s) on http://%s:%d, %d slots of %lld tokens, queue %d\n",
               a.server.model_id.c_str(), std::string(serve::format_name(format)).c_str(), a.server.host.c_str(), port,
               a.sched.parallel, (long long)a.sched.context, a.sched.queue);
  std::atomic<bool> ended{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (ended) return;  // woken by main() after the server ended on its own
    std::fprintf(stderr, "wren serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    scheduler.stop();  // in-flight requests end as cancelled, so their connections close
    // A signal just before run() starts listening would find nothing to stop: wait until it listens.
    while (!ended && !server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server.stop();
  });
  server.run();
  ended = true;
  scheduler.stop();
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter when no signal came
  waiter.join();
  std::fprintf(stderr, "wren serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "an OpenAI-compatible HTTP server (completions, chat, streaming)");
  static ServeArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("--host", a.server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", a.server.port, "port (0: any free one, printed at start)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--parallel", a.sched.parallel, "slots: requests decoded together")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--queue", a.sched.queue, "requests that may wait for a slot; beyond: 503")->check(CLI::Range(0, 100000))->capture_default_str();
  cmd->add_option("-c,--ctx-size", a.sched.context, "tokens per slot (default: the model's context, at most 4096)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--prefill-chunk", a.sched.prefill_chunk, "prompt tokens run between two decode steps")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("-t,--threads", a.sched.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--api-key", a.server.api_key, "require Authorization: Bearer KEY");
  cmd->add_option("--alias", a.server.model_id, "model id the API reports and accepts (default: the directory's name)");
  cmd->add_option("--chat-template", a.chat_template, "chat format instead of the one tokenizer_config.json names: " + serve::format_names());
  cmd->add_option("--max-body", a.server.max_body_bytes, "largest request body in bytes")->capture_default_str();
  cmd->add_option("--max-tokens", a.server.max_tokens, "most tokens a request may generate (0: the context)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--connections", a.server.connections, "connections served at once")->check(CLI::Range(2, 4096))->capture_default_str();
  cmd->add_option("--timeout", a.server.request_timeout_s, "seconds a request may run")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--read-timeout", a.server.read_timeout_s, "seconds to wait for a client's bytes")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--write-timeout", a.server.write_timeout_s, "seconds to wait for a client to take bytes")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--lm-head", a.lm_head, "prescore or exact (as wren generate)")->check(CLI::IsMember({"prescore", "exact"}))->capture_default_str();
  add_kv_option(cmd, a.kv);
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
