// io/: the model directory. A tiny config with every storage type and an engram table is
// written and read back byte for byte; then one thing at a time is broken and the error
// must name the file and the problem.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "config/parse.h"
#include "io/model_dir.h"

#include "test_util.h"

namespace wren {
namespace {

namespace fs = std::filesystem;

using testing_util::TempDir;

// 2 layers, attention residuals, an Embla-style engram (1 order x 2 heads x 8 = d_model 16).
const char* kTinyConfig = R"({
  "name": "tiny", "d_model": 16, "vocab_size": 50, "vocab_pad": 6, "context_length": 32,
  "residual": {"kind": "attn_residuals", "block_size": 2},
  "engram": {"orders": [2], "heads_per_order": 2, "rows": 7, "row_dim": 8, "placement": "residual_source"},
  "mixers": {"w": {"kind": "attention", "n_heads": 2, "n_kv_heads": 1, "head_dim": 8}},
  "ffns": {"f": {"kind": "dense", "activation": "relu2", "hidden": 32}},
  "layers": [{"mixer": "w", "ffn": "f", "repeat": 2}]
})";

ModelConfig tiny_config() { return parse_model_config(Json::parse(kTinyConfig), "tiny config"); }

std::string tokenizer_text(int tokens) {
  Json vocab = Json::object();
  for (int i = 0; i < tokens; ++i) vocab["tok" + std::to_string(i)] = i;
  return Json{{"model", {{"type", "BPE"}, {"vocab", vocab}}}}.dump();
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// Storage per tensor: the tables q8, the LM head q4, the embedding bf16, other matrices q8,
// the rest f32. Group size 8 everywhere.
kernels::DType storage_for(const TensorInfo& t) {
  if (t.engram_file) return kernels::DType::q8;
  if (t.name == "lm_head") return kernels::DType::q4;
  if (t.name == "embed") return kernels::DType::bf16;
  if (t.role == TensorRole::matrix && t.shape.size() == 2) return kernels::DType::q8;
  return kernels::DType::f32;
}

// Supplies deterministic bytes and records them, so the read side can be compared.
struct Supplier {
  uint32_t seed = 1;
  std::map<std::string, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> written;
  WeightData operator()(const TensorInfo& t) {
    kernels::DType s = storage_for(t);
    uint64_t n = 0, ns = 0;
    tensor_bytes(storage_dtype(s), stored_shape(s, t.shape, t.name), n);
    std::vector<uint8_t> data = pattern(n, seed + uint32_t(std::hash<std::string>()(t.name)));
    std::vector<uint8_t> scales;
    if (is_quantized(s)) {
      tensor_bytes(Dtype::F16, scales_shape(s, t.shape, 8, t.name), ns);
      scales = pattern(ns, seed + 7 + uint32_t(std::hash<std::string>()(t.name)));
    }
    written[t.name] = {data, scales};
    return weight_data(s, data, scales, 8);
  }
};

std::string write_tiny(const std::string& dir, Supplier& s, ModelDirWriteOptions opt = {}) {
  if (opt.tokenizer_json.empty()) opt.tokenizer_json = tokenizer_text(52);
  write_model_dir(dir, tiny_config(), std::ref(s), opt);
  return dir;
}

std::string open_error(const std::string& dir) {
  try {
    ModelFiles m(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_DIR_ERROR(dir, ...)                                                               \
  do {                                                                                           \
    std::string msg = open_error(dir);                                                           \
    ASSERT_FALSE(msg.empty()) << "directory was accepted";                                       \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

// Rewrites a safetensors file through `edit` (return false to drop an entry), plus `extra`.
struct Entry {
  std::string name;
  Dtype dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};
void rewrite(const std::string& path, const std::function<bool(Entry&)>& edit, std::vector<Entry> extra = {}) {
  std::vector<Entry> entries;
  {
    SafetensorsFile f(path);
    for (auto& t : f.tensors()) entries.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  SafetensorsWriter w;
  for (auto& e : entries)
    if (edit(e)) w.add(e.name, e.dtype, e.shape, e.bytes);
  for (auto& e : extra) w.add(e.name, e.dtype, e.shape, e.bytes);
  w.write(path);
}

bool leftovers(const fs::path& parent) {
  for (auto& e : fs::directory_iterator(parent)) {
    std::string n = e.path().filename().string();
    if (n.find(".tmp") != std::string::npos || n.find(".old-") != std::string::npos) return true;
  }
  return false;
}

TEST(IoModelDir, RoundTripEveryWeightByteForByte) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "model", s);
  EXPECT_FALSE(leftovers(tmp.path));
  EXPECT_TRUE(fs::exists(tmp / "model/engram.safetensors"));

  ModelFiles m(dir);
  EXPECT_EQ(to_json(m.config()), to_json(tiny_config()));
  ASSERT_EQ(s.written.size(), m.weight_map().tensors.size());
  int quantized = 0;
  for (const TensorInfo& t : m.weight_map().tensors) {
    SCOPED_TRACE(t.name);
    const WeightView& w = m.weight(t.name);
    EXPECT_EQ(w.storage, storage_for(t));
    EXPECT_EQ(w.shape, t.shape);
    auto& [data, scales] = s.written.at(t.name);
    ASSERT_EQ(w.stored->nbytes, data.size());
    EXPECT_EQ(std::memcmp(w.data, data.data(), data.size()), 0);
    if (is_quantized(w.storage)) {
      ++quantized;
      EXPECT_EQ(w.group, 8);
      ASSERT_EQ(w.stored_scales->nbytes, scales.size());
      EXPECT_EQ(std::memcmp(w.scales, scales.data(), scales.size()), 0);
    }
    EXPECT_EQ(fs::path(w.file).filename() == "engram.safetensors", t.engram_file);
  }
  EXPECT_GT(quantized, 5);
  EXPECT_THROW(m.weight("layers.7.attn.wq"), IoError);

  // Engram rows by pread equal the mapped rows; the table is [7 + 11 rows, 8].
  const WeightView& tables = m.weight("engram.tables");
  ASSERT_EQ(tables.shape, (Shape{18, 8}));
  ModelFiles::TableRows rows = m.table_rows("engram.tables");
  ASSERT_EQ(rows.data.rows(), 18);
  ASSERT_EQ(rows.data.row_bytes(), 8u);
  ASSERT_EQ(rows.scales.row_bytes(), 2u);  // one F16 scale per group of 8
  std::vector<uint8_t> row(8), scale(2);
  for (int r = 0; r < 18; ++r) {
    rows.data.read_row(r, row.data());
    rows.scales.read_row(r, scale.data());
    EXPECT_EQ(std::memcmp(row.data(), tables.data + 8 * r, 8), 0) << r;
    EXPECT_EQ(std::memcmp(scale.data(), tables.scales + 2 * r, 2), 0) << r;
  }
}

TEST(IoModelDir, ShardsAndMetadata) {
  TempDir tmp;
  Supplier s;
  ModelDirWriteOptions opt;
  opt.shard_bytes = 3000;
  opt.metadata["format"] = "pt";
  std::string dir = write_tiny(tmp / "m", s, opt);
  ModelFiles m(dir);
  int model_files = 0;
  for (auto& f : m.tensors().files()) {
    EXPECT_EQ(f->metadata().at("format"), "pt");
    if (fs::path(f->path()).filename().string().rfind("model-", 0) == 0) ++model_files;
  }
  EXPECT_GT(model_files, 2);
  EXPECT_TRUE(fs::exists(dir + "/model-00001-of-0000" + std::to_string(model_files) + ".safetensors"));
  for (auto& [name, bytes] : s.written)
    EXPECT_EQ(std::memcmp(m.weight(name).data, bytes.first.data(), bytes.first.size()), 0) << name;
}

TEST(IoModelDir, RefusesToOverwriteUnlessAsked) {
  TempDir tmp;
  Supplier first;
  std::string dir = write_tiny(tmp / "m", first);
  Supplier second;
  second.seed = 99;
  try {
    write_tiny(dir, second);
    FAIL() << "overwrote a model";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("exists and is not empty"), std::string::npos) << e.what();
  }
  const auto& embed = first.written.at("embed").first;
  EXPECT_EQ(std::memcmp(ModelFiles(dir).weight("embed").data, embed.data(), embed.size()), 0);

  ModelDirWriteOptions opt;
  opt.overwrite = true;
  write_tiny(dir, second, opt);
  const auto& embed2 = second.written.at("embed").first;
  EXPECT_EQ(std::memcmp(ModelFiles(dir).weight("embed").data, embed2.data(), embed2.size()), 0);
  EXPECT_FALSE(leftovers(tmp.path));

  fs::create_directories(tmp / "empty");  // an empty directory is taken over
  Supplier third;
  write_tiny(tmp / "empty", third);
  EXPECT_EQ(open_error(tmp / "empty"), "");
}

TEST(IoModelDir, FailedWriteLeavesNothing) {
  TempDir tmp;
  Supplier s;
  auto broken = [&](const TensorInfo& t) {
    WeightData w = s(t);
    if (t.name == "layers.1.attn.wo") w.data = [](const ByteSink& sink) { sink("abc", 3); };
    return w;
  };
  ModelDirWriteOptions opt;
  opt.tokenizer_json = tokenizer_text(52);
  try {
    write_model_dir(tmp / "m", tiny_config(), broken, opt);
    FAIL() << "bad tensor accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor layers.1.attn.wo: data source produced 3 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp / "m"));
  EXPECT_FALSE(leftovers(tmp.path));

  opt.tokenizer_json = tokenizer_text(57);  // one more token than 50 + 6 rows
  EXPECT_THROW(write_model_dir(tmp / "m", tiny_config(), std::ref(s), opt), IoError);
  opt.tokenizer_json = "";
  EXPECT_THROW(write_model_dir(tmp / "m", tiny_config(), std::ref(s), opt), IoError);
  EXPECT_FALSE(fs::exists(tmp / "m"));
}

TEST(IoModelDir, BadOrMissingConfig) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "m", s);
  std::ofstream(dir + "/config.json") << "{ not json";
  EXPECT_DIR_ERROR(dir, "config.json", "invalid JSON");
  Json j = Json::parse(kTinyConfig);
  j["d_model"] = "sixteen";
  std::ofstream(dir + "/config.json") << j.dump();
  EXPECT_DIR_ERROR(dir, "config.json", "d_model", "expected an integer");
  fs::remove(dir + "/config.json");
  EXPECT_DIR_ERROR(dir, "no config.json");
  EXPECT_DIR_ERROR(tmp / "nowhere", "nowhere: not a directory");
}

TEST(IoModelDir, TokenizerChecks) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "m", s);
  std::ofstream(dir + "/tokenizer.json") << tokenizer_text(57);
  EXPECT_DIR_ERROR(dir, "tokenizer.json", "model.vocab has 57 tokens, more than the config's vocab_size 50 + vocab_pad 6");
  std::ofstream(dir + "/tokenizer.json") << tokenizer_text(56);
  EXPECT_EQ(open_error(dir), "");
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {"vocab": {"a": 0, "b": 56}}})";
  EXPECT_DIR_ERROR(dir, "tokenizer.json", "token \"b\" has id 56", "[0, 56)");
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {}})";
  EXPECT_DIR_ERROR(dir, "tokenizer.json", "model.vocab");
  std::ofstream(dir + "/tokenizer.json") << "[[[";
  EXPECT_DIR_ERROR(dir, "tokenizer.json", "invalid JSON");
  fs::remove(dir + "/tokenizer.json");
  EXPECT_DIR_ERROR(dir, "no tokenizer.json");
}

TEST(IoModelDir, WrongShapeVsWeightMap) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "m", s);
  Json j = Json::parse(kTinyConfig);
  j["ffns"]["f"]["hidden"] = 64;  // the files hold hidden 32
  std::ofstream(dir + "/config.json") << j.dump();
  EXPECT_DIR_ERROR(dir, "tensor layers.0.ffn.w_up: shape [32,16] in", "model.safetensors, expected [64,16] from the weight map");
}

TEST(IoModelDir, WrongDtypeMissingAndExtraTensors) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "m", s);
  const std::string model = dir + "/model.safetensors";

  rewrite(model, [](Entry& e) {
    if (e.name == "final_norm") e.dtype = Dtype::I32;  // same byte size, wrong type
    return true;
  });
  EXPECT_DIR_ERROR(dir, "tensor final_norm: dtype I32 in", "model.safetensors", "not a weight storage type");
  rewrite(model, [](Entry& e) {
    if (e.name == "final_norm") e.dtype = Dtype::F32;
    return e.name != "layers.1.ffn_norm";
  });
  EXPECT_DIR_ERROR(dir, "tensor layers.1.ffn_norm", "is missing", "model.safetensors");

  Supplier fresh;
  dir = write_tiny(tmp / "m2", fresh);
  rewrite(dir + "/model.safetensors", [](Entry&) { return true; },
          {{"layers.5.attn.wq", Dtype::F32, {2}, std::vector<uint8_t>(8)}});
  EXPECT_DIR_ERROR(dir, "model.safetensors: unexpected tensor layers.5.attn.wq");
}

TEST(IoModelDir, EngramTablesBelongInTheirOwnFile) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "m", s);
  std::vector<Entry> tables;
  {
    SafetensorsFile f(dir + "/engram.safetensors");
    for (auto& t : f.tensors()) tables.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  ASSERT_EQ(tables.size(), 2u);  // the table and its scales
  fs::remove(dir + "/engram.safetensors");
  rewrite(dir + "/model.safetensors", [](Entry&) { return true; }, tables);
  EXPECT_DIR_ERROR(dir, "tensor engram.tables is an engram table; it belongs in engram.safetensors");

  Supplier fresh;
  dir = write_tiny(tmp / "m2", fresh);
  std::vector<Entry> norm;
  rewrite(dir + "/model.safetensors", [&](Entry& e) {
    if (e.name != "final_norm") return true;
    norm.push_back(e);
    return false;
  });
  rewrite(dir + "/engram.safetensors", [](Entry&) { return true; }, norm);
  EXPECT_DIR_ERROR(dir, "engram.safetensors: tensor final_norm is not an engram table");
}

TEST(IoModelDir, DamagedOrMissingWeightFiles) {
  TempDir tmp;
  Supplier s;
  std::string dir = write_tiny(tmp / "m", s);
  const std::string model = dir + "/model.safetensors";
  fs::resize_file(model, fs::file_size(model) - 10);
  EXPECT_DIR_ERROR(dir, "model.safetensors: tensor", "beyond the data section");
  fs::remove(model);
  EXPECT_DIR_ERROR(dir, "tensor embed", "is missing");
  fs::remove(dir + "/engram.safetensors");
  EXPECT_DIR_ERROR(dir, "no *.safetensors weight files");
}

}  // namespace
}  // namespace wren
