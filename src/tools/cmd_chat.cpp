// wren chat: a conversation in the terminal. One session holds the whole conversation: each
// turn runs only its new tokens (the end of the last answer, the user's message, the opening
// of the next answer), never the earlier turns again. Answers stream as they are produced;
// Ctrl-C stops the answer and keeps the chat. Commands: /reset, /save FILE, /load FILE,
// /stats, /quit. Without a terminal it reads one message per line from stdin and writes
// one answer per line to stdout, so it can be scripted.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "runtime/generation.h"
#include "runtime/model_files.h"
#include "serve/chat_file.h"
#include "serve/chat_template.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/kv_option.h"
#include "tools/sampling_options.h"

namespace wren::tools {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

struct ChatArgs {
  std::string model, system, chat_template, kv = "auto";
  GenerationOptions gen{.sampling = {.temperature = 0.8f}, .max_tokens = 512};
  int64_t context = 0;
  int threads = 2;
};

struct TurnStats {
  int64_t fed = 0;  // tokens this turn ran before answering
  bool reprefilled = false;
  bool restored = false;  // no turn since /load: its state was restored, no token run
  GenerationTimes times = {};
};

class Chat {
 public:
  Chat(const ChatArgs& a, std::shared_ptr<const Model> model, const text::Tokenizer& tok, serve::ChatFormat f)
      : a_(a), model_(std::move(model)), tok_(tok), tmpl_(f, tok) {
    reset();
  }

  void reset() {
    session_ = new_session();
    messages_.clear();
    fed_.clear();
    pending_ = -1;
    if (!a_.system.empty()) messages_.push_back({"system", a_.system});
  }

  // Runs one user message and streams the answer to `out`.
  void turn(const std::string& user, std::ostream& out) {
    messages_.push_back({"user", user});
    const std::vector<serve::PromptPiece> pieces = tmpl_.render(messages_, true);
    std::vector<int32_t> tokens = new_tokens(pieces);
    if (pending_ >= 0) tokens.insert(tokens.begin(), pending_);  // the last answer's final token, sampled but not run
    pending_ = -1;
    GenerationOptions o = a_.gen;
    o.end_tokens = tmpl_.end_tokens();
    o.eos = tok_.token_id("<|endoftext|>");
    const int64_t room = session_->context() - session_->position() - int64_t(tokens.size());
    if (room < 1) {
      messages_.pop_back();
      throw std::runtime_error("the conversation fills the context of " + std::to_string(session_->context()) +
                               " tokens: /reset to start again");
    }
    o.max_tokens = int(std::min<int64_t>(o.max_tokens, room));
    Generation gen(*session_, tok_, o);
    last_ = {.fed = int64_t(tokens.size()), .reprefilled = last_.reprefilled};
    gen.prefill(tokens, true);
    fed_ = pieces;
    std::string answer;
    g_interrupted = 0;
    while (!gen.done() && !g_interrupted) {
      const std::string_view piece = gen.step();
      answer += piece;
      out << piece << std::flush;
    }
    const bool stopped = g_interrupted && !gen.done();
    const std::string rest = gen.finish();
    answer += rest;
    out << rest << (stopped ? " [stopped]" : "") << "\n" << std::flush;
    if (gen.done() && !gen.hit_end_token() && gen.chosen() >= 0) pending_ = gen.chosen();
    last_.times = gen.times();
    prompt_run_ += last_.times.prompt_tokens;
    messages_.push_back({"assistant", answer});
  }

  int64_t position() const { return session_->position(); }

  std::string stats() const {
    const GenerationTimes& t = last_.times;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "session: %lld of %lld tokens, %zu messages, chat template %s\n"
                  "last turn: %lld new tokens run%s (%.1f tokens/s), %d generated (%.2f tokens/s)\n"
                  "this chat ran %lld prompt tokens in all\n",
                  (long long)session_->position(), (long long)session_->context(), messages_.size(),
                  std::string(serve::format_name(tmpl_.format())).c_str(), (long long)last_.fed,
                  last_.reprefilled ? ", the whole conversation again" : last_.restored ? ", state loaded from a file" : "",
                  t.prefill_s > 0 ? double(t.prompt_tokens) / t.prefill_s : 0.0, t.generated, t.decode_tokens_per_s(),
                  (long long)prompt_run_);
    return buf;
  }

  // The conversation and the session's whole state (serve/chat_file.h): /load continues
  // from the saved caches, rings and recurrent states, running no token again.
  void save(const std::string& path) const {
    serve::save_chat(path, *session_, {.format = tmpl_.format(), .messages = messages_, .pending = pending_});
  }

  // Into a fresh session, so that a file refused halfway leaves the chat as it was.
  void load(const std::string& path) {
    std::unique_ptr<Session> session = new_session();
    serve::SavedChat saved = serve::load_chat(path, *session, tok_.vocab_size());
    if (saved.format != tmpl_.format())
      throw std::runtime_error(path + ": saved with chat template " + std::string(serve::format_name(saved.format)) +
                               ", this chat uses " + std::string(serve::format_name(tmpl_.format())));
    std::vector<serve::PromptPiece> fed;
    try {
      // The pieces that were run: every message but the last answer (its tokens are in the state).
      const bool answered = !saved.messages.empty() && saved.messages.back().role == "assistant";
      fed = tmpl_.render(std::span(saved.messages).first(saved.messages.size() - (answered ? 1 : 0)), true);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
    session_ = std::move(session);
    messages_ = std::move(saved.messages);
    fed_ = session_->position() > 0 ? std::move(fed) : std::vector<serve::PromptPiece>{};
    pending_ = saved.pending;
    last_ = {.restored = true};
  }

 private:
  std::unique_ptr<Session> new_session() const {
    return std::make_unique<Session>(model_, SessionOptions{.context = a_.context, .threads = a_.threads,
                                                            .lm_head = lm_head_for(a_.gen.sampling, true),
                                                            .kv = kv_choice(a_.kv)});
  }

  // The tokens the session has not seen: after the pieces already fed, skip the answer
  // (the session holds the tokens that produced it) and encode the rest. When the template
  // does not extend what was fed (it rewrote an earlier turn), start a fresh session.
  std::vector<int32_t> new_tokens(const std::vector<serve::PromptPiece>& pieces) {
    last_.reprefilled = false;
    if (session_->position() == 0 || fed_.empty()) return tmpl_.encode(pieces);
    size_t i = 0;
    for (; i + 1 < fed_.size(); ++i)
      if (i >= pieces.size() || pieces[i].text != fed_[i].text) return again(pieces);
    if (i >= pieces.size() || pieces[i].text.rfind(fed_[i].text, 0) != 0) return again(pieces);
    std::vector<serve::PromptPiece> rest;
    if (pieces[i].text.size() > fed_[i].text.size())  // an empty answer: the template continues in the same piece
      rest.push_back({pieces[i].text.substr(fed_[i].text.size()), true});
    else if (i + 1 < pieces.size() && !pieces[i + 1].template_text)
      ++i;  // the answer
    rest.insert(rest.end(), pieces.begin() + int64_t(i) + 1, pieces.end());
    return tmpl_.encode(rest);
  }

  std::vector<int32_t> again(const std::vector<serve::PromptPiece>& pieces) {
    std::vector<serve::ChatMessage> keep = messages_;
    reset();
    messages_ = keep;
    last_.reprefilled = true;
    return tmpl_.encode(pieces);
  }

  ChatArgs a_;
  std::shared_ptr<const Model> model_;
  const text::Tokenizer& tok_;
  serve::ChatTemplate tmpl_;
  std::unique_ptr<Session> session_;
  std::vector<serve::ChatMessage> messages_;
  std::vector<serve::PromptPiece> fed_;  // the pieces of the last prompt run
  int32_t pending_ = -1;
  TurnStats last_;
  int64_t prompt_run_ = 0;  // prompt tokens this process ran, every turn (a /load runs none)
};

// Ctrl-C interrupts a read (no SA_RESTART) and the answer loop, never the program.
void catch_ctrl_c() {
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

bool command(Chat& chat, const std::string& line) {
  const size_t space = line.find(' ');
  const std::string name = line.substr(0, space), arg = space == std::string::npos ? "" : line.substr(space + 1);
  if (name == "/reset") chat.reset(), std::cout << "(conversation cleared)\n";
  else if (name == "/stats") std::cout << chat.stats();
  else if (name == "/save" || name == "/load") {
    if (arg.empty()) throw std::runtime_error(name + " needs a file name");
    if (name == "/save") chat.save(arg);
    else chat.load(arg);
    std::cout << (name == "/save" ? "(saved to " : "(loaded from ") << arg << ": " << chat.position() << " tokens of state)\n";
  } else if (name == "/quit" || name == "/exit") return false;
  else std::cout << "unknown command " << name << ": /reset, /save FILE, /load FILE, /stats, /quit\n";
  std::cout << std::flush;
  return true;
}

void run(ChatArgs a) {
  auto model = open_model(a.model);
  const text::Tokenizer tok = text::Tokenizer::load(a.model + "/tokenizer.json");
  const serve::ChatFormat format = serve::chat_format_for(a.model, a.chat_template);
  if (a.context == 0) a.context = std::min<int64_t>(model->config.context_length, 4096);
  Chat chat(a, model, tok, format);
  const bool tty = isatty(0) && isatty(1);
  catch_ctrl_c();
  if (tty) std::cout << "wren chat: " << a.model << " (" << serve::format_name(format) << "); /stats /reset /save FILE /load FILE /quit\n";
  for (;;) {
    if (tty) std::cout << "> " << std::flush;
    std::string line;
    g_interrupted = 0;
    if (!std::getline(std::cin, line)) {
      if (!g_interrupted) break;  // end of input
      std::cin.clear();
      clearerr(stdin);
      std::cout << "\n(/quit or Ctrl-D leaves)\n";
      continue;
    }
    if (line.empty()) continue;
    try {
      if (line[0] == '/') {
        if (!command(chat, line)) break;
      } else {
        chat.turn(line, std::cout);
      }
    } catch (const std::exception& e) {
      std::cout << std::flush;
      std::fprintf(stderr, "wren chat: %s\n", e.what());
    }
  }
  if (tty) std::cout << "\n";
}

}  // namespace

void register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "talk to a model in the terminal (one session across turns)");
  static ChatArgs a;
  SamplerParams& sp = a.gen.sampling;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("--system", a.system, "system message");
  cmd->add_option("--chat-template", a.chat_template, "chat format instead of the one tokenizer_config.json names: " + serve::format_names());
  cmd->add_option("-n,--max-tokens", a.gen.max_tokens, "most tokens per answer")->check(CLI::PositiveNumber)->capture_default_str();
  add_sampling_options(cmd, sp);
  cmd->add_option("-c,--ctx-size", a.context, "session context in tokens (default: the model's, at most 4096)")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  add_kv_option(cmd, a.kv);
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
