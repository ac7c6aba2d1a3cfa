// wren tokenizer: learn a byte-level BPE from text files and write tokenizer.json (train), or
// show how a tokenizer.json splits text (encode).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

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
  encode->add_option("-t,--tokenizer", path, "tokenizer.json")->required();
  auto* text = encode->add_option("text", input, "the text");
  encode->add_option("-f,--file", input_file, "read the text from this file (- for stdin)")->excludes(text);
  encode->callback([] {
    if (!input_file.empty()) input = read_text_input(input_file);
    else if (input.empty()) throw std::runtime_error("tokenizer encode: give the text (TEXT or -f FILE)");
    const text::Tokenizer tok = text::Tokenizer::load(path);
    for (int32_t id : tok.encode(input)) std::cout << id << "\t" << tok.token_text(id) << "\n";
  });
}

}  // namespace wren::tools
