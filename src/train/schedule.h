// train/: the learning-rate multiplier over training steps (seed 002 "Training schedule";
// NOTES.md 4): linear warmup, a constant stretch at peak, then a 1 - sqrt(t) decay to a floor
// over the last fraction of training. Every optimiser group's lr is its peak lr times this.
//
//   step <  W:            m = (step + 1) / W
//   W <= step < D:        m = 1
//   D <= step < N:        m = floor + (1 - floor) (1 - sqrt(t)),  t = (step - D) / (N - 1 - D)
//   step >= N:            m = floor
//
// with N = total_steps, W = warmup_steps, D = N - round(decay_fraction N). The decay starts at 1
// and ends at the floor on the last step. The floor sits inside the formula rather than clipping
// it: Nenya's decay reaches 0.193 after 10.07B of its 15.17B decay tokens and 0.010 at the end,
// and 0.01 + 0.99 (1 - sqrt(10.07 / 15.17)) = 0.193, whereas a clipped 1 - sqrt(t) gives 0.185.
#pragma once

#include <cstdint>
#include <stdexcept>

namespace wren::train {

struct ScheduleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LrSchedule {
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
  double decay_fraction = 0.25;  // of total_steps, at the end
  double floor = 0.01;           // the multiplier on the last step

  // Throws ScheduleError naming the field when the numbers do not describe a schedule.
  void validate() const;
  // The multiplier for 0-based `step` (validates first).
  double multiplier(int64_t step) const;
  // The first step of the decay (D above).
  int64_t decay_start() const;
};

}  // namespace wren::train
