// The training loop: the same seed, data and thread count give the same loss curve; a run
// stopped and resumed from its checkpoint continues the identical loss sequence; the model
// it exports is one the engine loads.
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/model_files.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace wren::train {
namespace {

namespace fs = std::filesystem;

struct Workspace {
  fs::path dir;
  TrainOptions options;
  Workspace() {
    static int counter = 0;
    dir = fs::path(::testing::TempDir()) / ("wren_trainer_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    options = train_test::tiny_training_workspace(dir, "embla-mini");
  }
  ~Workspace() { fs::remove_all(dir); }
};

std::vector<double> losses(const TrainResult& r) {
  std::vector<double> out;
  for (const StepRecord& s : r.steps) out.push_back(s.loss);
  return out;
}

TEST(Trainer, SameSeedSameLossCurve) {
  Workspace a, b;
  const TrainResult ra = run_training(a.options), rb = run_training(b.options);
  ASSERT_EQ(ra.steps.size(), 6u);
  EXPECT_EQ(losses(ra), losses(rb));
  EXPECT_LT(ra.steps.back().loss, ra.steps.front().loss) << "six steps on repetitive text should lower the loss";
  ASSERT_FALSE(ra.evals.empty());
  EXPECT_GT(ra.evals.back().bits_per_byte, 0.0);
}

TEST(Trainer, ResumeContinuesTheIdenticalLossSequence) {
  Workspace straight, resumed;
  const TrainResult full = run_training(straight.options);
  resumed.options.checkpoint = (resumed.dir / "ckpt").string();
  const TrainResult first = run_training(resumed.options, 3);
  ASSERT_EQ(first.steps.size(), 3u);
  ASSERT_TRUE(fs::exists(resumed.dir / "ckpt" / "step"));
  const TrainResult rest = run_training(resumed.options);
  ASSERT_EQ(rest.steps.size(), 3u);
  EXPECT_EQ(rest.steps.front().step, 3);
  std::vector<double> joined = losses(first), tail = losses(rest);
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(joined, losses(full));
}

TEST(Trainer, ExportsAModelTheEngineLoads) {
  Workspace w;
  w.options.output = (w.dir / "model").string();
  run_training(w.options);
  auto model = open_model(w.options.output);
  EXPECT_EQ(model->config.name, "embla-mini");
}

}  // namespace
}  // namespace wren::train
