#include "thread_tuner.h"

#include <algorithm>
#include <vector>

#include "src/base/common.h"

namespace tg {

namespace {
constexpr size_t kWindow = 9;   // recent steps the probe is compared with
constexpr double kGain = 0.95;  // a probe must take at most 95% of the median
constexpr size_t kMinSamples = 5;

double median(const std::deque<double>& d) {
  std::vector<double> v(d.begin(), d.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}
}  // namespace

ThreadTuner::ThreadTuner(int parts, int probe_every)
    : parts_(std::max(1, parts)), active_(parts_), probe_every_(std::max(2, probe_every)) {
  since_probe_ = probe_every_ - int(kMinSamples) - 5;  // the first probe after ~10 steps
}

int ThreadTuner::other() const { return active_ == parts_ ? std::max(1, parts_ / 2) : parts_; }

int ThreadTuner::next_threads() {
  probing_ = parts_ > 1 && since_probe_ >= probe_every_ && recent_.size() >= kMinSamples;
  return probing_ ? other() : active_;
}

std::string ThreadTuner::report(double seconds) {
  if (!probing_) {
    recent_.push_back(seconds);
    if (recent_.size() > kWindow) recent_.pop_front();
    since_probe_++;
    return "";
  }
  probing_ = false;
  since_probe_ = 0;
  const double m = median(recent_);
  if (!(seconds < kGain * m)) return "";
  const int from = active_;
  active_ = other();
  recent_.clear();
  recent_.push_back(seconds);
  return strf(
      "threads: %d of %d running (a step took %.1f ms with %d, %.1f ms with %d: %s)", active_,
      parts_, seconds * 1e3, active_, m * 1e3, from,
      active_ < from ? "the cores are shared with another process" : "the cores are free again");
}

}  // namespace tg
