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
#include <cmath>
#include <string>

#include "src/base/host_device.h"
#include "src/base/named_enum.h"

namespace tg {

// precision.loss_scale.kind; a scaler's kind is never Auto (resolved by the mode: its
// registry row, precision_mode.h). The names are what config.json and state.json hold.
enum class LossScaling { Auto, Dynamic, Static, None };
template <>
struct EnumNames<LossScaling> {
  static constexpr std::array names{"auto", "dynamic", "static", "none"};
};

// The state machine as plain data and one function, run by the host (LossScaler::update) and
// by the device (kernels/loss_scale.cuh), so that both produce identical state.
struct LossScaleState {
  double scale = 1.0;
  int good_steps = 0;
  int hysteresis_left = 1;
};
struct LossScaleParams {
  bool dynamic = false;
  int growth_interval = 2000;
  double growth = 2.0, backoff = 0.5, min_scale = 1.0, max_scale = 16777216.0;
  int hysteresis = 1;
};
// Records one optimizer step; returns true when the step must be skipped. (The comparisons are
// std::max / std::min spelled out: the same results, NaN included, on the device.)
TG_HD inline bool loss_scale_update(LossScaleState& s, const LossScaleParams& p,
                                    bool found_nonfinite) {
  if (!p.dynamic) return found_nonfinite;
  if (found_nonfinite) {
    s.good_steps = 0;
    if (--s.hysteresis_left <= 0) {
      const double x = s.scale * p.backoff;
      s.scale = x < p.min_scale ? p.min_scale : x;  // std::max(x, min_scale)
      s.hysteresis_left = p.hysteresis;
    }
    return true;
  }
  if (++s.good_steps >= p.growth_interval) {
    const double x = s.scale * p.growth;
    s.scale = p.max_scale < x ? p.max_scale : x;  // std::min(x, max_scale)
    s.good_steps = 0;
    s.hysteresis_left = p.hysteresis;
  }
  return false;
}

// One step's decision from the fused gradient check (sum of squares of the unscaled gradients
// and the count of non-finite ones, as the devices reduce them), as src/training/train.cpp takes
// it: norm, skip (updating the state), and the factor AdamW multiplies the gradients by,
// clip_factor / scale with the scale the step ran at.
struct LossScaleStep {
  double norm = 0;
  int skip = 0;
  float grad_scale = 1.f;
};
TG_HD inline LossScaleStep loss_scale_step(LossScaleState& s, const LossScaleParams& p,
                                           float sum_squares, float nonfinite, double clip) {
  LossScaleStep r;
  const double scale = s.scale;
  const double norm = std::sqrt(double(sum_squares));
  const bool finite = nonfinite == 0.f && std::isfinite(norm);
  r.norm = finite ? norm : NAN;
  r.skip = loss_scale_update(s, p, !finite);
  const double clip_factor = (clip > 0 && r.norm > clip) ? clip / r.norm : 1.0;
  r.grad_scale = float(clip_factor / scale);
  return r;
}

// What the device keeps (kernels/loss_scale.cuh): the state, the last decision, the count of
// applied (not skipped) steps.
struct LossScaleDevice {
  LossScaleState state;
  LossScaleStep step;
  int applied = 0;
};

struct LossScaler {
  LossScaling kind = LossScaling::None;
  double scale = 1.0;
  int growth_interval = 2000;
  double growth = 2.0, backoff = 0.5, min_scale = 1.0, max_scale = 16777216.0;
  int hysteresis = 1;
  // state
  int good_steps = 0;
  int hysteresis_left = 1;

  static LossScaler make(LossScaling kind, double init, int growth_interval, double growth,
                         double backoff, double min_scale, double max_scale, int hysteresis) {
    LossScaler s;
    s.kind = kind;
    s.scale = kind == LossScaling::None ? 1.0 : init;
    s.growth_interval = growth_interval;
    s.growth = growth;
    s.backoff = backoff;
    s.min_scale = min_scale;
    s.max_scale = max_scale;
    s.hysteresis = hysteresis;
    s.hysteresis_left = hysteresis;
    return s;
  }

  LossScaleParams params() const {
    LossScaleParams p;
    p.dynamic = kind == LossScaling::Dynamic;
    p.growth_interval = growth_interval;
    p.growth = growth;
    p.backoff = backoff;
    p.min_scale = min_scale;
    p.max_scale = max_scale;
    p.hysteresis = hysteresis;
    return p;
  }
  LossScaleState state() const { return {scale, good_steps, hysteresis_left}; }
  void set_state(const LossScaleState& st) {
    scale = st.scale;
    good_steps = st.good_steps;
    hysteresis_left = st.hysteresis_left;
  }

  // Records one optimizer step; returns true when the step must be skipped.
  bool update(bool found_nonfinite) {
    LossScaleState st = state();
    const bool skip = loss_scale_update(st, params(), found_nonfinite);
    set_state(st);
    return skip;
  }
};

}  // namespace tg
