#include "serve/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <random>

#include "serve/request.h"
#include "serve/responses.h"

namespace wren::serve {

namespace {

using nlohmann::json;

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// httplib's pool with a bound: a connection beyond `threads` busy and as many waiting blocks
// the accept loop, so further ones wait in the kernel's backlog instead of in memory.
class BoundedPool : public httplib::TaskQueue {
 public:
  explicit BoundedPool(int threads) : max_pending_(size_t(threads)) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return jobs_.size() < max_pending_ || shutdown_; });
    jobs_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      shutdown_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        room_.notify_one();
      }
      fn();
    }
  }
  size_t max_pending_;
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> workers_;
  bool shutdown_ = false;
};

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& param = "", const std::string& code = "") {
  res.status = status;
  res.set_content(error_json(message, type, param, code).dump(), "application/json");
}

}  // namespace

struct Server::Impl {
  Scheduler& scheduler;
  const text::Tokenizer& tok;
  const ChatTemplate& chat;
  ServerOptions o;
  httplib::Server http;
  int64_t created = now_s();
  std::atomic<int64_t> rejected{0}, next_id{1};
  std::mutex counts_mutex;
  RequestCounts counts;
  std::optional<int32_t> eos;

  Impl(Scheduler& s, const text::Tokenizer& t, const ChatTemplate& c, const ServerOptions& opts)
      : scheduler(s), tok(t), chat(c), o(opts), eos(t.token_id("<|endoftext|>")) {
    if (o.max_tokens <= 0) o.max_tokens = int(scheduler.context());
    configure();
    routes();
  }

  void configure() {
    const int threads = std::max(2, o.connections);
    http.new_task_queue = [threads] { return new BoundedPool(threads); };
    http.set_payload_max_length(o.max_body_bytes);
    http.set_read_timeout(o.read_timeout_s, 0);
    http.set_write_timeout(o.write_timeout_s, 0);
    http.set_keep_alive_timeout(5);
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      std::lock_guard lock(counts_mutex);
      ++counts[{req.path.rfind("/v1/models", 0) == 0 ? "/v1/models" : req.path, res.status}];
    });
    // Whatever httplib answers itself (404, 413, 400 for a broken request line) gets an error object too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                                  : res.status == 413 ? "the request body is larger than the server accepts"
                                                      : "the request could not be read";
      send_error(res, res.status, message, res.status == 404 ? "not_found_error" : "invalid_request_error");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, 500, what, "server_error");
    });
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (o.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + o.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, 401, "a valid API key is required: Authorization: Bearer <key>", "invalid_request_error", "",
                 "invalid_api_key");
      return httplib::Server::HandlerResponse::Handled;
    });
  }

  void routes() {
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(models_json(o.model_id, created).dump(), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != o.model_id)
        return send_error(res, 404, "no model " + std::string(req.matches[1]), "invalid_request_error", "model",
                          "model_not_found");
      res.set_content(models_json(o.model_id, created)["data"][0].dump(), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      RequestCounts c;
      {
        std::lock_guard lock(counts_mutex);
        c = counts;
      }
      res.set_content(metrics_text(scheduler.stats(), c, rejected), "text/plain; version=0.0.4");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, false); });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, true); });
  }

  // The prompt's tokens and the generation's options, checked against the limits.
  std::shared_ptr<Job> make_job(const CompletionRequest& r) {
    if (!r.model.empty() && r.model != o.model_id)
      throw RequestError(400, "model", "model: \"" + r.model + "\" is not served here; this server has \"" + o.model_id + "\"",
                         "invalid_request_error");
    std::vector<int32_t> prompt;
    try {
      prompt = r.chat ? chat.encode(r.messages, true) : tok.encode(r.prompt);
    } catch (const std::invalid_argument& e) {
      throw RequestError(400, r.chat ? "messages" : "prompt", e.what());
    }
    if (prompt.empty()) prompt.push_back(eos.value_or(0));  // an empty prompt starts a document
    const int64_t context = scheduler.context(), n = int64_t(prompt.size());
    const char* field = r.chat ? "messages" : "prompt";
    if (n >= context)
      throw RequestError(400, field, std::string(field) + ": the prompt is " + std::to_string(n) +
                                         " tokens; the context holds " + std::to_string(context) +
                                         " (prompt and generated tokens together)", "invalid_request_error");
    const int64_t room = context - n;
    const int64_t max_tokens = r.max_tokens ? *r.max_tokens : std::min<int64_t>(room, o.max_tokens);
    if (max_tokens > o.max_tokens)
      throw RequestError(400, "max_tokens", "max_tokens: " + std::to_string(max_tokens) + " is more than this server's limit of " +
                                                std::to_string(o.max_tokens));
    if (max_tokens > room)
      throw RequestError(400, "max_tokens", "max_tokens: the prompt is " + std::to_string(n) + " tokens and max_tokens " +
                                                std::to_string(max_tokens) + ", together more than the context of " +
                                                std::to_string(context));
    GenerationOptions g{.sampling = r.sampling, .stops = r.stop, .max_tokens = int(max_tokens), .eos = eos,
                        .end_tokens = chat.end_tokens()};
    if (!r.seeded) g.sampling.seed = std::random_device{}();
    return std::make_shared<Job>(std::move(prompt), std::move(g));
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    CompletionRequest r;
    std::shared_ptr<Job> job;
    try {
      r = parse_request(req.body, is_chat);
      job = make_job(r);
    } catch (const RequestError& e) {
      return send_error(res, e.status, e.what(), e.type, e.param);
    }
    if (!scheduler.submit(job)) {
      ++rejected;
      res.set_header("Retry-After", "1");
      return send_error(res, 503, "the server is busy: every slot is taken and the queue is full", "server_error", "",
                        "server_busy");
    }
    const ResponseHead head{(is_chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++), now_s(), o.model_id, is_chat};
    if (r.stream) return stream(res, job, head);
    answer(res, job, head);
  }

  static Usage usage(const Job::Result& j) { return {j.prompt_tokens, j.completion_tokens, j.reused_tokens}; }

  void answer(httplib::Response& res, const std::shared_ptr<Job>& job, const ResponseHead& head) {
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.request_timeout_s);
    for (;;) {
      const Job::Result part = job->take(200);
      text += part.text;
      if (part.finished) {
        if (!part.error.empty()) return send_error(res, part.finish_reason == "cancelled" ? 503 : 500, part.error, "server_error");
        if (part.finish_reason == "cancelled") return send_error(res, 503, "the request was cancelled", "server_error");
        return res.set_content(completion_json(head, text, part.finish_reason, usage(part)).dump(), "application/json");
      }
      if (std::chrono::steady_clock::now() > deadline) {
        job->cancel();
        return send_error(res, 504, "the request ran past the server's time limit", "server_error");
      }
    }
  }

  void stream(httplib::Response& res, const std::shared_ptr<Job>& job, const ResponseHead& head) {
    res.set_header("Cache-Control", "no-cache");
    auto first = std::make_shared<bool>(true);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.request_timeout_s);
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, head, first, deadline](size_t, httplib::DataSink& sink) {
          const auto send = [&](const json& j) {
            const std::string event = "data: " + j.dump() + "\n\n";
            return sink.write(event.data(), event.size());
          };
          const Job::Result part = job->take(200);
          if (!sink.is_writable()) {
            job->cancel();
            return false;
          }
          if (!part.text.empty() || *first) {
            if (!send(chunk_json(head, part.text, *first, "", nullptr))) return job->cancel(), false;
            *first = false;
          }
          if (part.finished) {
            if (!part.error.empty() || part.finish_reason == "cancelled")
              send(error_json(part.error.empty() ? "the request was cancelled" : part.error, "server_error", ""));
            else {
              const Usage u = usage(part);
              send(chunk_json(head, "", false, part.finish_reason, &u));
            }
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            sink.done();
            return true;
          }
          if (std::chrono::steady_clock::now() > deadline) return job->cancel(), false;
          return true;
        },
        [job](bool success) {
          if (!success) job->cancel();  // the client went away: its slot is freed at the next step
        });
  }
};

Server::Server(Scheduler& scheduler, const text::Tokenizer& tok, const ChatTemplate& chat, const ServerOptions& o)
    : impl_(std::make_unique<Impl>(scheduler, tok, chat, o)) {}

Server::~Server() = default;

int Server::bind() {
  Impl& m = *impl_;
  if (m.o.port == 0) {
    const int port = m.http.bind_to_any_port(m.o.host);
    if (port <= 0) throw std::runtime_error("cannot bind to " + m.o.host);
    return m.o.port = port;
  }
  if (!m.http.bind_to_port(m.o.host, m.o.port))
    throw std::runtime_error("cannot bind to " + m.o.host + ":" + std::to_string(m.o.port) + " (in use, or not an address here)");
  return m.o.port;
}

void Server::run() { impl_->http.listen_after_bind(); }
bool Server::running() const { return impl_->http.is_running(); }
void Server::stop() { impl_->http.stop(); }

}  // namespace wren::serve
