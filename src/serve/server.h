// serve/: the HTTP face of the scheduler (cpp-httplib): OpenAI's endpoints
//   POST /v1/completions, POST /v1/chat/completions (JSON, or server-sent events with stream),
//   GET /v1/models, and GET /health, GET /metrics (Prometheus text).
// Each connection has a thread of a bounded pool; a request's thread turns the body into a
// Job, queues it and relays what the engine thread produces. Every failure is an OpenAI
// error object with an HTTP status: 400 for the request's fault (naming the field), 401
// without the API key, 413 for a body past the limit, 503 when the queue is full.
#pragma once

#include <memory>
#include <string>

#include "serve/chat_template.h"
#include "serve/scheduler.h"
#include "text/tokenizer.h"

namespace wren::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bind() returns it)
  std::string api_key;  // not empty: /v1/* and /metrics need "Authorization: Bearer <key>"
  std::string model_id;
  size_t max_body_bytes = size_t(1) << 20;
  int max_tokens = 0;       // the most a request may ask for; 0: the context
  int connections = 32;     // threads serving connections; more wait in the kernel's backlog
  int read_timeout_s = 30, write_timeout_s = 30;
  int request_timeout_s = 600;  // a request still running after this is cancelled
};

class Server {
 public:
  Server(Scheduler& scheduler, const text::Tokenizer& tok, const ChatTemplate& chat, const ServerOptions& o);
  ~Server();
  int bind();  // the port bound; throws when it cannot bind
  void run();  // serves until stop()
  bool running() const;  // run() is listening
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wren::serve
