#include "progress.h"

#include <algorithm>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/precision/precision.h"

namespace tg {

std::string config_line(const Config& cfg, const GPTConfig& mc, int world) {
  std::string model = strf("%d layers x %d channels, %d heads, vocab %d", mc.n_layer, mc.n_embd,
                           mc.n_head, mc.vocab_size);
  if (!cfg.model.init_from.empty()) model += " from " + cfg.model.init_from;
  const std::string ranks = world > 1 ? strf(" x %d ranks", world) : "";
  const std::string accum = cfg.data.total_batch_tokens > 0
                                ? strf(", %lld tokens/step", (long long)cfg.data.total_batch_tokens)
                                : "";
  return strf(
      "config: %s | %d steps, lr %g %s | model %s | batch %d x %d%s%s | out_dir %s | full "
      "config: %s",
      mode_name(precision_spec(cfg).mode), cfg.train.steps, cfg.optim.lr, enum_name(cfg.optim.schedule),
      model.c_str(), cfg.data.batch_size, cfg.data.seq_len, ranks.c_str(), accum.c_str(),
      cfg.train.out_dir.c_str(), join_path(cfg.train.out_dir, "config.json").c_str());
}

void EtaClock::add(double seconds) {
  if (!first_seen_) {
    first_seen_ = true;
    return;
  }
  timed_++;
  recent_.push_back({timed_, seconds});
  if (recent_.size() > kWindow) recent_.pop_front();
}

double EtaClock::seconds_left(int64_t steps_left) const {
  std::vector<double> times;
  for (const auto& r : recent_) times.push_back(r.second);
  if (times.empty()) return 0;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  const double median = times[times.size() / 2];
  double sum = 0;
  size_t n = 0;
  for (const auto& [index, t] : recent_) {
    if (index <= kWarmupSteps && t > 10 * median) continue;  // still warming up
    sum += t;
    n++;
  }
  return n ? sum / double(n) * double(steps_left) : 0;
}

}  // namespace tg
