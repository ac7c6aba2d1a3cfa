// text/: a BPE tokenizer read from a Hugging Face tokenizer.json: byte-level BPE (GPT-2,
// GPT-4o, Llama-3, Qwen2/3, OLMo and our own trained ones, see bpe_train.h) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma, Phi-3).
//
// encode: text -> split out added tokens that skip normalization (longest match first) ->
// normalize (normalizer.h) -> split out the added tokens that match normalized text ->
// pre-tokenize (pre_tokenizer.h: regex splits, ByteLevel, Metaspace) -> symbols of each piece
// -> BPE: repeatedly merge the adjacent pair of lowest merge rank, leftmost first, until no
// pair has a merge. With ignore_merges (Llama-3) a piece that is itself in the vocabulary is
// one token. The symbols are the piece's bytes under ByteLevel; otherwise its characters, a
// character missing from the vocabulary becoming its UTF-8 bytes as "<0xNN>" tokens
// (byte_fallback) or else the unk_token (consecutive ones fused into one with fuse_unk) or
// else nothing, as in Hugging Face.
// decode: ids -> token strings -> the decoder's steps (decoder.h) -> UTF-8.
//
// The file is untrusted: any missing, ill-typed or unsupported field is a ConfigError naming
// the file and the field. Ids returned by encode carry no post-processing (no BOS/EOS).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/json_reader.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/merge_table.h"
#include "text/token_index.h"

namespace wren::text {

// A token id that does not exist, passed to decode or token_to_piece.
struct TokenIdError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tokenizer {
 public:
  static Tokenizer load(const std::string& path);
  // `origin` names the document in error messages.
  static Tokenizer from_json(const Json& j, const std::string& origin);

  // allow_special = false treats special added tokens ("<|endoftext|>") as plain text.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes a token stands for; may end (or start) in the middle of a UTF-8 character.
  const std::string& token_to_piece(int32_t id) const;
  // The token's string as written in the file (byte-level form, e.g. "Ġthe").
  const std::string& token_text(int32_t id) const;
  // One more than the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const { return int32_t(texts_.size()); }
  // Id of a token by its file string or an added token's content.
  std::optional<int32_t> token_id(std::string_view text) const;
  // Like token_id, but a missing token is an error naming it.
  int32_t special_id(std::string_view content) const;
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, normalized, single_word;
    std::string match;  // what is looked for: content, normalized if `normalized`
  };
  using Merge = MergeTable::Merge;

  // The steps of from_json, in order; each fails naming the field it reads.
  void read_model_options(JsonReader& model);
  void read_vocab(JsonReader& model);
  void read_merges(JsonReader& model);
  void read_added_tokens(JsonReader& root);
  void read_normalizer(JsonReader& root);
  void read_pre_tokenizer(JsonReader& root);
  void index_bytes(JsonReader& model);

  void index_added_tokens();
  // Cuts text at the added tokens of one kind (normalized or not), appending their ids to
  // out and passing each stretch between them to `gap`.
  template <typename Gap>
  void split_added(std::string_view text, bool normalized, bool allow_special, std::vector<int32_t>& out, Gap gap) const;
  void encode_segment(std::string_view text, bool at_text_start, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // The symbols BPE starts from (see the top of this file).
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void bpe(std::vector<int32_t> symbols, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t a, int32_t b) const;
  // The added token of a kind that starts at text[p], longest first, or nullptr.
  const Added* added_at(std::string_view text, size_t p, bool normalized, bool allow_special) const;

  std::vector<std::string> texts_;   // by id ("" for ids nobody uses)
  std::vector<std::string> pieces_;  // by id: the bytes (Decoder::piece)
  std::vector<uint8_t> kind_;        // by id: 0 unused, 1 vocab, 2 added, 3 special added
  TokenIndex vocab_;  // the vocabulary's strings (texts_) -> id; looked up by string_view
  int32_t vocab_id(std::string_view text) const { return vocab_.find(text, texts_); }  // -1: absent
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};      // byte-level: the token of each byte
  std::array<int32_t, 256> fallback_ids_{};  // byte_fallback: "<0xNN>", or -1
  std::vector<Added> added_;
  std::unordered_map<int32_t, std::string> decode_as_;  // normalized added tokens: their match
  // Indices into added_ by [normalized][first byte of match], longest first.
  std::array<std::array<std::vector<uint16_t>, 256>, 2> added_by_first_byte_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Decoder decoder_;
  bool ignore_merges_ = false, byte_level_ = false, byte_fallback_ = false, fuse_unk_ = false;
  std::string unk_token_;
  int32_t unk_id_ = -1;

  // Pieces repeat a lot in natural text; their tokens are remembered (bounded, cleared when full).
  mutable std::unique_ptr<std::mutex> cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// Decodes a stream of tokens into complete UTF-8 only: bytes of a character split across
// tokens are held until the character is whole; finish() flushes what is left as U+FFFD.
// Both return a view of an internal buffer, valid until the next call; the buffers are
// reserved up front, so decoding ordinary pieces allocates nothing per token.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string_view push(int32_t id);
  std::string_view finish();

 private:
  static constexpr size_t kReserve = 256;
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_, out_;
};

}  // namespace wren::text
