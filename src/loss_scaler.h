// loss_scaler.h: the loss-scale state machine (dynamic, static or none).
//
// The loss gradient is multiplied by scale() before backward; after backward the caller
// reports whether any gradient was non-finite. A non-finite step is always skipped. With
// `dynamic`, each non-finite step uses up one unit of hysteresis, and when none is left
// the scale is multiplied by `backoff` (not below `min`) and the hysteresis refills;
// after `growth_interval` consecutive finite steps the scale is multiplied by `growth` (not
// above `max`) and the hysteresis refills. `static` keeps its initial scale; `none` is 1.
#pragma once
#include <algorithm>
#include <string>

namespace tg {

struct LossScaler {
  std::string kind = "none";  // dynamic | static | none
  double scale = 1.0;
  int growth_interval = 2000;
  double growth = 2.0, backoff = 0.5, min_scale = 1.0, max_scale = 16777216.0;
  int hysteresis = 1;
  // state
  int good_steps = 0;
  int hysteresis_left = 1;

  static LossScaler make(const std::string& kind, double init, int growth_interval, double growth,
                         double backoff, double min_scale, double max_scale, int hysteresis) {
    LossScaler s;
    s.kind = kind;
    s.scale = kind == "none" ? 1.0 : init;
    s.growth_interval = growth_interval;
    s.growth = growth;
    s.backoff = backoff;
    s.min_scale = min_scale;
    s.max_scale = max_scale;
    s.hysteresis = hysteresis;
    s.hysteresis_left = hysteresis;
    return s;
  }

  // Records one optimizer step; returns true when the step must be skipped.
  bool update(bool found_nonfinite) {
    if (kind != "dynamic") return found_nonfinite;
    if (found_nonfinite) {
      good_steps = 0;
      if (--hysteresis_left <= 0) {
        scale = std::max(scale * backoff, min_scale);
        hysteresis_left = hysteresis;
      }
      return true;
    }
    if (++good_steps >= growth_interval) {
      scale = std::min(scale * growth, max_scale);
      good_steps = 0;
      hysteresis_left = hysteresis;
    }
    return false;
  }
};

}  // namespace tg
