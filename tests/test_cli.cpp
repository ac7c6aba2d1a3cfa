// The `wren` command line end to end: output on success, a clear message and a non-zero
// exit status on bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int status;
  std::string output;  // stdout and stderr together
};

Result run(const std::string& args) {
  std::string cmd = std::string(WREN_BINARY) + " " + args + " 2>&1";
  Result r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, ExploreHfConfig) {
  Result r = run(std::string("explore --hf ") + WREN_SOURCE_DIR + "/tests/fixtures/hf/llama-3.1-8b.json --format csv");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("parameters,total,,parameters,8030261248"), std::string::npos) << r.output.substr(0, 400);
}

TEST(Cli, ExploreTableJsonCsv) {
  Result t = run("explore embla-mini nenya-mini --context 512,2048");
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("nenya-mini"), std::string::npos);
  Result j = run("explore embla-mini --format json");
  ASSERT_EQ(j.status, 0) << j.output;
  EXPECT_EQ(j.output.front(), '{');
  Result c = run("explore embla-mini --format csv");
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_EQ(c.output.rfind("model,section,metric,context,unit,value", 0), 0u);
}

TEST(Cli, BadConfigsFailWithAClearMessage) {
  struct Case { const char* file; const char* text; const char* expect; };
  const Case cases[] = {
      {"missing.json", R"({"vocab_size": 10, "context_length": 8, "mixers": {}, "ffns": {}, "layers": []})", "d_model: missing"},
      {"type.json", R"({"d_model": "big"})", "d_model: expected an integer"},
      {"zero.json", R"({"d_model": 0})", "d_model: value 0 must be >= 1"},
      {"notjson.json", "{", "invalid JSON"},
  };
  for (const Case& c : cases) {
    std::string path = write_temp(c.file, c.text);
    Result r = run("explore " + path);
    EXPECT_NE(r.status, 0) << c.file;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.file << ": " << r.output;
    EXPECT_NE(r.output.find(c.file), std::string::npos) << r.output;
    std::remove(path.c_str());
  }
  std::string hf = write_temp("hf_bad.json", R"({"model_type": "rwkv", "hidden_size": 64})");
  Result bad_type = run("explore --hf " + hf);
  EXPECT_NE(bad_type.status, 0);
  EXPECT_NE(bad_type.output.find("\"rwkv\""), std::string::npos) << bad_type.output;
  EXPECT_NE(bad_type.output.find("hf_bad.json"), std::string::npos) << bad_type.output;
  std::remove(hf.c_str());
  Result r = run("explore no-such-model");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("unknown preset"), std::string::npos) << r.output;
  r = run("explore embla-mini --weights int3");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("int3"), std::string::npos) << r.output;
}

}  // namespace
