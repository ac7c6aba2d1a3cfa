// train/: documents, packing and batches (the layout is described in data.h).
#include "train/data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "config/read_file.h"
#include "text/unicode.h"

namespace wren::train {

namespace fs = std::filesystem;

// ---- Documents ---------------------------------------------------------------------------

namespace {

std::string read_corpus_file(const std::string& path) {
  std::optional<std::string> bytes = try_read_file(path);
  if (!bytes) throw DataError("data: cannot open '" + path + "'");
  std::string s = std::move(*bytes);
  // utf8_lossy leaves valid UTF-8 unchanged, so the first difference is the first bad byte.
  const std::string repaired = text::utf8_lossy(s);
  if (repaired != s) {
    size_t at = 0;
    while (at < s.size() && at < repaired.size() && s[at] == repaired[at]) ++at;
    throw DataError("data: '" + path + "' is not valid UTF-8 (byte " + std::to_string(at) + ")");
  }
  return s;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

std::vector<Document> split_documents(const std::string& file, const std::string& text,
                                      const std::string& eot_marker) {
  std::vector<Document> docs;
  if (eot_marker.empty() || text.find(eot_marker) == std::string::npos) {
    if (!text.empty()) docs.push_back({file, 0, text});
    return docs;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(eot_marker, start);
    if (end == std::string::npos) end = text.size();
    std::string_view piece = trim(std::string_view(text).substr(start, end - start));
    if (!piece.empty()) docs.push_back({file, int(docs.size()), std::string(piece)});
    start = end + eot_marker.size();
  }
  return docs;
}

std::vector<Document> read_documents(const std::vector<std::string>& paths, const std::string& eot_marker) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) files.push_back(it->path().string());
      }
      if (ec) throw DataError("data: cannot list folder '" + p + "': " + ec.message());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw DataError("data: '" + p + "' is neither a file nor a folder");
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  std::vector<Document> docs;
  for (const std::string& f : files)
    for (Document& d : split_documents(f, read_corpus_file(f), eot_marker)) docs.push_back(std::move(d));
  return docs;
}

// ---- Packing -----------------------------------------------------------------------------

Batch PackedRows::batch(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows())
    throw DataError("data: rows " + std::to_string(first) + " .. " + std::to_string(first + count - 1) +
                    " out of " + std::to_string(rows()));
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[size_t(i)] = first + i;
  return gather(ids);
}

Batch PackedRows::gather(const std::vector<int64_t>& ids) const {
  const int64_t T = seq_len, B = int64_t(ids.size());
  torch::Tensor in = torch::empty({B, T}, torch::kInt64), out = torch::empty({B, T}, torch::kInt64);
  int64_t* pi = in.data_ptr<int64_t>();
  int64_t* po = out.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r = ids[size_t(b)];
    if (r < 0 || r >= rows()) throw DataError("data: row " + std::to_string(r) + " out of " + std::to_string(rows()));
    const int32_t* s = stream.data() + r * T;
    for (int64_t t = 0; t < T; ++t) {
      pi[b * T + t] = s[t];
      po[b * T + t] = s[t + 1];
    }
  }
  return {in, out};
}

namespace {

bool listed(const Document& d, const std::vector<std::string>& files) {
  const std::string name = fs::path(d.file).filename().string();
  for (const std::string& f : files)
    if (f == d.file || f == name) return true;
  return false;
}

// eot d_0 eot d_1 eot ..., cut to whole rows, with the bytes its targets stand for.
PackedRows pack(const std::vector<const Document*>& docs, const text::Tokenizer& tok, int32_t eot, int64_t T) {
  PackedRows p;
  p.seq_len = T;
  p.stream.push_back(eot);
  for (const Document* d : docs) {
    std::vector<int32_t> ids = tok.encode(d->text, /*allow_special=*/false);
    p.stream.insert(p.stream.end(), ids.begin(), ids.end());
    p.stream.push_back(eot);
    p.documents.push_back(d->file + "#" + std::to_string(d->index));
  }
  const int64_t rows = (int64_t(p.stream.size()) - 1) / T;
  p.stream.resize(rows > 0 ? size_t(rows * T + 1) : 0);
  for (size_t i = 1; i < p.stream.size(); ++i)
    if (!tok.is_special(p.stream[i])) p.target_bytes += int64_t(tok.token_to_piece(p.stream[i]).size());
  return p;
}

}  // namespace

Corpus::Corpus(const std::vector<Document>& docs, const text::Tokenizer& tok, const CorpusOptions& o) {
  if (o.seq_len < 1) throw DataError("data: seq_len must be >= 1, got " + std::to_string(o.seq_len));
  if (o.heldout_every < 0)
    throw DataError("data: heldout_every must be >= 0, got " + std::to_string(o.heldout_every));
  std::optional<int32_t> eot = tok.token_id(o.eot);
  if (!eot || !tok.is_special(*eot)) throw DataError("data: the tokenizer has no special token '" + o.eot + "'");
  eot_id_ = *eot;
  std::vector<const Document*> train, held;
  for (size_t i = 0; i < docs.size(); ++i) {
    const bool out = listed(docs[i], o.heldout_files) ||
                     (o.heldout_every > 0 && int64_t(i + 1) % o.heldout_every == 0);
    (out ? held : train).push_back(&docs[i]);
  }
  train_ = pack(train, tok, eot_id_, o.seq_len);
  heldout_ = pack(held, tok, eot_id_, o.seq_len);
}

Corpus Corpus::load(const std::vector<std::string>& paths, const text::Tokenizer& tok, const CorpusOptions& o) {
  return Corpus(read_documents(paths, o.eot), tok, o);
}

// ---- Sampler -----------------------------------------------------------------------------

namespace {

// SplitMix64: a small, fully specified generator, so orders do not depend on the standard library.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (Lemire's multiply-shift; the bias, below n / 2^64, is immaterial here).
  uint64_t below(uint64_t n) { return uint64_t((static_cast<unsigned __int128>(next()) * n) >> 64); }
};

}  // namespace

Sampler::Sampler(const PackedRows& rows, int64_t batch_size, uint64_t seed)
    : rows_(rows), batch_size_(batch_size), seed_(seed) {
  if (batch_size < 1) throw DataError("data: batch size must be >= 1, got " + std::to_string(batch_size));
  if (rows.rows() < 1) throw DataError("data: the split has no full row of " + std::to_string(rows.seq_len) + " + 1 tokens");
}

const std::vector<int64_t>& Sampler::epoch_order(int64_t epoch) const {
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  const int64_t n = rows_.rows();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  SplitMix64 rng{seed_ ^ (0xD1B54A32D192ED03ull * uint64_t(epoch + 1))};
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.below(uint64_t(i + 1)))]);
  if (orders_.size() >= 4) orders_.erase(orders_.begin());
  return orders_[epoch] = std::move(order);
}

std::vector<int64_t> Sampler::batch_rows(int64_t step) const {
  if (step < 0) throw DataError("data: step must be >= 0, got " + std::to_string(step));
  const int64_t n = rows_.rows();
  std::vector<int64_t> ids;
  ids.reserve(size_t(batch_size_));
  for (int64_t j = 0; j < batch_size_; ++j) {
    const int64_t pos = step * batch_size_ + j;
    ids.push_back(epoch_order(pos / n)[size_t(pos % n)]);
  }
  return ids;
}

}  // namespace wren::train
