// `wren train` runs the trainer binary wren-train beside `wren` (tools/cmd_train_launch.cpp):
// its options reach the trainer, a run exports a model directory that `wren generate` runs,
// and the trainer's own errors come back with a non-zero status.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../run_command.h"
#include "train_test_util.h"

namespace wren::train {
namespace {

namespace fs = std::filesystem;

using Result = testing_util::CommandResult;

Result wren(const std::string& args) { return testing_util::run_command(std::string(WREN_BINARY) + " " + args); }

TEST(TrainCli, HelpIsTheTrainers) {
  const Result r = wren("train --help");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--balancing"), std::string::npos) << r.output;
}

TEST(TrainCli, TrainerErrorsComeBack) {
  const Result r = wren("train embla-mini --data /nonexistent-wren-data");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;  // required, missing
}

TEST(TrainCli, TrainsAndExportsAModelTheEngineRuns) {
  train_test::TempDir dir("train_cli");
  const TrainOptions o = train_test::tiny_training_workspace(dir.path, "embla-mini");
  const std::string out = (dir.path / "model").string();
  const Result t = wren("train embla-mini --data " + o.data[0] + " --tokenizer " + o.tokenizer +
                        " --heldout doc3.txt --seq-len 16 --batch 2 --steps 2 --warmup 1 --eval-every 2 --eval-rows 2 "
                        "--seed 3 -t 1 --dtype f32 -o " + out);
  ASSERT_EQ(t.status, 0) << t.output;
  ASSERT_TRUE(fs::exists(fs::path(out) / "config.json")) << t.output;
  const Result g = wren("generate -m " + out + " \"The cat\" -n 4 --seed 1");
  EXPECT_EQ(g.status, 0) << g.output;
  EXPECT_NE(g.output.find("The cat"), std::string::npos) << g.output;
}

}  // namespace
}  // namespace wren::train
