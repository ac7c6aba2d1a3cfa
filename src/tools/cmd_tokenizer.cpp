// wren tokenizer: learn a byte-level BPE from text files and write tokenizer.json (train),
// show how a tokenizer.json splits text (encode), or turn ids back into text (decode).
// encode and decode read their input from the command line, a file or stdin (-f FILE, -f -);
// ids go in and out as llama.cpp's tokenize tool and Hugging Face print them: [1, 2, 3].
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "config/read_file.h"
#include "text/bpe_train.h"
#include "text/tokenizer.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

// Files named directly, and the regular files under named folders (sorted, so the result
// does not depend on directory order).
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    if (std::filesystem::is_directory(in)) {
      std::vector<std::string> found;
      for (auto& e : std::filesystem::recursive_directory_iterator(in))
        if (e.is_regular_file()) found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  return files;
}

// The text of an argument, or of -f FILE (- is stdin), exactly as bytes.
std::string read_input(const CLI::Option* arg, const std::string& text, const std::string& file, const char* what) {
  if (file.empty()) {
    if (!arg->count()) throw std::runtime_error(std::string("give the ") + what + " as an argument or with -f FILE (- for stdin)");
    return text;
  }
  if (arg->count()) throw std::runtime_error(std::string("give the ") + what + " either as an argument or with -f, not both");
  if (file == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  return read_file(file);
}

// Ids separated by spaces, commas or newlines, optionally in [brackets].
std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::string token;
  size_t count = 0;
  auto flush = [&] {
    if (token.empty()) return;
    ++count;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(token, &used);
    } catch (const std::exception&) {
    }
    if (used != token.size() || v < 0 || v > INT32_MAX)
      throw std::runtime_error("id " + std::to_string(count) + " is \"" + token + "\"; expected a non-negative integer");
    ids.push_back(int32_t(v));
    token.clear();
  };
  for (char c : s) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') flush();
    else token += c;
  }
  flush();
  return ids;
}

}  // namespace

void register_tokenizer(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "train or try a byte-level BPE tokenizer");
  cmd->require_subcommand(1);

  auto* train = cmd->add_subcommand("train", "learn a byte-level BPE from text files or folders");
  static std::vector<std::string> inputs;
  static std::string out;
  static text::BpeTrainOptions options;
  train->add_option("inputs", inputs, "UTF-8 text files or folders")->required();
  train->add_option("-o,--output", out, "tokenizer.json to write")->required();
  train->add_option("--vocab", options.vocab_size, "vocabulary size (256 bytes + merges + specials)")
      ->check(CLI::Range(257, 1 << 22))->capture_default_str();
  train->add_option("--min-frequency", options.min_frequency, "never merge a pair seen fewer times")->capture_default_str();
  train->callback([] { text::save_tokenizer_json(text::train_bpe_files(expand_inputs(inputs), options), out); });

  auto* encode = cmd->add_subcommand("encode", "print the token ids and pieces of a text");
  static std::string path, input, input_file;
  static bool ids_only = false, no_special = false;
  encode->add_option("-t,--tokenizer", path, "tokenizer.json")->required();
  static CLI::Option* text_arg = encode->add_option("text", input, "the text (or use -f)");
  encode->add_option("-f,--file", input_file, "read the text from a file (- for stdin)");
  encode->add_flag("--ids", ids_only, "print only the ids, as [1, 2, 3]");
  encode->add_flag("--no-special", no_special, "treat special tokens in the text as plain text");
  encode->callback([] {
    if (!input_file.empty()) input = read_text_input(input_file);
    else if (input.empty()) throw std::runtime_error("tokenizer encode: give the text (TEXT or -f FILE)");
    const text::Tokenizer tok = text::Tokenizer::load(path);
    std::vector<int32_t> ids = tok.encode(read_input(text_arg, input, input_file, "text"), !no_special);
    if (!ids_only) {
      for (int32_t id : ids) std::cout << id << "\t" << tok.token_text(id) << "\n";
      return;
    }
    std::cout << "[";
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? ", " : "") << ids[i];
    std::cout << "]\n";
  });

  auto* decode = cmd->add_subcommand("decode", "print the text of token ids");
  static std::string dec_path, dec_ids, dec_file;
  static bool skip_special = false;
  decode->add_option("-t,--tokenizer", dec_path, "tokenizer.json")->required();
  static CLI::Option* ids_arg = decode->add_option("ids", dec_ids, "ids, as \"1 2 3\" or \"[1, 2, 3]\" (or use -f)");
  decode->add_option("-f,--file", dec_file, "read the ids from a file (- for stdin)");
  decode->add_flag("--skip-special", skip_special, "leave out special tokens");
  decode->callback([] {
    const text::Tokenizer tok = text::Tokenizer::load(dec_path);
    std::cout << tok.decode(parse_ids(read_input(ids_arg, dec_ids, dec_file, "ids")), skip_special);
  });
}

}  // namespace wren::tools
