// Tests for train/data: document splitting, packing round-trips, the held-out split, the seeded
// sampler and the byte count behind bits per byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "text/bpe_train.h"
#include "train/data.h"

namespace wren::train {
namespace {

namespace fs = std::filesystem;

// A random "word" text per document, so a document's text appears nowhere else.
std::string random_text(std::mt19937& rng, int words, bool non_ascii) {
  static const char* syll[] = {"ka", "lo", "mi", "ne", "su", "ta", "vor", "eln", "qua", "zi"};
  static const char* accents[] = {"é", "ø", "ß", "ж", "語"};
  std::string s;
  for (int w = 0; w < words; ++w) {
    if (w) s += (rng() % 9 == 0) ? ".\n" : " ";
    int n = 2 + int(rng() % 3);
    for (int i = 0; i < n; ++i) s += syll[rng() % 10];
    if (non_ascii && rng() % 4 == 0) s += accents[rng() % 5];
  }
  return s;
}

std::vector<Document> make_docs(int n, bool non_ascii, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<Document> docs;
  for (int i = 0; i < n; ++i) docs.push_back({"doc" + std::to_string(i) + ".txt", 0, random_text(rng, 20 + int(rng() % 60), non_ascii)});
  return docs;
}

const text::Tokenizer& tokenizer() {
  static const text::Tokenizer tok = [] {
    text::BpeTrainOptions o;
    o.vocab_size = 400;
    std::vector<std::string> texts;
    for (const Document& d : make_docs(40, true, 99)) texts.push_back(d.text);
    return text::Tokenizer::from_json(text::train_bpe(texts, o), "test-bpe");
  }();
  return tok;
}

// The stream data.h describes, built here from the documents directly.
std::vector<int32_t> expected_stream(const std::vector<Document>& docs, int32_t eot) {
  std::vector<int32_t> s{eot};
  for (const Document& d : docs) {
    auto ids = tokenizer().encode(d.text, false);
    s.insert(s.end(), ids.begin(), ids.end());
    s.push_back(eot);
  }
  return s;
}

TEST(TrainData, SplitsFilesAtEndOfTextMarkers) {
  auto docs = split_documents("f.txt", "first doc\nline two\n\n<|endoftext|>\n\nsecond\n<|endoftext|>\n\n");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text, "first doc\nline two");
  EXPECT_EQ(docs[1].text, "second");
  EXPECT_EQ(docs[1].index, 1);
  auto whole = split_documents("g.txt", "  no marker here\n\n");
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].text, "  no marker here\n\n");  // one file = one document, as written
  EXPECT_TRUE(split_documents("e.txt", "").empty());
}

TEST(TrainData, PackedRowsRoundTripToTheTokenStream) {
  const auto docs = make_docs(12, true);
  for (int64_t T : {1, 7, 64}) {
    Corpus c(docs, tokenizer(), {.seq_len = T});
    const PackedRows& p = c.train();
    std::vector<int32_t> want = expected_stream(docs, c.eot_id());
    ASSERT_GT(p.rows(), 0);
    ASSERT_EQ(p.rows(), (int64_t(want.size()) - 1) / T);
    want.resize(size_t(p.rows() * T + 1));
    // Rows overlap by one token: row 0 whole, then each later row without its first token.
    Batch all = p.batch(0, p.rows());
    ASSERT_EQ(all.inputs.sizes(), (std::vector<int64_t>{p.rows(), T}));
    std::vector<int32_t> joined{int32_t(all.inputs[0][0].item<int64_t>())};
    torch::Tensor targets = all.targets.reshape(-1);
    for (int64_t i = 0; i < targets.size(0); ++i) joined.push_back(int32_t(targets[i].item<int64_t>()));
    EXPECT_EQ(joined, want) << "T=" << T;
    // Targets are the inputs shifted by one.
    EXPECT_TRUE(torch::equal(all.inputs.reshape(-1).slice(0, 1), all.targets.reshape(-1).slice(0, 0, -1)));
  }
}

TEST(TrainData, HeldOutDocumentsNeverReachTraining) {
  auto docs = make_docs(20, false);
  CorpusOptions o{.seq_len = 16, .heldout_files = {"doc4.txt", "somewhere/doc7.txt"}, .heldout_every = 5};
  docs[7].file = "somewhere/doc7.txt";
  Corpus c(docs, tokenizer(), o);
  const std::set<int> held = {4, 7, 9, 14, 19};  // listed files, and the 5th, 10th, 15th, 20th
  const std::string train = tokenizer().decode(c.train().stream);
  const std::string heldout = tokenizer().decode(c.heldout().stream);
  EXPECT_EQ(c.heldout().documents.size(), held.size());
  for (int i = 0; i < 20; ++i) {
    // Each document's middle (whole rows may cut the last document's end) names its split.
    const std::string probe = docs[size_t(i)].text.substr(0, 40);
    if (held.count(i)) {
      EXPECT_EQ(train.find(probe), std::string::npos) << "held-out document " << i << " is in training rows";
    } else {
      EXPECT_EQ(heldout.find(probe), std::string::npos) << "training document " << i << " is held out";
    }
  }
  EXPECT_NE(heldout.find(docs[4].text.substr(0, 40)), std::string::npos);
  EXPECT_NE(train.find(docs[0].text.substr(0, 40)), std::string::npos);
}

TEST(TrainData, SameSeedSameBatches) {
  Corpus c(make_docs(30, false), tokenizer(), {.seq_len = 8});
  const int64_t n = c.train().rows();
  ASSERT_GT(n, 20);
  Sampler a(c.train(), 4, 123), b(c.train(), 4, 123), other(c.train(), 4, 124);
  bool differs = false;
  for (int64_t step = 0; step < 3 * n / 4; ++step) {
    Batch x = a.batch(step), y = b.batch(step);
    EXPECT_TRUE(torch::equal(x.inputs, y.inputs));
    EXPECT_TRUE(torch::equal(x.targets, y.targets));
    differs |= a.batch_rows(step) != other.batch_rows(step);
  }
  EXPECT_TRUE(differs);
  // A resumed sampler starts where an unbroken one is, and every epoch visits every row once.
  Sampler late(c.train(), 4, 123);
  EXPECT_EQ(late.batch_rows(2 * n), a.batch_rows(2 * n));
  for (int64_t e = 0; e < 2; ++e) {
    std::vector<int64_t> order = a.epoch_order(e);
    std::sort(order.begin(), order.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(order[size_t(i)], i);
  }
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
}

TEST(TrainData, HeldOutTargetBytesCountTheText) {
  // T = 1 keeps every token: the targets are exactly the documents and their end markers.
  const auto docs = make_docs(9, true);
  Corpus c(docs, tokenizer(), {.seq_len = 1, .heldout_every = 3});
  int64_t bytes = 0;
  for (size_t i = 2; i < docs.size(); i += 3) bytes += int64_t(docs[i].text.size());
  EXPECT_EQ(c.heldout().target_bytes, bytes);
  // With longer rows the dropped tail is not counted: ASCII text decodes to one byte per byte.
  const auto ascii = make_docs(9, false);
  Corpus d(ascii, tokenizer(), {.seq_len = 32, .heldout_every = 3});
  const PackedRows& h = d.heldout();
  ASSERT_GT(h.rows(), 0);
  std::vector<int32_t> targets(h.stream.begin() + 1, h.stream.end());
  EXPECT_EQ(h.target_bytes, int64_t(tokenizer().decode(targets, /*skip_special=*/true).size()));
}

TEST(TrainData, ReadsFoldersInSortedOrderAndRejectsBadFiles) {
  const fs::path dir = fs::temp_directory_path() / "wren_test_data";
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  fs::create_directories(dir / ".hidden");
  auto write = [](const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; };
  write(dir / "b.txt", "bee");
  write(dir / "a.txt", "one\n<|endoftext|>\ntwo");
  write(dir / "sub" / "c.txt", "sea");
  write(dir / ".hidden" / "x.txt", "secret");
  write(dir / ".dot.txt", "dot");
  auto docs = read_documents({dir.string()});
  std::vector<std::string> texts;
  for (const Document& d : docs) texts.push_back(d.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"one", "two", "bee", "sea"}));
  EXPECT_THROW(read_documents({(dir / "missing.txt").string()}), DataError);
  write(dir / "bad.txt", std::string("ok\xff\xfe", 4));
  try {
    read_documents({dir.string()});
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Corpus(docs, tokenizer(), {.seq_len = 0}), DataError);
  EXPECT_THROW(Corpus(docs, tokenizer(), {.seq_len = 4, .eot = "<|nope|>"}), DataError);
  Corpus tiny(docs, tokenizer(), {.seq_len = 1000});
  EXPECT_THROW(Sampler(tiny.train(), 2, 1), DataError);  // no full row
  fs::remove_all(dir);
}

}  // namespace
}  // namespace wren::train
