// io/: mapped and pread files, the safetensors reader / writer, and typed weight views.
// Malformed files must give an IoError naming the file and the problem - never a crash
// (these tests also run under ASan / UBSan).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/weights.h"

#include "test_util.h"

namespace wren {
namespace {

namespace fs = std::filesystem;

using testing_util::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// A file in the format's byte layout, header text given verbatim (no padding).
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(uint64_t(header.size()) >> (8 * i));
  return s + header + std::string(data_bytes, '\x5a');
}

// The message of the IoError that opening `bytes` as a file gives ("" when it opens).
std::string open_error(const TempDir& dir, const std::string& bytes) {
  std::string path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  try {
    SafetensorsFile f(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_OPEN_ERROR(dir, bytes, ...)                                                       \
  do {                                                                                           \
    std::string msg = open_error(dir, bytes);                                                    \
    ASSERT_FALSE(msg.empty()) << "file was accepted";                                            \
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;                            \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

// ---- MappedFile, FileReader, RowReader -------------------------------------------------

TEST(IoMappedFile, MapsReadsAndMoves) {
  TempDir dir;
  auto bytes = pattern(10000, 1);
  write_bytes(dir / "f.bin", std::string(bytes.begin(), bytes.end()));
  MappedFile m(dir / "f.bin");
  ASSERT_EQ(m.size(), bytes.size());
  EXPECT_EQ(std::memcmp(m.data(), bytes.data(), bytes.size()), 0);
  MappedFile moved = std::move(m);
  EXPECT_EQ(m.data(), nullptr);
  EXPECT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(moved.data()[1234], bytes[1234]);

  write_bytes(dir / "empty.bin", "");
  MappedFile empty(dir / "empty.bin");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(IoMappedFile, MissingFileOrDirectoryNamesPath) {
  TempDir dir;
  try {
    MappedFile m(dir / "nope.bin");
    FAIL() << "opened a missing file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.bin: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MappedFile(dir.path.string()), IoError);
  EXPECT_THROW(FileReader(dir / "nope.bin"), IoError);
}

TEST(IoMappedFile, RowReaderReadsOneRowAndChecksRanges) {
  TempDir dir;
  auto bytes = pattern(16 + 5 * 12, 2);  // 16 bytes of something else, then 5 rows of 12 bytes
  write_bytes(dir / "t.bin", std::string(bytes.begin(), bytes.end()));
  RowReader rows(dir / "t.bin", 16, 12, 5);
  std::vector<uint8_t> row(12);
  for (int r = 0; r < 5; ++r) {
    rows.read_row(r, row.data());
    EXPECT_EQ(std::memcmp(row.data(), bytes.data() + 16 + 12 * r, 12), 0) << r;
  }
  EXPECT_THROW(rows.read_row(5, row.data()), IoError);
  EXPECT_THROW(rows.read_row(-1, row.data()), IoError);
  EXPECT_THROW(RowReader(dir / "t.bin", 16, 12, 6), IoError);                 // one row too many
  EXPECT_THROW(RowReader(dir / "t.bin", 16, uint64_t(1) << 62, 8), IoError);  // rows * bytes overflows
  FileReader f(dir / "t.bin");
  EXPECT_THROW(f.read_at(70, row.data(), 12), IoError);
}

// ---- Safetensors round trips -------------------------------------------------------------

TEST(IoSafetensors, RoundTripAllDtypesAligned) {
  TempDir dir;
  struct T {
    std::string name;
    Dtype dtype;
    Shape shape;
  };
  // Mixed element sizes in an order that would misalign them if written as given.
  std::vector<T> ts = {{"a.u8", Dtype::U8, {3, 5}},    {"b.bf16", Dtype::BF16, {7}},   {"c.f32", Dtype::F32, {2, 3}},
                       {"d.i8", Dtype::I8, {1, 1, 3}}, {"e.f16", Dtype::F16, {5}},     {"f.i64", Dtype::I64, {3}},
                       {"g.i32", Dtype::I32, {2}},     {"h.scalar", Dtype::F32, {}},   {"i.empty", Dtype::F32, {0, 4}},
                       {"j.f64", Dtype::F64, {1}}};
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "round trip");
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < ts.size(); ++i) {
    uint64_t n = 0;
    ASSERT_TRUE(tensor_bytes(ts[i].dtype, ts[i].shape, n));
    data.push_back(pattern(n, uint32_t(100 + i)));
    w.add(ts[i].name, ts[i].dtype, ts[i].shape, data.back());
  }
  w.write(dir / "x.safetensors");
  EXPECT_FALSE(fs::exists(dir / "x.safetensors.tmp"));

  SafetensorsFile f(dir / "x.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "round trip");
  ASSERT_EQ(f.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorView& t = f.at(ts[i].name);
    EXPECT_EQ(t.dtype, ts[i].dtype) << ts[i].name;
    EXPECT_EQ(t.shape, ts[i].shape) << ts[i].name;
    ASSERT_EQ(t.nbytes, data[i].size()) << ts[i].name;
    if (t.nbytes) {
      EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.nbytes), 0) << ts[i].name;
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype), 0u) << ts[i].name;
    EXPECT_EQ(t.data, f.mapping().data() + t.file_offset) << ts[i].name;
  }
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_THROW(f.at("nope"), IoError);

  // The byte layout: N little-endian, header padded with spaces so the data section is 8-aligned.
  std::string raw = read_bytes(dir / "x.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(raw[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  size_t last = raw.find_last_not_of(' ', 8 + n - 1);
  EXPECT_EQ(raw[last], '}');
  EXPECT_EQ(raw.size(), 8 + n + w.data_bytes());  // no gaps, nothing after the last tensor
}

TEST(IoSafetensors, ReadsHandWrittenReferenceLayout) {
  // Written by hand as the reference implementation would: unpadded header, tensors contiguous.
  TempDir dir;
  std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string bytes = raw_file(header, 0);
  float vals[2] = {1.5f, -2.25f};
  bytes.append(reinterpret_cast<const char*>(vals), 8);
  bytes += "xyz";
  write_bytes(dir / "ref.safetensors", bytes);
  SafetensorsFile f(dir / "ref.safetensors");
  float got[2];
  std::memcpy(got, f.at("w").data, 8);  // the data section need not be aligned here
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.25f);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.at("b").data), 3), "xyz");
  EXPECT_EQ(f.tensors()[0].name, "w");  // offset order
}

TEST(IoSafetensors, StreamedSourcesAndWriterErrors) {
  TempDir dir;
  auto big = pattern(3000, 7);
  SafetensorsWriter w;
  w.add("streamed", Dtype::F32, {750}, [&](const ByteSink& sink) {
    for (size_t at = 0; at < big.size(); at += 128) sink(big.data() + at, std::min<size_t>(128, big.size() - at));
  });
  w.write(dir / "s.safetensors");
  SafetensorsFile f(dir / "s.safetensors");
  EXPECT_EQ(std::memcmp(f.at("streamed").data, big.data(), big.size()), 0);

  SafetensorsWriter bad;
  bad.add("short", Dtype::F32, {750}, [&](const ByteSink& sink) { sink(big.data(), 100); });
  try {
    bad.write(dir / "bad.safetensors");
    FAIL() << "short source accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor short: data source produced 100 bytes"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "bad.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "bad.safetensors.tmp"));

  SafetensorsWriter w2;
  w2.add("x", Dtype::F32, {2}, std::vector<uint8_t>(8));
  EXPECT_THROW(w2.add("x", Dtype::F32, {2}, std::vector<uint8_t>(8)), IoError);      // twice
  EXPECT_THROW(w2.add("y", Dtype::F32, {3}, std::vector<uint8_t>(8)), IoError);      // wrong size
  EXPECT_THROW(w2.add("z", Dtype::F32, {-1}, std::vector<uint8_t>()), IoError);      // negative
  EXPECT_THROW(w2.add("__metadata__", Dtype::U8, {0}, std::vector<uint8_t>()), IoError);
}

// A paired source (a quantized weight's values and scales made in one pass) gives the same
// file, byte for byte, as the two tensors added from memory: the layout puts the F16 scales
// before the I8 values and an F32 and a U8 tensor around them, so the values are written at
// their offset while the sequential writes go on elsewhere.
TEST(IoSafetensors, PairedSourceWritesTheSameFileAsTwoEntries) {
  TempDir dir;
  const auto values = pattern(999, 3), scales = pattern(2 * 77, 5), norm = pattern(4 * 13, 9), tail = pattern(31, 11);
  auto fill = [&](SafetensorsWriter& w, bool paired) {
    w.add("norm", Dtype::F32, {13}, norm.data(), norm.size());
    if (paired) {
      w.add_pair({"w", Dtype::I8, {999}}, {"w.scales", Dtype::F16, {77}}, [&](const ByteSink& v, const ByteSink& s) {
        // Uneven pieces, interleaved: 100 value bytes, then 14 scale bytes, and so on.
        for (size_t a = 0, b = 0; a < values.size() || b < scales.size(); a += 100, b += 14) {
          if (a < values.size()) v(values.data() + a, std::min<size_t>(100, values.size() - a));
          if (b < scales.size()) s(scales.data() + b, std::min<size_t>(14, scales.size() - b));
        }
      });
    } else {
      w.add("w", Dtype::I8, {999}, values.data(), values.size());
      w.add("w.scales", Dtype::F16, {77}, scales.data(), scales.size());
    }
    w.add("tail", Dtype::U8, {31}, tail.data(), tail.size());
  };
  SafetensorsWriter a, b;
  fill(a, true);
  fill(b, false);
  a.write(dir / "paired.safetensors");
  b.write(dir / "plain.safetensors");
  EXPECT_EQ(read_bytes(dir / "paired.safetensors"), read_bytes(dir / "plain.safetensors"));
  SafetensorsFile f(dir / "paired.safetensors");
  EXPECT_EQ(std::memcmp(f.at("w").data, values.data(), values.size()), 0);
  EXPECT_EQ(std::memcmp(f.at("w.scales").data, scales.data(), scales.size()), 0);

  // Either half short or long is an error naming its tensor, and no file is left.
  for (const auto& [short_scales, expected] : {std::pair{true, "tensor w.scales: data source produced 2 bytes"},
                                               std::pair{false, "tensor w: data source produced more than the 999"}}) {
    SafetensorsWriter bad;
    bad.add_pair({"w", Dtype::I8, {999}}, {"w.scales", Dtype::F16, {77}}, [&](const ByteSink& v, const ByteSink& s) {
      v(values.data(), short_scales ? values.size() : values.size() - 1);
      s(scales.data(), short_scales ? 2 : scales.size());
      if (!short_scales) v(values.data(), 2);
    });
    try {
      bad.write(dir / "bad.safetensors");
      FAIL() << "a wrong paired source was accepted";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "bad.safetensors"));
    EXPECT_FALSE(fs::exists(dir / "bad.safetensors.tmp"));
  }
  SafetensorsWriter twice;
  EXPECT_THROW(twice.add_pair({"w", Dtype::I8, {2}}, {"w", Dtype::F16, {1}}, [](const ByteSink&, const ByteSink&) {}),
               IoError);
}

// ---- Malformed files -------------------------------------------------------------------

TEST(IoSafetensors, TruncatedAnywhere) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("layers.0.attn.wq", Dtype::F32, {4, 4}, pattern(64, 3));
  w.add("layers.0.attn.wk", Dtype::BF16, {4, 4}, pattern(32, 4));
  w.write(dir / "good.safetensors");
  const std::string good = read_bytes(dir / "good.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(good[i])) << (8 * i);
  ASSERT_EQ(good.size(), 8 + n + 96);
  struct Cut {
    size_t at;
    const char* says;
  };
  for (Cut c : {Cut{0, "too short for the 8-byte header length"}, Cut{3, "too short"}, Cut{7, "too short"},
                Cut{8, "beyond the file size"}, Cut{8 + n / 2, "beyond the file size"},
                Cut{8 + n - 1, "beyond the file size"}, Cut{8 + n, "beyond the data section"},
                Cut{8 + n + 50, "beyond the data section"}, Cut{good.size() - 1, "beyond the data section"}}) {
    SCOPED_TRACE("cut at " + std::to_string(c.at));
    EXPECT_OPEN_ERROR(dir, good.substr(0, c.at), c.says);
  }
  EXPECT_EQ(open_error(dir, good), "");
}

TEST(IoSafetensors, BadHeaderLength) {
  TempDir dir;
  std::string huge(8, '\xff');  // 2^64 - 1
  EXPECT_OPEN_ERROR(dir, huge + "{}", "header length 18446744073709551615 exceeds the limit");
  std::string f = raw_file("{}", 0);
  f[0] = 40;  // 40 header bytes claimed, 2 present
  EXPECT_OPEN_ERROR(dir, f, "header length 40 is beyond the file size 10");
}

TEST(IoSafetensors, HeaderNotJsonOrNotObject) {
  TempDir dir;
  EXPECT_OPEN_ERROR(dir, raw_file("not json at all", 0), "header is not valid JSON");
  EXPECT_OPEN_ERROR(dir, raw_file("{\"a\": ", 0), "header is not valid JSON");
  EXPECT_OPEN_ERROR(dir, raw_file("", 0), "header is not valid JSON");
  EXPECT_OPEN_ERROR(dir, raw_file("[1,2,3]", 0), "header is not a JSON object");
  EXPECT_OPEN_ERROR(dir, raw_file("{\"a\":\"\xff\xfe\"}", 0), "header is not valid JSON");  // not UTF-8
  EXPECT_OPEN_ERROR(dir, raw_file("{\"x\":" + std::string(5000, '[') + std::string(5000, ']') + "}", 0),
                    "nested too deeply");
}

TEST(IoSafetensors, BadEntries) {
  TempDir dir;
  auto entry = [](const std::string& body) { return "{\"t.w\":" + body + "}"; };
  EXPECT_OPEN_ERROR(dir, raw_file(entry("[1]"), 8), "tensor t.w", "expected an object");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[2]})"), 8), "tensor t.w", "missing field \"data_offsets\"");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"), 8),
                    "tensor t.w", "unknown field \"x\"");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"Q9","shape":[2],"data_offsets":[0,8]})"), 8),
                    "tensor t.w", "unknown dtype \"Q9\"");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})"), 8), "dtype must be a string");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), 8),
                    "tensor t.w", "negative dimension");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), 8),
                    "non-negative integers");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"), 8), "shape must be a list");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})"), 8),
                    "is too large");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), 8),
                    "data_offsets must be two non-negative integers");
  EXPECT_OPEN_ERROR(dir, raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,7]})"), 8),
                    "data_offsets must be two");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"__metadata__":{"a":1}})", 0), "__metadata__.a must be a string");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"__metadata__":[1]})", 0), "__metadata__ must be an object");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", 0), "empty name");
}

TEST(IoSafetensors, OffsetsOutOfRangeWrongSizeAndOverlap) {
  TempDir dir;
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"layers.3.attn.wq":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 20),
                    "tensor layers.3.attn.wq: data_offsets [8,24]: end is beyond the data section (20 bytes");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 20), "begin is after end");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16),
                    "tensor w: data_offsets [0,16] hold 16 bytes, but shape [3] of F32 needs 12");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})", 16),
                    "tensors a (data_offsets [0,8]) and b (data_offsets [6,10]) overlap");
  EXPECT_OPEN_ERROR(dir, raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                  R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 16),
                    "overlap");
  // Gaps and zero-sized tensors are fine.
  EXPECT_EQ(open_error(dir, raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                     R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]},)"
                                     R"("b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})", 8)), "");
}

TEST(IoSafetensors, RandomCorruptionNeverCrashes) {
  TempDir dir;
  SafetensorsWriter w;
  w.set_metadata("k", "v");
  w.add("a", Dtype::F32, {3, 2}, pattern(24, 5));
  w.add("b", Dtype::I8, {5}, pattern(5, 6));
  w.add("c", Dtype::BF16, {2, 2}, pattern(8, 7));
  w.write(dir / "good.safetensors");
  const std::string good = read_bytes(dir / "good.safetensors");
  std::mt19937 rng(42);
  int rejected = 0;
  for (int it = 0; it < 400; ++it) {
    std::string bad = good;
    int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = char(rng());
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    std::string msg = open_error(dir, bad);  // must return, not crash
    if (!msg.empty()) {
      ++rejected;
      EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
    }
  }
  EXPECT_GT(rejected, 100);
}

// ---- Typed weight views ----------------------------------------------------------------

TensorInfo info(const std::string& name, Shape shape) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  return t;
}

std::string weight_error(const TensorSet& set, const TensorInfo& t, std::optional<kernels::DType> req = std::nullopt) {
  try {
    set.weight(t, req);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_WEIGHT_ERROR(set, t, ...)                                                         \
  do {                                                                                           \
    std::string msg = weight_error(set, t);                                                      \
    ASSERT_FALSE(msg.empty()) << "weight was accepted";                                          \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

TEST(IoWeights, TypedViewsOfEachStorageType) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("f", Dtype::F32, {4, 8}, pattern(128, 1));
  w.add("b", Dtype::BF16, {8}, pattern(16, 2));
  w.add("q8", Dtype::I8, {3, 4, 16}, pattern(192, 3));
  w.add("q8.scales", Dtype::F16, {3, 4, 2}, pattern(48, 4));
  w.add("q4", Dtype::U8, {6, 16}, pattern(96, 5));
  w.add("q4.scales", Dtype::F16, {6, 4}, pattern(48, 6));
  w.write(dir / "model.safetensors");
  TensorSet set;
  set.add_file(dir / "model.safetensors");
  const SafetensorsFile& file = *set.files()[0];

  WeightView f = set.weight(info("f", {4, 8}));
  EXPECT_EQ(f.storage, kernels::DType::f32);
  EXPECT_EQ(f.data, file.at("f").data);
  EXPECT_EQ(f.group, 0);
  EXPECT_EQ(f.scales, nullptr);
  EXPECT_EQ(set.weight(info("b", {8})).storage, kernels::DType::bf16);

  WeightView q8 = set.weight(info("q8", {3, 4, 16}));
  EXPECT_EQ(q8.storage, kernels::DType::q8);
  EXPECT_EQ(q8.group, 8);
  EXPECT_EQ(q8.scales, file.at("q8.scales").data);
  EXPECT_EQ(q8.file, dir / "model.safetensors");

  WeightView q4 = set.weight(info("q4", {6, 32}));
  EXPECT_EQ(q4.storage, kernels::DType::q4);
  EXPECT_EQ(q4.group, 8);
  EXPECT_EQ(q4.shape, (Shape{6, 32}));
  EXPECT_EQ(q4.stored->shape, (Shape{6, 16}));

  EXPECT_EQ(weight_error(set, info("f", {4, 8}), kernels::DType::f32), "");
  std::string msg = weight_error(set, info("q8", {3, 4, 16}), kernels::DType::f32);
  EXPECT_NE(msg.find("tensor q8: stored as q8 (I8) in"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected f32"), std::string::npos) << msg;

  WeightMap map;
  for (auto& [n, s] : std::vector<std::pair<std::string, Shape>>{{"f", {4, 8}}, {"b", {8}}, {"q8", {3, 4, 16}}, {"q4", {6, 32}}})
    map.tensors.push_back(info(n, s));
  EXPECT_NO_THROW(set.check_no_extra(map));
  map.tensors.pop_back();  // q4 and its scales are now unexpected
  try {
    set.check_no_extra(map);
    FAIL() << "extra tensor accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: unexpected tensor q4"), std::string::npos) << e.what();
  }
}

TEST(IoWeights, ShapeDtypeScalesAndMissingErrors) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("layers.0.attn.wq", Dtype::F32, {64, 32}, pattern(64 * 32 * 4, 1));
  w.add("i32", Dtype::I32, {4}, pattern(16, 2));
  w.add("noscale", Dtype::I8, {2, 8}, pattern(16, 3));
  w.add("badscale", Dtype::I8, {2, 8}, pattern(16, 4));
  w.add("badscale.scales", Dtype::F16, {2, 3}, pattern(12, 5));
  w.add("f32scale", Dtype::I8, {2, 8}, pattern(16, 6));
  w.add("f32scale.scales", Dtype::F32, {2, 2}, pattern(16, 7));
  w.add("oddq4", Dtype::U8, {2, 6}, pattern(12, 8));
  w.add("oddq4.scales", Dtype::F16, {2, 4}, pattern(16, 9));
  w.add("plain", Dtype::F32, {2}, pattern(8, 10));
  w.add("plain.scales", Dtype::F16, {1}, pattern(2, 11));
  w.write(dir / "model.safetensors");
  TensorSet set;
  set.add_file(dir / "model.safetensors");

  EXPECT_WEIGHT_ERROR(set, info("layers.0.attn.wq", {64, 64}),
                      "tensor layers.0.attn.wq: shape [64,32] in", "model.safetensors, expected [64,64] from the weight map");
  EXPECT_WEIGHT_ERROR(set, info("i32", {4}), "tensor i32: dtype I32 in", "not a weight storage type");
  EXPECT_WEIGHT_ERROR(set, info("noscale", {2, 8}), "tensor noscale", "needs scales noscale.scales", "missing");
  EXPECT_WEIGHT_ERROR(set, info("badscale", {2, 8}), "scales badscale.scales have shape [2,3]", "does not group");
  EXPECT_WEIGHT_ERROR(set, info("f32scale", {2, 8}), "dtype F32", "expected F16");
  EXPECT_WEIGHT_ERROR(set, info("oddq4", {2, 12}), "4-bit group size 3", "must be even");
  EXPECT_WEIGHT_ERROR(set, info("oddq4", {2, 11}), "odd last dimension");
  EXPECT_WEIGHT_ERROR(set, info("plain", {2}), "has plain.scales", "takes no scales");
  EXPECT_WEIGHT_ERROR(set, info("layers.9.ffn.w_up", {4, 4}), "tensor layers.9.ffn.w_up", "is missing",
                      "model.safetensors");

  // The same name in two files.
  SafetensorsWriter w2;
  w2.add("plain", Dtype::F32, {2}, pattern(8, 12));
  w2.write(dir / "other.safetensors");
  try {
    set.add_file(dir / "other.safetensors");
    FAIL() << "duplicate accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("other.safetensors: tensor plain is also in"), std::string::npos) << e.what();
  }
}

TEST(IoWeights, StorageShapes) {
  EXPECT_EQ(stored_shape(kernels::DType::q4, {4, 32}, "x"), (Shape{4, 16}));
  EXPECT_EQ(stored_shape(kernels::DType::q8, {4, 32}, "x"), (Shape{4, 32}));
  EXPECT_EQ(scales_shape(kernels::DType::q8, {2, 4, 32}, 8, "x"), (Shape{2, 4, 4}));
  EXPECT_THROW(scales_shape(kernels::DType::q8, {4, 30}, 8, "x"), IoError);
  EXPECT_THROW(scales_shape(kernels::DType::q4, {4, 30}, 3, "x"), IoError);
  EXPECT_THROW(scales_shape(kernels::DType::q8, {4, 32}, 0, "x"), IoError);
  EXPECT_THROW(stored_shape(kernels::DType::q8, {}, "x"), IoError);
}

}  // namespace
}  // namespace wren
