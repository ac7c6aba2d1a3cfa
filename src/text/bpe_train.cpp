// text/: byte-level BPE training (see bpe_train.h).
#include "text/bpe_train.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "config/read_file.h"
#include "text/unicode.h"

namespace wren::text {
namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t left_of(uint64_t k) { return int32_t(k >> 32); }
int32_t right_of(uint64_t k) { return int32_t(uint32_t(k)); }

std::string byte_level_text(const std::string& bytes) {
  std::string s;
  for (char c : bytes) s += byte_to_piece(uint8_t(c));
  return s;
}

// Adds the pre-token pieces of text (special tokens cut out first) to counts.
void count_pieces(std::string_view text, const BpeTrainOptions& o, std::unordered_map<std::string, int64_t>& counts) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t cut = text.size(), len = 0;
    for (const std::string& s : o.special_tokens) {
      size_t f = text.find(s, start);
      if (f < cut || (f == cut && s.size() > len)) cut = f, len = s.size();
    }
    std::string_view seg = text.substr(start, cut - start);
    for (const Span& sp : split_by_pattern(o.pattern, seg)) ++counts[std::string(seg.substr(sp.begin, sp.end - sp.begin))];
    if (cut == text.size()) break;
    start = cut + len;
  }
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

struct Candidate {
  int64_t count;
  uint64_t pair;
  bool operator<(const Candidate& o) const {  // max-heap: higher count, then smaller pair first
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

Json make_tokenizer_json(const std::vector<std::string>& token_bytes, const std::vector<std::pair<int32_t, int32_t>>& merges,
                         const BpeTrainOptions& o) {
  Json vocab = Json::object();
  for (size_t id = 0; id < token_bytes.size(); ++id) vocab[byte_level_text(token_bytes[id])] = id;
  Json merge_list = Json::array();
  for (auto [a, b] : merges) merge_list.push_back(byte_level_text(token_bytes[a]) + " " + byte_level_text(token_bytes[b]));
  Json added = Json::array();
  int32_t next = int32_t(token_bytes.size());
  for (const std::string& s : o.special_tokens) {
    if (vocab.contains(s)) throw std::runtime_error("train_bpe: special token \"" + s + "\" is also a learned token");
    vocab[s] = next;
    added.push_back({{"id", next}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
    ++next;
  }
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  Json pre = byte_level;
  if (o.pattern != SplitPattern::gpt2) {
    Json split = {{"type", "Split"}, {"pattern", {{"Regex", split_pattern_regex(o.pattern)}}},
                  {"behavior", "Isolated"}, {"invert", false}};
    Json bl = byte_level;
    bl["use_regex"] = false;
    pre = {{"type", "Sequence"}, {"pretokenizers", Json::array({split, bl})}};
  }
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre},
              {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
              {"model",
               {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", merge_list}}}};
}

// 1. The distinct pieces of the texts with their counts, in a fixed (sorted) order, as words
// of byte symbols.
std::vector<Word> distinct_words(const std::vector<std::string>& texts, const BpeTrainOptions& o) {
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& t : texts) count_pieces(t, o, counts);
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  counts.clear();
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (auto& [piece, n] : sorted) {
    Word w{{}, n};
    for (char c : piece) w.symbols.push_back(uint8_t(c));
    words.push_back(std::move(w));
  }
  return words;
}

// 2. The pairs of adjacent symbols: their counts over all words, for each pair the words that
// hold it, and a heap of (count, pair). The lists and the heap may go stale as merges change
// the words: a listed word is rechecked, a popped count compared with the current one.
struct PairIndex {
  std::unordered_map<uint64_t, int64_t> count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  std::priority_queue<Candidate> heap;
  void list(uint64_t k, int32_t w) {
    auto& words = where[k];
    if (words.empty() || words.back() != w) words.push_back(w);
  }
};
PairIndex index_pairs(const std::vector<Word>& words) {
  PairIndex pairs;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = pair_key(s[i], s[i + 1]);
      pairs.count[k] += words[w].count;
      pairs.list(k, int32_t(w));
    }
  }
  for (auto& [k, n] : pairs.count) pairs.heap.push({n, k});
  return pairs;
}

// 3, one merge: (a, b) -> id in every word that holds the pair (each word once per merge:
// seen[w] = the merge's number); the pairs around id are listed for their words. Returns the
// change of every pair's count.
std::unordered_map<uint64_t, int64_t> merge_in_words(std::vector<Word>& words, PairIndex& pairs, uint64_t pair, int32_t id,
                                                     int32_t merge, std::vector<int32_t>& seen) {
  const int32_t a = left_of(pair), b = right_of(pair);
  std::vector<int32_t> holders = std::move(pairs.where[pair]);
  pairs.where.erase(pair);
  std::unordered_map<uint64_t, int64_t> delta;
  for (int32_t w : holders) {
    if (seen[w] == merge) continue;
    seen[w] = merge;
    Word& word = words[w];
    auto& s = word.symbols;
    std::vector<int32_t> merged;
    merged.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) merged.push_back(id), i += 2;
      else merged.push_back(s[i++]);
    }
    if (merged.size() == s.size()) continue;
    for (size_t i = 0; i + 1 < s.size(); ++i) delta[pair_key(s[i], s[i + 1])] -= word.count;
    for (size_t i = 0; i + 1 < merged.size(); ++i) {
      const uint64_t k = pair_key(merged[i], merged[i + 1]);
      delta[k] += word.count;
      if (merged[i] == id || merged[i + 1] == id) pairs.list(k, w);
    }
    s.swap(merged);
  }
  return delta;
}

// The counts changed by a merge, applied in a fixed order so that equal inputs push equal heap
// entries.
void apply_counts(PairIndex& pairs, const std::unordered_map<uint64_t, int64_t>& delta) {
  std::vector<std::pair<uint64_t, int64_t>> changes(delta.begin(), delta.end());
  std::sort(changes.begin(), changes.end());
  for (auto [k, d] : changes) {
    if (d == 0) continue;
    int64_t& n = pairs.count[k];
    n += d;
    if (n <= 0) pairs.count.erase(k);
    else if (d > 0) pairs.heap.push({n, k});
  }
}

}  // namespace

Json train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& o) {
  int n_special = int(o.special_tokens.size());
  if (o.vocab_size < 256 + n_special)
    throw std::runtime_error("train_bpe: vocab_size " + std::to_string(o.vocab_size) + " is below 256 bytes + " +
                             std::to_string(n_special) + " special tokens");
  for (const std::string& s : o.special_tokens)
    if (s.empty()) throw std::runtime_error("train_bpe: a special token is empty");

  std::vector<Word> words = distinct_words(texts, o);
  PairIndex pairs = index_pairs(words);
  // 3. Merge the most frequent pair until the vocabulary is full.
  std::vector<std::string> token_bytes(256);
  for (int b = 0; b < 256; ++b) token_bytes[b] = std::string(1, char(b));
  std::map<std::string, int32_t> id_of_bytes;  // a string reached by two different merges keeps one id
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int32_t> seen(words.size(), -1);  // the merge that last visited a word
  const int max_tokens = o.vocab_size - n_special;
  while (int(token_bytes.size()) < max_tokens && !pairs.heap.empty()) {
    const Candidate c = pairs.heap.top();
    pairs.heap.pop();
    auto it = pairs.count.find(c.pair);
    const int64_t now = it == pairs.count.end() ? 0 : it->second;
    if (now != c.count) {  // stale entry: requeue with the current count
      if (now > 0) pairs.heap.push({now, c.pair});
      continue;
    }
    if (c.count < o.min_frequency) break;
    const int32_t a = left_of(c.pair), b = right_of(c.pair);
    const std::string bytes = token_bytes[a] + token_bytes[b];
    auto [found, inserted] = id_of_bytes.emplace(bytes, int32_t(token_bytes.size()));
    if (inserted) token_bytes.push_back(bytes);
    merges.emplace_back(a, b);
    apply_counts(pairs, merge_in_words(words, pairs, c.pair, found->second, int32_t(merges.size()), seen));
  }
  return make_tokenizer_json(token_bytes, merges, o);
}

Json train_bpe_files(const std::vector<std::string>& paths, const BpeTrainOptions& options) {
  std::vector<std::string> texts;
  for (const std::string& p : paths) {
    std::optional<std::string> text = try_read_file(p);
    if (!text) throw std::runtime_error(p + ": cannot open training text");
    texts.push_back(std::move(*text));
  }
  return train_bpe(texts, options);
}

void save_tokenizer_json(const Json& tokenizer, const std::string& path) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot open for writing");
    out << tokenizer.dump(1) << '\n';
    if (!out.flush()) throw std::runtime_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot rename " + tmp + " into place");
  }
}

}  // namespace wren::text
