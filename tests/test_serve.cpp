// serve/: chat-template detection and rendering, request parsing, and the scheduler (slots
// running together give each request what it gives alone; a continued chat reuses state).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/json_reader.h"
#include "config/parse.h"
#include "config/read_file.h"
#include "runtime/generation.h"
#include "runtime/model_files.h"
#include "serve/chat_file.h"
#include "serve/chat_template.h"
#include "serve/request.h"
#include "serve/scheduler.h"
#include "temp_dir.h"
#include "text/bpe_train.h"
#include "test_util.h"

namespace wren::serve {
namespace {

const std::string kShipped = std::string(WREN_SOURCE_DIR) + "/models/embla-small";

// The shipped tokenizer with the special tokens of every format added after its vocabulary.
const text::Tokenizer& tokenizer_with_specials() {
  static const text::Tokenizer tok = [] {
    Json j = Json::parse(read_file(kShipped + "/tokenizer.json"));
    int32_t id = 4096;
    for (const char* s : {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                          "<|eot_id|>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<s>", "</s>",
                          "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
                          "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|start_of_role|>", "<|end_of_role|>",
                          "<|end_of_text|>"})
      j["added_tokens"].push_back({{"id", id++}, {"content", s}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", true}});
    return text::Tokenizer::from_json(j, "tokenizer");
  }();
  return tok;
}

std::string joined(const std::vector<PromptPiece>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p.text;
  return s;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Why?"}};

// Excerpts of the programs these formats ship in tokenizer_config.json (their markers).
TEST(ChatTemplate, DetectsTheCommonFormatsByTheirMarkers) {
  const std::string chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
  EXPECT_EQ(detect_format(chatml, "t"), ChatFormat::chatml);
  EXPECT_EQ(detect_format(chatml + "{%- if enable_thinking %}<think>\\n\\n</think>{% endif %}", "t"), ChatFormat::qwen3);
  EXPECT_EQ(detect_format("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
                          "message['content'] | trim + '<|eot_id|>' }}", "t"),
            ChatFormat::llama3);
  EXPECT_EQ(detect_format("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}", "t"),
            ChatFormat::gemma);
  EXPECT_EQ(detect_format("{{ '[INST] ' + message['content'] + ' [/INST]' }}", "t"), ChatFormat::mistral);
  // DeepSeek's distilled Qwen models keep ChatML's tokens in the vocabulary: DeepSeek's markers win.
  EXPECT_EQ(detect_format("{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜>'}}<|im_start|>", "t"), ChatFormat::deepseek);
  EXPECT_EQ(detect_format(kWrenJinja, "t"), ChatFormat::wren);
  // Phi-3.5-mini-instruct's program, and Phi-4-mini-instruct's.
  EXPECT_EQ(detect_format("{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
                          "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
                          "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
                          "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
                          "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}", "t"),
            ChatFormat::phi3);
  EXPECT_EQ(detect_format("{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
                          "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}", "t"),
            ChatFormat::phi4);
  // Granite 3.3's program (its role markers), OLMo 2 Instruct's (Tulu 3).
  EXPECT_EQ(detect_format("{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + "
                          "'<|end_of_text|>\n' }}", "t"),
            ChatFormat::granite);
  EXPECT_EQ(detect_format("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + "
                          "message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + "
                          "'\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last %}{{ '<|assistant|>\n'  + "
                          "message['content'] + eos_token + '\n' }}{% else %}{{ '<|assistant|>\n'  + message['content'] + "
                          "eos_token }}{% endif %}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}"
                          "{% endif %}{% endfor %}", "t"),
            ChatFormat::olmo2);
}

TEST(ChatTemplate, AnUnknownProgramIsAnErrorNamingTheFileAndTheFormats) {
  for (const std::string& jinja : {std::string("{{ message['content'] }}"),
                                   std::string("{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>' }}")}) {
    try {
      detect_format(jinja, "dir/tokenizer_config.json: chat_template");
      ADD_FAILURE() << "accepted " << jinja;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("dir/tokenizer_config.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("chatml, qwen3, llama3"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplate, FormatForADirectory) {
  EXPECT_EQ(chat_format_for(kShipped, ""), ChatFormat::wren);  // the shipped model's own
  EXPECT_EQ(chat_format_for(kShipped, "gemma"), ChatFormat::gemma);
  EXPECT_THROW(chat_format_for(kShipped, "jinja2"), std::runtime_error);
  testing_util::TempDir dir;
  EXPECT_THROW(chat_format_for(dir.path.string(), ""), std::runtime_error);  // no tokenizer_config.json
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "default", "template": "<|im_start|>"}]})";
  EXPECT_EQ(chat_format_for(dir.path.string(), ""), ChatFormat::chatml);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": 7})";
  EXPECT_THROW(chat_format_for(dir.path.string(), ""), std::runtime_error);
}

// The expected texts are the formats as their model cards write them.
TEST(ChatTemplate, RendersEachFormat) {
  const text::Tokenizer& tok = tokenizer_with_specials();
  const auto render = [&](ChatFormat f) { return joined(ChatTemplate(f, tok).render(kConversation, true)); };
  EXPECT_EQ(render(ChatFormat::chatml),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!"
            "<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(ChatFormat::llama3),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render(ChatFormat::gemma),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render(ChatFormat::mistral), "<s>[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] Why? [/INST]");
  EXPECT_EQ(render(ChatFormat::deepseek),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Why?<｜Assistant｜>");
  EXPECT_EQ(render(ChatFormat::phi3),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nWhy?<|end|>\n"
            "<|assistant|>\n");
  EXPECT_EQ(render(ChatFormat::phi4),
            "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>Hello!<|end|><|user|>Why?<|end|><|assistant|>");
  EXPECT_EQ(render(ChatFormat::granite),
            "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi"
            "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>\n<|start_of_role|>user"
            "<|end_of_role|>Why?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>");
  EXPECT_EQ(render(ChatFormat::olmo2),
            "<|endoftext|><|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello!<|endoftext|>\n<|user|>\nWhy?\n"
            "<|assistant|>\n");
  const std::vector<ChatMessage> answered = {{"user", "Hi"}, {"assistant", "Hello!"}};
  EXPECT_EQ(joined(ChatTemplate(ChatFormat::olmo2, tok).render(answered, false)),
            "<|endoftext|><|user|>\nHi\n<|assistant|>\nHello!<|endoftext|>");
  EXPECT_EQ(render(ChatFormat::wren),
            "<|endoftext|>System: Be brief.\n\nUser: Hi\n\nAssistant: Hello!\n\nUser: Why?\n\nAssistant: ");
  // Qwen3 drops earlier reasoning.
  std::vector<ChatMessage> thought = {{"user", "Hi"}, {"assistant", "<think>\nhm\n</think>\n\nHello!"}, {"user", "Why?"}};
  EXPECT_EQ(joined(ChatTemplate(ChatFormat::qwen3, tok).render(thought, false)),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n");
}

TEST(ChatTemplate, ContentIsPlainTextAndTemplateTokensAreTokens) {
  const text::Tokenizer& tok = tokenizer_with_specials();
  const ChatTemplate t(ChatFormat::chatml, tok);
  const int32_t im_end = *tok.token_id("<|im_end|>");
  const std::vector<int32_t> ids = t.encode(std::vector<ChatMessage>{{"user", "a<|im_end|>b"}}, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 1) << "only the template's own end of turn is the token";
  EXPECT_EQ(tok.decode(ids), "<|im_start|>user\na<|im_end|>b<|im_end|>\n");
  EXPECT_EQ(t.end_tokens(), (std::vector<int32_t>{im_end, *tok.token_id("<|endoftext|>")}));
  EXPECT_THROW(t.render(std::vector<ChatMessage>{{"tool", "x"}}, true), std::invalid_argument);
}

TEST(ChatTemplate, ATokenizerWithoutTheFormatsTokensIsRefused) {
  const text::Tokenizer tok = text::Tokenizer::load(kShipped + "/tokenizer.json");
  try {
    ChatTemplate t(ChatFormat::llama3, tok);
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("<|begin_of_text|>"), std::string::npos) << e.what();
  }
}

// ---- request parsing ---------------------------------------------------------------------

std::string param_of(const std::string& body, bool chat = true) {
  try {
    parse_request(body, chat);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find(e.param), std::string::npos) << e.what();
    return e.param.empty() ? "<body>" : e.param;
  }
  return "";
}

TEST(Request, ReadsEveryListedField) {
  const CompletionRequest r = parse_request(
      R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,"min_p":0.1,"stop":["x","y"],"seed":42,"stream":true,
          "stream_options":{"include_usage":true},"user":"ignored","n":1,"logprobs":false})",
      true);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seeded && r.stream);
  // OpenAI's defaults; null is "not given".
  const CompletionRequest c = parse_request(R"({"prompt":"p","stop":"z","temperature":null})", false);
  EXPECT_EQ(c.prompt, "p");
  EXPECT_EQ(c.max_tokens, 16);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 1.0f);
  EXPECT_EQ(c.sampling.top_k, 0);
  EXPECT_FALSE(c.seeded || c.stream);
  EXPECT_EQ(c.stop, std::vector<std::string>{"z"});
  EXPECT_FALSE(parse_request(R"({"messages":[{"role":"user","content":"x"}]})", true).max_tokens.has_value());
}

TEST(Request, BadBodiesNameTheField) {
  EXPECT_EQ(param_of("{\"messages\": [", true), "<body>");
  EXPECT_EQ(param_of("[1,2]"), "<body>");
  EXPECT_EQ(param_of(R"({"model":"m"})"), "messages");
  EXPECT_EQ(param_of(R"({"messages":[]})"), "messages");
  EXPECT_EQ(param_of(R"({"messages":[{"role":"user"}]})"), "messages[0].content");
  EXPECT_EQ(param_of(R"({"messages":[{"role":"user","content":"a"},{"role":"tool","content":"b"}]})"), "messages[1].role");
  EXPECT_EQ(param_of(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"), "messages[0].content[0].type");
  EXPECT_EQ(param_of(R"({"messages":[{"role":"user","content":5}]})"), "messages[0].content");
  const std::string ok = R"("messages":[{"role":"user","content":"a"}])";
  EXPECT_EQ(param_of("{" + ok + R"(,"temperature":"hot"})"), "temperature");
  EXPECT_EQ(param_of("{" + ok + R"(,"temperature":3})"), "temperature");
  EXPECT_EQ(param_of("{" + ok + R"(,"top_p":0})"), "top_p");
  EXPECT_EQ(param_of("{" + ok + R"(,"top_k":1.5})"), "top_k");
  EXPECT_EQ(param_of("{" + ok + R"(,"min_p":-1})"), "min_p");
  EXPECT_EQ(param_of("{" + ok + R"(,"max_tokens":0})"), "max_tokens");
  EXPECT_EQ(param_of("{" + ok + R"(,"max_tokens":"10"})"), "max_tokens");
  EXPECT_EQ(param_of("{" + ok + R"(,"stop":["a","b","c","d","e"]})"), "stop");
  EXPECT_EQ(param_of("{" + ok + R"(,"stop":[1]})"), "stop[0]");
  EXPECT_EQ(param_of("{" + ok + R"(,"stop":""})"), "stop");
  EXPECT_EQ(param_of("{" + ok + R"(,"stream":"yes"})"), "stream");
  EXPECT_EQ(param_of("{" + ok + R"(,"seed":"1"})"), "seed");
  EXPECT_EQ(param_of("{" + ok + R"(,"model":7})"), "model");
  EXPECT_EQ(param_of("{" + ok + R"(,"n":2})"), "n");
  EXPECT_EQ(param_of("{" + ok + R"(,"logprobs":true})"), "logprobs");
  EXPECT_EQ(param_of("{" + ok + R"(,"presence_penalty":0.5})"), "presence_penalty");
  EXPECT_EQ(param_of(R"({"prompt":[1,2,3]})", false), "prompt");
  EXPECT_EQ(param_of(R"({"prompt":"a","max_tokens":-1})", false), "max_tokens");
  EXPECT_EQ(param_of(R"({"prompt":"a"})", false), "");
}

// ---- the scheduler -----------------------------------------------------------------------

struct Shipped {
  std::shared_ptr<const Model> model = open_model(kShipped);
  text::Tokenizer tok = text::Tokenizer::load(kShipped + "/tokenizer.json");
};
Shipped& shipped() {
  static Shipped s;
  return s;
}

// What the request gives alone: one fresh session, Generation's own loop.
std::string alone(const std::vector<int32_t>& prompt, const GenerationOptions& o) {
  Session session(shipped().model, {.context = 512, .threads = 1, .lm_head = lm_head_for(o.sampling, true)});
  Generation gen(session, shipped().tok, o);
  gen.prefill(prompt, true);
  std::string text;
  while (!gen.done()) text += gen.step();
  return text + gen.finish();
}

std::string drain(Job& job, Job::Result* last = nullptr) {
  std::string text;
  for (;;) {
    Job::Result r = job.take(1000);
    text += r.text;
    if (r.finished) {
      if (last) *last = r;
      return text;
    }
  }
}

GenerationOptions greedy(int n) { return {.sampling = {.temperature = 0}, .max_tokens = n, .ignore_eos = true}; }

TEST(Scheduler, SlotsRunningTogetherGiveWhatEachGivesAlone) {
  const text::Tokenizer& tok = shipped().tok;
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog ran to the park and", "Tom said",
                                            "In the morning, the sun was bright and the birds", "She"};
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : prompts) ids.push_back(tok.encode(p));
  Scheduler sched(shipped().model, tok, {.parallel = 3, .queue = 8, .context = 512, .threads = 1, .prefill_chunk = 3});
  std::vector<std::shared_ptr<Job>> jobs;
  for (size_t i = 0; i < ids.size(); ++i) {
    jobs.push_back(std::make_shared<Job>(ids[i], greedy(int(6 + 5 * i))));
    ASSERT_TRUE(sched.submit(jobs.back()));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    Job::Result r;
    EXPECT_EQ(drain(*jobs[i], &r), alone(ids[i], greedy(int(6 + 5 * i)))) << prompts[i];
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.completion_tokens, int64_t(6 + 5 * i));
    EXPECT_EQ(r.prompt_tokens, int64_t(ids[i].size()));
  }
  EXPECT_EQ(sched.stats().busy, 0);
}

// A decode step that throws ends its batch's requests with the error, and the scheduler goes
// on: the prompt runs, then its first decode step throws (testing_util::nan_rows_model, a q8
// cache). A request of one token never runs a decode step, so it still finishes.
TEST(Scheduler, ADecodeStepThatThrowsEndsItsRequestsNotTheScheduler) {
  const std::vector<int32_t> prompt = {5, 6, 7};
  const auto model = testing_util::nan_rows_model(prompt);
  const text::Tokenizer tok = text::Tokenizer::from_json(text::train_bpe({}, {.vocab_size = 257}), "bytes");
  Scheduler sched(model, tok, {.parallel = 2, .queue = 4, .context = 32, .threads = 1, .kv = KvType::q8});
  auto failing = std::make_shared<Job>(prompt, greedy(4));
  ASSERT_TRUE(sched.submit(failing));
  Job::Result r;
  drain(*failing, &r);
  EXPECT_NE(r.error.find("quantize"), std::string::npos) << r.finish_reason << ": " << r.error;  // q8's refusal
  auto one = std::make_shared<Job>(prompt, greedy(1));
  ASSERT_TRUE(sched.submit(one));
  drain(*one, &r);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.completion_tokens, 1);
}

TEST(Scheduler, AContinuedConversationRunsOnlyItsNewTokens) {
  const text::Tokenizer& tok = shipped().tok;
  Scheduler sched(shipped().model, tok, {.parallel = 2, .queue = 4, .context = 512, .threads = 1});
  const std::vector<int32_t> first = tok.encode("Once upon a time there was a cat");
  auto a = std::make_shared<Job>(first, greedy(5));
  ASSERT_TRUE(sched.submit(a));
  const std::string answer = drain(*a);
  // The slot ran the prompt and the first four answer tokens (the fifth was sampled, not run).
  std::vector<int32_t> second = first;
  const std::vector<int32_t> answer_ids = tok.encode(answer);
  second.insert(second.end(), answer_ids.begin(), answer_ids.end());
  const std::vector<int32_t> more = tok.encode(". The cat");
  second.insert(second.end(), more.begin(), more.end());
  auto b = std::make_shared<Job>(second, greedy(6));
  ASSERT_TRUE(sched.submit(b));
  Job::Result r;
  EXPECT_EQ(drain(*b, &r), alone(second, greedy(6)));
  if (std::vector<int32_t>(answer_ids.begin(), answer_ids.begin() + 4) ==
      std::vector<int32_t>(second.begin() + int64_t(first.size()), second.begin() + int64_t(first.size()) + 4))
    EXPECT_EQ(r.reused_tokens, int64_t(first.size()) + 4);
  else
    ADD_FAILURE() << "the answer did not re-encode to its own tokens; pick another prompt";
  // A prompt that does not extend any history starts from nothing.
  auto c = std::make_shared<Job>(tok.encode("A different story"), greedy(3));
  ASSERT_TRUE(sched.submit(c));
  drain(*c, &r);
  EXPECT_EQ(r.reused_tokens, 0);
}

TEST(Scheduler, AFullQueueRefusesAndACancelledJobFreesItsSlot) {
  const text::Tokenizer& tok = shipped().tok;
  Scheduler sched(shipped().model, tok, {.parallel = 1, .queue = 1, .context = 512, .threads = 1});
  auto long_job = std::make_shared<Job>(tok.encode("Once"), greedy(400));
  ASSERT_TRUE(sched.submit(long_job));
  while (sched.stats().busy == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto waiting = std::make_shared<Job>(tok.encode("Then"), greedy(3));
  ASSERT_TRUE(sched.submit(waiting));
  EXPECT_FALSE(sched.submit(std::make_shared<Job>(tok.encode("No room"), greedy(3))));
  long_job->cancel();
  Job::Result r;
  drain(*long_job, &r);
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_LT(r.completion_tokens, 400);
  EXPECT_EQ(drain(*waiting), alone(tok.encode("Then"), greedy(3)));
}

// A long prompt arriving while a stream decodes runs one chunk per step: the stream waits for
// one chunk of it between two of its tokens, never for the whole prompt.
TEST(Scheduler, ANewPromptDelaysARunningStreamByOneChunkAtMost) {
  const text::Tokenizer& tok = shipped().tok;
  Scheduler sched(shipped().model, tok, {.parallel = 2, .queue = 4, .context = 512, .threads = 1, .prefill_chunk = 4});
  auto running = std::make_shared<Job>(tok.encode("Once"), greedy(400));
  ASSERT_TRUE(sched.submit(running));
  while (sched.stats().decode_steps < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<int32_t> prompt;
  while (prompt.size() < 60) {
    const std::vector<int32_t> more = tok.encode(" The little dog ran to the park and played with a ball.");
    prompt.insert(prompt.end(), more.begin(), more.end());
  }
  auto arriving = std::make_shared<Job>(prompt, greedy(3));
  ASSERT_TRUE(sched.submit(arriving));
  EXPECT_EQ(drain(*arriving), alone(prompt, greedy(3)));
  EXPECT_FALSE(running->take(0).finished) << "the stream ended before the prompt had run: nothing was measured";
  running->cancel();
  drain(*running);
  EXPECT_EQ(sched.stats().most_prompt_tokens_between_steps, 4);
  EXPECT_GT(sched.stats().longest_step_gap_seconds, 0);
}

// The next answer of a session at temperature 0, after `more` tokens.
std::string continued(Session& s, const std::vector<int32_t>& more, int64_t* prompt_tokens = nullptr) {
  Generation gen(s, shipped().tok, greedy(6));
  gen.prefill(more, true);
  std::string text;
  while (!gen.done()) text += gen.step();
  if (prompt_tokens) *prompt_tokens = gen.times().prompt_tokens;
  return text + gen.finish();
}

// A saved chat loaded into a fresh session continues exactly as the saved session does:
// same history, same next answer, and only the new tokens run.
TEST(ChatFile, ALoadedChatContinuesAsTheSavedSession) {
  const text::Tokenizer& tok = shipped().tok;
  testing_util::TempDir dir;
  const SessionOptions so{.context = 256, .threads = 1, .lm_head = lm_head_for(greedy(1).sampling, true)};
  Session saved(shipped().model, so);
  continued(saved, tok.encode("Once upon a time there was a cat"));
  const SavedChat chat{.format = ChatFormat::chatml, .messages = {{"user", "Hi"}, {"assistant", "Hello!"}}, .pending = 7};
  save_chat(dir / "chat", saved, chat);
  const std::vector<int32_t> more = tok.encode(". The cat");
  int64_t original_run = 0, loaded_run = 0;
  const std::string original = continued(saved, more, &original_run);

  Session loaded(shipped().model, so);
  const SavedChat back = load_chat(dir / "chat", loaded, tok.vocab_size());
  EXPECT_EQ(back.format, chat.format);
  EXPECT_EQ(back.pending, chat.pending);
  ASSERT_EQ(back.messages.size(), 2u);
  EXPECT_EQ(back.messages[1].content, "Hello!");
  EXPECT_EQ(loaded.position(), saved.position() - original_run - 5);  // before the continuation
  EXPECT_EQ(continued(loaded, more, &loaded_run), original);
  EXPECT_EQ(loaded_run, int64_t(more.size()));
  EXPECT_EQ(loaded.history(), saved.history());
}

// Truncated at every part, a byte changed in the JSON or the state, a huge claimed length,
// another context: each refused naming the file, none a crash.
TEST(ChatFile, DamagedOrForeignFilesAreRefusedNamingTheFile) {
  const text::Tokenizer& tok = shipped().tok;
  testing_util::TempDir dir;
  const SessionOptions so{.context = 128, .threads = 1};
  Session s(shipped().model, so);
  std::vector<float> logits(size_t(s.vocab_rows()));
  s.prefill(tok.encode("Once upon a time"), logits.data());
  save_chat(dir / "good", s, {.format = ChatFormat::wren, .messages = {{"user", "Once upon a time"}}});
  const std::string good = read_file(dir / "good");
  const auto refused = [&](const std::string& contents, const std::string& why, SessionOptions o) {
    const std::string path = dir / "bad";
    std::ofstream(path, std::ios::binary) << contents;
    Session fresh(shipped().model, o);
    try {
      load_chat(path, fresh, tok.vocab_size());
      ADD_FAILURE() << why << ": loaded";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << why << ": " << e.what();
    }
  };
  for (size_t cut : {size_t(0), size_t(5), size_t(19), size_t(40), good.size() / 2, good.size() - 1})
    refused(good.substr(0, cut), "cut at " + std::to_string(cut), so);
  std::string flipped = good;
  flipped.back() ^= 1;
  refused(flipped, "a state byte changed", so);
  std::string json = good;
  json[30] = '\x01';
  refused(json, "a JSON byte changed", so);
  std::string huge = good;
  huge[19] = '\x7f';
  refused(huge, "a huge JSON length", so);
  refused(good, "another context", {.context = 64, .threads = 1});
  refused(good + "x", "a byte appended", so);
}

}  // namespace
}  // namespace wren::serve
