// The model-directory fuzz target (tests/fuzz/fuzz_model_dir.cpp) replayed without libFuzzer,
// so the GCC builds run it too: its seeds, then 300 deterministic
// mutations of them (bytes overwritten, truncations, bytes inserted). The target aborts on a
// fault it detects; ASan / UBSan (the build-asan suite) report the rest.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerInitialize(int*, char***);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(FuzzModelDir, SeedsAndMutations) {
  namespace fs = std::filesystem;
  LLVMFuzzerInitialize(nullptr, nullptr);
  std::vector<std::string> seeds;
  for (const auto& e : fs::directory_iterator(fs::path(WREN_SOURCE_DIR) / "tests/fuzz/corpus/model_dir")) {
    std::ifstream in(e.path(), std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_EQ(seeds.size(), 3u);
  auto run = [](const std::string& s) { LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
  for (const std::string& s : seeds) run(s);
  std::mt19937 rng(14);
  for (int i = 0; i < 300; ++i) {
    std::string s = seeds[size_t(i) % seeds.size()];
    const size_t at = 1 + rng() % (s.size() - 1);
    switch (rng() % 3) {
      case 0:
        for (int k = 0; k < 4 && at + size_t(k) < s.size(); ++k) s[at + size_t(k)] = char(rng());
        break;
      case 1: s.resize(at); break;
      default: s.insert(at, std::string(1 + rng() % 8, char(rng()))); break;
    }
    run(s);
  }
}

}  // namespace
