// Opening (validate everything, then hand out views) and writing (temporary directory, then
// rename) a model directory; the layout is in model_dir.h.
#include "io/model_dir.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "config/parse.h"
#include "config/read_file.h"
#include "io/output_file.h"

namespace wren {

namespace fs = std::filesystem;

namespace {

std::string num(long long x) { return std::to_string(x); }

}  // namespace

void check_tokenizer_json(const Json& j, const ModelConfig& c, const std::string& origin) {
  auto fail = [&](const std::string& msg) { throw IoError(origin + ": " + msg); };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || !j["model"].contains("vocab"))
    fail("expected a tokenizer object with model.vocab");
  const Json& vocab = j["model"]["vocab"];
  if (!vocab.is_object() && !vocab.is_array())
    fail("model.vocab must be an object (token: id) or a list, got " + vocab.dump().substr(0, 80));
  const int64_t rows = c.rows();
  if (int64_t(vocab.size()) > rows)
    fail("model.vocab has " + num(int64_t(vocab.size())) + " tokens, more than the config's vocab_size " +
         num(c.vocab_size) + " + vocab_pad " + num(c.vocab_pad) + " = " + num(rows) + " embedding rows");
  if (vocab.is_object())
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() >= rows)
        fail("model.vocab: token " + Json(it.key()).dump() + " has id " + it.value().dump() +
             ", expected an integer in [0, " + num(rows) + ")");
}

// ---- Reading ---------------------------------------------------------------------------

ModelFiles::ModelFiles(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(dir + ": not a directory");
  const fs::path root(dir);
  const std::string config_path = (root / "config.json").string();
  if (!fs::exists(config_path, ec)) throw IoError(dir + ": no config.json (not a model directory?)");
  config_ = parse_model_config(parse_json_file(config_path, kConfigJsonLimits), config_path);

  const std::string tok = tokenizer_path();
  if (!fs::exists(tok, ec)) throw IoError(dir + ": no tokenizer.json");
  tokenizer_json_ = parse_json_file(tok);
  check_tokenizer_json(tokenizer_json_, config_, tok);

  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw IoError(dir + ": no *.safetensors weight files");
  for (auto& p : paths) set_.add_file(p);

  map_ = build_weight_map(config_);
  for (const TensorInfo& info : map_.tensors) {
    WeightView w;
    try {
      w = set_.weight(info);
    } catch (const IoError& e) {
      throw IoError(dir + ": " + e.what());
    }
    const bool in_engram = fs::path(w.file).filename() == kEngramFile;
    if (info.engram_file && !in_engram)
      throw IoError(w.file + ": tensor " + info.name + " is an engram table; it belongs in " + kEngramFile);
    if (!info.engram_file && in_engram)
      throw IoError(w.file + ": tensor " + info.name + " is not an engram table; " + kEngramFile +
                    " holds only the tables");
    weights_.emplace(info.name, std::move(w));
  }
  set_.check_no_extra(map_);
  // The tables are read a few rows per token: no read-ahead around each row.
  for (auto& f : set_.files())
    if (fs::path(f->path()).filename() == kEngramFile) f->mapping().advise_random();
}

std::string ModelFiles::tokenizer_path() const { return (fs::path(dir_) / "tokenizer.json").string(); }

const WeightView& ModelFiles::weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) throw IoError(dir_ + ": no tensor " + name + " in the weight map of this config");
  return it->second;
}

ModelFiles::TableRows ModelFiles::table_rows(const std::string& name) const {
  const WeightView& w = weight(name);
  if (w.shape.size() != 2) throw IoError(w.file + ": tensor " + name + " " + shape_text(w.shape) + " is not a table of rows");
  const int64_t rows = w.shape[0];
  auto reader = [&](const TensorView* t) {
    return RowReader(w.file, t->file_offset, rows ? t->nbytes / uint64_t(rows) : 0, rows);
  };
  TableRows out;
  out.data = reader(w.stored);
  if (w.stored_scales) out.scales = reader(w.stored_scales);
  return out;
}

// ---- Writing ---------------------------------------------------------------------------

WeightData weight_data(kernels::DType storage, std::vector<uint8_t> data, std::vector<uint8_t> scales, int64_t group) {
  auto from = [](std::vector<uint8_t> bytes) -> ByteSource {
    auto held = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    return [held](const ByteSink& sink) { sink(held->data(), held->size()); };
  };
  WeightData w;
  w.storage = storage;
  w.data = from(std::move(data));
  if (is_quantized(storage)) w.scales = from(std::move(scales));
  w.group = group;
  return w;
}

namespace {

// Moves the finished temporary directory to `target`. rename(2) replaces an empty directory
// and refuses a non-empty one, so an existing model is never overwritten by accident.
void install(const fs::path& tmp, const fs::path& target, bool overwrite) {
  if (::rename(tmp.c_str(), target.c_str()) == 0) return;
  const int e = errno;
  const bool occupied = e == ENOTEMPTY || e == EEXIST;
  if (!occupied || !overwrite)
    throw IoError(target.string() + ": cannot rename " + tmp.string() + " to it: " + std::strerror(e) +
                  (occupied ? " (the directory exists and is not empty; overwrite not asked)" : ""));
  // Overwrite: move the old directory aside (onto an empty placeholder), move the new one in, drop the old.
  std::string old = target.string() + ".old-XXXXXX";
  if (!::mkdtemp(old.data())) throw IoError(old + ": cannot create: " + std::strerror(errno));
  if (::rename(target.c_str(), old.c_str()) != 0) {
    int e = errno;
    ::rmdir(old.c_str());
    throw IoError(target.string() + ": cannot move aside: " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    int e = errno;
    ::rename(old.c_str(), target.c_str());  // put the old model back
    throw IoError(target.string() + ": cannot rename " + tmp.string() + " to it: " + std::strerror(e));
  }
  std::error_code ec;
  fs::remove_all(old, ec);
}

// What write_model_dir refuses before it writes: a config that does not validate, tokenizer
// contents that do not fit it, extra files that are not plain names, a target that is a file or
// (without overwrite) a directory with something in it.
void check_write_target(const fs::path& target, const ModelConfig& c, const ModelDirWriteOptions& options) {
  validate_model_config(c, (target / "config.json").string());
  if (options.tokenizer_json.empty()) throw IoError(target.string() + ": no tokenizer.json contents given");
  const Json tok = parse_json(options.tokenizer_json, (target / "tokenizer.json").string());
  check_tokenizer_json(tok, c, (target / "tokenizer.json").string());

  for (auto& [name, contents] : options.extra_files)
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || name == "config.json" ||
        name == "tokenizer.json" || fs::path(name).extension() == ".safetensors")
      throw IoError(target.string() + ": extra file name \"" + name + "\" is not a plain name the directory may hold");

  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) throw IoError(target.string() + ": exists and is not a directory");
    if (!fs::is_empty(target, ec) && !options.overwrite)
      throw IoError(target.string() + ": exists and is not empty (pass overwrite to replace it)");
  }
}

// The safetensors files of a model directory, planned: every tensor of the weight map with its
// values (and a quantised one's scales) in the shard it goes to, the engram tables apart.
struct PlannedFiles {
  SafetensorsWriter engram;
  std::vector<SafetensorsWriter> shards = std::vector<SafetensorsWriter>(1);
};

// Every file planned before any byte is written, so a bad tensor fails fast. The map outlives
// the writes: a supplier's bytes may still refer to its tensors' entries.
PlannedFiles plan_files(const fs::path& target, const WeightMap& map, const WeightSupplier& weights, uint64_t shard_bytes) {
  PlannedFiles files;
  std::vector<SafetensorsWriter>& shards = files.shards;
  for (const TensorInfo& info : map.tensors) {
    WeightData d = weights(info);
    const bool paired = is_quantized(d.storage) && d.values_and_scales;
    if (!d.data && !paired) throw IoError(target.string() + ": tensor " + info.name + ": no data supplied");
    const Shape stored = stored_shape(d.storage, info.shape, info.name);
    uint64_t bytes = 0;
    tensor_bytes(storage_dtype(d.storage), stored, bytes);
    SafetensorsWriter* w = &files.engram;
    if (!info.engram_file) {
      if (shard_bytes && shards.back().count() && shards.back().data_bytes() + bytes > shard_bytes) shards.emplace_back();
      w = &shards.back();
    }
    if (paired) {
      w->add_pair({info.name, storage_dtype(d.storage), stored},
                  {scales_name(info.name), Dtype::F16, scales_shape(d.storage, info.shape, d.group, info.name)},
                  std::move(d.values_and_scales));
      continue;
    }
    w->add(info.name, storage_dtype(d.storage), stored, std::move(d.data));
    if (is_quantized(d.storage)) {
      if (!d.scales) throw IoError(target.string() + ": tensor " + info.name + ": " + to_string(d.storage) + " needs scales");
      w->add(scales_name(info.name), Dtype::F16, scales_shape(d.storage, info.shape, d.group, info.name),
             std::move(d.scales));
    }
  }
  return files;
}

// The directory's files written into `tmp` (shards, engram tables, config, tokenizer, extras),
// synced, then tmp moved into place.
void write_and_install(const fs::path& tmp, const fs::path& target, const ModelConfig& c, PlannedFiles& files,
                       const ModelDirWriteOptions& options) {
  std::vector<SafetensorsWriter>& shards = files.shards;
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    if (shards.size() == 1)
      std::snprintf(name, sizeof name, "model.safetensors");
    else
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    for (auto& [k, v] : options.metadata) shards[i].set_metadata(k, v);
    shards[i].write((tmp / name).string());
  }
  if (files.engram.count()) {
    for (auto& [k, v] : options.metadata) files.engram.set_metadata(k, v);
    files.engram.write((tmp / kEngramFile).string());
  }
  write_file_atomic((tmp / "config.json").string(), to_json(c).dump(2) + "\n");
  write_file_atomic((tmp / "tokenizer.json").string(), options.tokenizer_json);
  for (auto& [name, contents] : options.extra_files) write_file_atomic((tmp / name).string(), contents);
  fsync_directory(tmp.string());
  install(tmp, target, options.overwrite);
}

}  // namespace

void write_model_dir(const std::string& dir, const ModelConfig& c, const WeightSupplier& weights,
                     const ModelDirWriteOptions& options) {
  fs::path target(dir);
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  if (target.empty()) throw IoError("write_model_dir: empty directory name");
  check_write_target(target, c, options);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const WeightMap map = build_weight_map(c);
  PlannedFiles files = plan_files(target, map, weights, options.shard_bytes);

  std::string tmp = target.string() + ".tmp-XXXXXX";
  if (!::mkdtemp(tmp.data())) throw IoError(tmp + ": cannot create: " + std::strerror(errno));
  try {
    ::chmod(tmp.c_str(), 0755);  // mkdtemp makes it private; a model directory is an ordinary one
    write_and_install(tmp, target, c, files, options);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::path parent = target.parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

}  // namespace wren
