// text/: loading tokenizer.json and byte-level BPE encode/decode (see tokenizer.h).
#include "text/tokenizer.h"

#include <algorithm>
#include <queue>

#include "text/unicode.h"

namespace wren::text {
namespace {

constexpr int64_t kMaxUnusedIds = int64_t(1) << 20;  // ids a tokenizer.json may leave without a token

std::string byte_level_text(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += byte_to_piece(uint8_t(c));
  return s;
}

}  // namespace

Tokenizer::Tokenizer() : cache_mutex_(std::make_unique<std::mutex>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) { return from_json(parse_json_file(path), path); }

Tokenizer Tokenizer::from_json(const Json& j, const std::string& origin) {
  Tokenizer t;
  JsonReader root(j, origin, "");
  JsonReader model = root.object("model");
  t.read_model_options(model);
  t.read_pre_tokenizer(root);  // first: whether the vocabulary must hold the 256 bytes
  t.read_vocab(model);
  t.index_bytes(model);
  t.read_merges(model);
  t.read_added_tokens(root);
  t.read_normalizer(root);
  t.index_added_tokens();
  t.decoder_ = Decoder::read(root);
  t.pieces_.reserve(t.texts_.size());
  advise_huge_pages(t.pieces_);
  t.pieces_.resize(t.texts_.size());
  for (size_t id = 0; id < t.texts_.size(); ++id) t.pieces_[id] = t.decoder_.piece(t.texts_[id]);
  // Hugging Face decodes an added token that matches normalized text from its normalized form.
  for (const Added& a : t.added_)
    if (a.normalized) {
      t.decode_as_[a.id] = a.match;
      t.pieces_[a.id] = t.decoder_.piece(a.match);
    }
  return t;
}

// The model: a BPE without the options we do not implement.
void Tokenizer::read_model_options(JsonReader& model) {
  if (model.has("type") && model.string("type") != "BPE")
    model.fail("type", "only \"BPE\" models are supported, got \"" + model.string("type") + "\"");
  byte_fallback_ = model.boolean_or("byte_fallback", false);
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  unk_token_ = model.string_or("unk_token", "");
  if (model.has("dropout") && model.number_or("dropout", 0, 0, 1) != 0)
    model.fail("dropout", "BPE dropout is not supported (it makes encoding random)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.string_or(affix, "").empty()) model.fail(affix, "subword affixes are not supported");
  ignore_merges_ = model.boolean_or("ignore_merges", false);
}

// Vocabulary: token -> id, unique ids, every byte present (byte-level BPE).
void Tokenizer::read_vocab(JsonReader& model) {
  const Json& vocab = model.raw("vocab");
  if (!vocab.is_object()) model.fail("vocab", "expected an object of token -> id, got " + json_value_text(vocab));
  // Tables are indexed by id: a few gaps are fine (a reserved range), but one id of 2^24 must
  // not make us allocate 16M entries for a handful of tokens. So each id is checked against
  // that bound before the tables grow to it, in the one pass that fills them.
  const int64_t id_bound = int64_t(vocab.size()) + kMaxUnusedIds;
  texts_.reserve(vocab.size());
  advise_huge_pages(texts_);
  kind_.reserve(vocab.size());
  vocab_.reserve(vocab.size(), texts_);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {  // keys are unique (the JSON reader refuses repeats)
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= INT32_MAX)
      model.fail("vocab", "token \"" + it.key() + "\" has id " + json_value_text(*it) + "; expected an integer in [0, 2^31-1)");
    if (it.key().empty()) model.fail("vocab", "the empty string is not a token");
    const int64_t id = it->get<int64_t>();
    if (id >= id_bound)
      model.fail("vocab", "id " + std::to_string(id) + " leaves more than " + std::to_string(kMaxUnusedIds) +
                              " ids unused among " + std::to_string(vocab.size()) + " tokens (ids must be nearly dense)");
    if (size_t(id) >= texts_.size()) {
      texts_.resize(size_t(id) + 1);
      kind_.resize(size_t(id) + 1, 0);
    }
    if (kind_[id]) model.fail("vocab", "id " + std::to_string(id) + " is given to both \"" + texts_[id] + "\" and \"" + it.key() + "\"");
    texts_[id] = it.key();
    kind_[id] = 1;
    vocab_.insert(texts_[id], int32_t(id), texts_);
  }
}

// Merges: "left right" or ["left", "right"], ranked by their order.
void Tokenizer::read_merges(JsonReader& model) {
  const Json& merges = model.raw("merges");
  if (!merges.is_array()) model.fail("merges", "expected a list, got " + json_value_text(merges));
  merges_.reserve(merges.size());
  std::string joined;  // a + b, reused: 200k merges allocate no strings
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    auto where = [&] { return "merges[" + std::to_string(i) + "]"; };
    std::string_view a, b;
    if (m.is_string()) {
      const std::string_view s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        model.fail(where(), "expected \"left right\", got " + json_value_text(m));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      model.fail(where(), "expected \"left right\" or [\"left\", \"right\"], got " + json_value_text(m));
    }
    joined.assign(a).append(b);
    const int32_t ia = vocab_id(a), ib = vocab_id(b), ic = vocab_id(joined);
    if (ia < 0 || ib < 0 || ic < 0)
      model.fail(where(), "merge of \"" + std::string(a) + "\" and \"" + std::string(b) + "\" uses a token that is not in the vocab");
    merges_.set(ia, ib, Merge{int32_t(i), ic});  // a repeat wins, as in HF
  }
}

// Added tokens: matched in the raw text before anything else.
void Tokenizer::read_added_tokens(JsonReader& root) {
  if (!root.has("added_tokens")) return;
  const Json& list = root.raw("added_tokens");
  if (!list.is_array()) root.fail("added_tokens", "expected a list, got " + json_value_text(list));
  for (size_t i = 0; i < list.size(); ++i) {
    JsonReader a = root.element("added_tokens", i);
    const int64_t max_id = int64_t(texts_.size()) + int64_t(list.size()) + kMaxUnusedIds;  // as for the vocab
    Added added{a.string("content"), int32_t(a.integer("id", 0, max_id)), a.boolean_or("special", false),
                a.boolean_or("lstrip", false), a.boolean_or("rstrip", false), false, a.boolean_or("single_word", false), ""};
    added.normalized = a.boolean_or("normalized", !added.special);  // Hugging Face's default
    if (added.content.empty()) a.fail("content", "must not be empty");
    // As in Hugging Face, a token that is also in the vocab takes the vocab's id.
    if (const int32_t v = vocab_id(added.content); v >= 0) added.id = v;
    if (size_t(added.id) >= texts_.size()) {
      texts_.resize(size_t(added.id) + 1);
      kind_.resize(size_t(added.id) + 1, 0);
    }
    if (kind_[added.id] == 1 && texts_[added.id] != added.content)
      a.fail("id", "id " + std::to_string(added.id) + " is also the vocab token \"" + texts_[added.id] + "\"");
    if (kind_[added.id] >= 2) a.fail("id", "id " + std::to_string(added.id) + " is added twice");
    texts_[added.id] = added.content;
    kind_[added.id] = added.special ? 3 : 2;
    added_.push_back(std::move(added));
  }
  if (added_.size() > 65535) root.fail("added_tokens", "too many added tokens");
}

void Tokenizer::read_normalizer(JsonReader& root) { normalizer_ = Normalizer::read(root); }

void Tokenizer::read_pre_tokenizer(JsonReader& root) {
  pre_tokenizer_ = PreTokenizer::read(root);
  byte_level_ = pre_tokenizer_.byte_level();
}

// The tokens single bytes start from: byte-level BPE needs all 256 byte characters; byte
// fallback uses "<0xNN>" where the vocabulary has it (Hugging Face formats the byte as {:#04X}).
void Tokenizer::index_bytes(JsonReader& model) {
  for (int b = 0; b < 256; ++b) {
    if (byte_level_) {
      const int32_t id = vocab_id(byte_to_piece(uint8_t(b)));
      if (id < 0)
        model.fail("vocab", "byte " + std::to_string(b) + " (\"" + byte_to_piece(uint8_t(b)) +
                                "\") is missing; byte-level BPE needs all 256");
      byte_ids_[b] = id;
    }
    static const char* hex = "0123456789ABCDEF";
    fallback_ids_[b] = byte_fallback_ ? vocab_id(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">") : -1;
  }
  if (!unk_token_.empty()) {
    unk_id_ = vocab_id(unk_token_);
    if (unk_id_ < 0) model.fail("unk_token", "\"" + unk_token_ + "\" is not in the vocab");
  }
}

// Added tokens that match normalized text are looked for in their normalized form, as
// Hugging Face does; the index lists them by first byte, longest first (leftmost-longest).
void Tokenizer::index_added_tokens() {
  for (size_t i = 0; i < added_.size(); ++i) {
    Added& a = added_[i];
    a.match = a.normalized ? normalizer_.apply(a.content) : a.content;
    if (!a.match.empty()) added_by_first_byte_[a.normalized][uint8_t(a.match[0])].push_back(uint16_t(i));
  }
  for (auto& by_byte : added_by_first_byte_)
    for (auto& v : by_byte)
      std::stable_sort(v.begin(), v.end(), [&](uint16_t x, uint16_t y) { return added_[x].match.size() > added_[y].match.size(); });
}

// ---- encoding ---------------------------------------------------------------------------

const Tokenizer::Added* Tokenizer::added_at(std::string_view text, size_t p, bool normalized, bool allow_special) const {
  for (uint16_t i : added_by_first_byte_[normalized][uint8_t(text[p])]) {
    const Added& a = added_[i];
    if ((allow_special || !a.special) && text.compare(p, a.match.size(), a.match) == 0) return &a;
  }
  return nullptr;
}

namespace {

// Hugging Face's word characters for single_word added tokens (Rust's is_alphanumeric or '_').
bool is_word_char(char32_t c) { return c == '_' || is_letter(c) || is_number(c); }

// The code point that ends just before byte p (p > 0), and its first byte.
char32_t code_point_before(std::string_view s, size_t p, size_t& start) {
  start = p - 1;
  while (start > 0 && (uint8_t(s[start]) & 0xC0) == 0x80 && p - start < 4) --start;
  size_t next = start;
  char32_t cp = next_code_point(s, next);
  if (next != p) {  // not a whole character: the last byte alone
    start = p - 1;
    return 0xFFFD;
  }
  return cp;
}

}  // namespace

template <typename Gap>
void Tokenizer::split_added(std::string_view text, bool normalized, bool allow_special, std::vector<int32_t>& out,
                            Gap gap) const {
  const auto& index = added_by_first_byte_[normalized];
  size_t start = 0;  // of the current stretch of ordinary text
  for (size_t p = 0; p < text.size();) {
    const Added* a = index[uint8_t(text[p])].empty() ? nullptr : added_at(text, p, normalized, allow_special);
    if (!a) { ++p; continue; }
    size_t seg_end = p, next = p + a->match.size(), before;
    if (a->single_word) {  // only as a whole word: no word character touches either end
      size_t after = next;
      bool word_before = p > 0 && is_word_char(code_point_before(text, p, before));
      bool word_after = next < text.size() && is_word_char(next_code_point(text, after));
      if (word_before || word_after) { p = next; continue; }
    }
    if (a->lstrip)
      while (seg_end > start && is_white_space(code_point_before(text, seg_end, before))) seg_end = before;
    if (a->rstrip)
      for (size_t q = next; q < text.size() && is_white_space(next_code_point(text, q));) next = q;
    gap(text.substr(start, seg_end - start));
    out.push_back(a->id);
    start = p = next;
  }
  gap(text.substr(start));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  split_added(text, false, allow_special, out, [&](std::string_view raw) {
    if (raw.empty()) return;
    std::string normalized = normalizer_.apply(raw);
    split_added(normalized, true, allow_special, out, [&](std::string_view seg) {
      // Only a stretch at the very start of the text starts it (Metaspace's "first").
      encode_segment(seg, raw.data() == text.data() && seg.data() == normalized.data(), out);
    });
  });
  return out;
}

void Tokenizer::encode_segment(std::string_view text, bool at_text_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces;
  pre_tokenizer_.split(text, pieces, at_text_start);
  for (const std::string& piece : pieces) encode_piece(piece, out);
}

void Tokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (byte_level_ && bytes.size() == 1) {
    out.push_back(byte_ids_[uint8_t(bytes[0])]);
    return;
  }
  constexpr size_t kCacheable = 64, kCacheEntries = 1 << 16;
  bool cacheable = bytes.size() <= kCacheable;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    auto it = cache_.find(std::string(bytes));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t first = out.size();
  if (ignore_merges_) {  // a piece that is a token is not merged up from its symbols
    if (const int32_t id = vocab_id(byte_level_ ? std::string_view(byte_level_text(bytes)) : bytes); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  initial_symbols(bytes, symbols);
  bpe(std::move(symbols), out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(bytes), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

const Tokenizer::Merge* Tokenizer::find_merge(int32_t a, int32_t b) const { return merges_.find(a, b); }

// Hugging Face's BPE::merge_word before the merges: each character of the piece is a symbol
// if it is a token; else its bytes as "<0xNN>" tokens if all exist; else the unk token (one
// for a run of them with fuse_unk; a pending unk is written before the next known character,
// after byte-fallback tokens, as there); else it is dropped.
void Tokenizer::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  if (byte_level_) {
    for (char c : piece) symbols.push_back(byte_ids_[uint8_t(c)]);
    return;
  }
  bool unk_pending = false;
  for (size_t i = 0; i < piece.size();) {
    size_t begin = i;
    next_code_point(piece, i);
    std::string_view ch = piece.substr(begin, i - begin);
    if (const int32_t id = vocab_id(ch); id >= 0) {
      if (unk_pending) symbols.push_back(unk_id_);
      unk_pending = false;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) { return fallback_ids_[uint8_t(c)] >= 0; })) {
      for (char c : ch) symbols.push_back(fallback_ids_[uint8_t(c)]);
      continue;
    }
    if (unk_id_ < 0) continue;
    if (unk_pending && !fuse_unk_) symbols.push_back(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) symbols.push_back(unk_id_);
}

void Tokenizer::bpe(std::vector<int32_t> symbols, std::vector<int32_t>& out) const {
  if (symbols.empty()) return;
  // Symbols form a linked list; candidate merges wait in a heap ordered by (rank, position).
  // A candidate is stale if either symbol changed since it was pushed; it is then skipped.
  struct Symbol { int32_t id; int prev, next; };
  std::vector<Symbol> sym(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) sym[i] = {symbols[i], int(i) - 1, int(i) + 1};
  sym.back().next = -1;
  struct Candidate { int32_t rank; int pos; int32_t id; };
  auto later = [](const Candidate& x, const Candidate& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  auto offer = [&](int pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    if (const Merge* m = find_merge(sym[pos].id, sym[sym[pos].next].id)) heap.push({m->rank, pos, m->id});
  };
  for (int i = 0; i + 1 < int(sym.size()); ++i) offer(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (left.id < 0 || left.next < 0) continue;
    const Merge* m = find_merge(left.id, sym[left.next].id);
    if (!m || m->id != c.id || m->rank != c.rank) continue;
    int right = left.next;
    left.id = c.id;
    left.next = sym[right].next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    sym[right].id = -1;
    offer(left.prev);
    offer(c.pos);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

// ---- decoding and lookups ---------------------------------------------------------------

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || size_t(id) >= pieces_.size() || kind_[id] == 0)
    throw TokenIdError("token id " + std::to_string(id) + " is not in the vocabulary (size " + std::to_string(vocab_size()) + ")");
  return pieces_[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  token_to_piece(id);
  return texts_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    token_to_piece(id);  // checks the id
    if (skip_special && kind_[id] == 3) continue;
    auto normalized = decode_as_.find(id);
    tokens.push_back(normalized == decode_as_.end() ? texts_[id] : normalized->second);
  }
  return decoder_.decode(std::move(tokens));
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  for (const Added& a : added_)
    if (a.content == text) return a.id;
  const int32_t id = vocab_id(text);
  if (id < 0) return std::nullopt;
  return id;
}

int32_t Tokenizer::special_id(std::string_view content) const {
  if (auto id = token_id(content)) return *id;
  throw TokenIdError("the tokenizer has no token \"" + std::string(content) + "\"");
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && size_t(id) < kind_.size() && kind_[id] == 3; }
bool Tokenizer::is_added(int32_t id) const { return id >= 0 && size_t(id) < kind_.size() && kind_[id] >= 2; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tok_(tokenizer), skip_special_(skip_special) {
  pending_.reserve(kReserve);
  out_.reserve(kReserve);
}

std::string_view StreamDecoder::push(int32_t id) {
  const std::string& piece = tok_.token_to_piece(id);
  if (!(skip_special_ && tok_.is_special(id))) pending_ += piece;
  size_t n = utf8_complete_prefix(pending_);
  out_.clear();
  utf8_lossy_append(std::string_view(pending_).substr(0, n), out_);
  pending_.erase(0, n);
  return out_;
}

std::string_view StreamDecoder::finish() {
  out_.clear();
  utf8_lossy_append(pending_, out_);
  pending_.clear();
  return out_;
}

}  // namespace wren::text
