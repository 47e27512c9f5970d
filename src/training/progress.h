// progress.h: what a run prints as it goes: the one line of its config, and the estimate of
// the time left on each progress line.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "src/config/config.h"
#include "src/model/model.h"

namespace tg {

// One line: mode, steps, schedule, the model's shape (mc: from the config or model.init_from),
// the micro-batch and ranks, out_dir, and where the full config is (out_dir/config.json).
std::string config_line(const Config& cfg, const GPTConfig& mc, int world);

// The time left, from the recent steps' mean time. The first step a process runs (warm-up:
// allocation, caches, the thread tuner's first trial) is left out, and so are the next
// kWarmupSteps while they are over 10x the median of the window; there is no estimate until
// kMinSteps steps after the first are timed. Then: the mean of the last kWindow.
class EtaClock {
 public:
  static constexpr size_t kMinSteps = 5, kWindow = 20, kWarmupSteps = 3;
  void add(double seconds);
  bool ready() const { return timed_ >= kMinSteps; }
  double seconds_left(int64_t steps_left) const;  // ready() only

 private:
  bool first_seen_ = false;
  size_t timed_ = 0;                              // steps timed after the first
  std::deque<std::pair<size_t, double>> recent_;  // (timed_ when added, seconds)
};

}  // namespace tg
