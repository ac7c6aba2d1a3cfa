// train/: the learning-rate multiplier (equations in schedule.h).
#include "train/schedule.h"

#include <cmath>
#include <string>

namespace wren::train {

int64_t LrSchedule::decay_start() const {
  return total_steps - int64_t(std::llround(decay_fraction * double(total_steps)));
}

void LrSchedule::validate() const {
  auto fail = [](const std::string& what) { throw ScheduleError("lr schedule: " + what); };
  if (total_steps <= 0) fail("total_steps must be > 0, got " + std::to_string(total_steps));
  if (warmup_steps < 0) fail("warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  if (!(decay_fraction >= 0.0 && decay_fraction <= 1.0))
    fail("decay_fraction must be in [0, 1], got " + std::to_string(decay_fraction));
  if (!(floor >= 0.0 && floor <= 1.0)) fail("floor must be in [0, 1], got " + std::to_string(floor));
  if (warmup_steps > decay_start())
    fail("warmup_steps (" + std::to_string(warmup_steps) + ") overlap the decay, which starts at step " +
         std::to_string(decay_start()));
}

double LrSchedule::multiplier(int64_t step) const {
  validate();
  if (step < 0) throw ScheduleError("lr schedule: step must be >= 0, got " + std::to_string(step));
  if (step >= total_steps) return floor;
  if (step < warmup_steps) return double(step + 1) / double(warmup_steps);
  const int64_t d = decay_start();
  if (step < d) return 1.0;
  const int64_t span = total_steps - 1 - d;
  const double t = span > 0 ? double(step - d) / double(span) : 1.0;
  return floor + (1.0 - floor) * (1.0 - std::sqrt(t));
}

}  // namespace wren::train
