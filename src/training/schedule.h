// schedule.h: learning rate at an optimizer step (0-based): linear warmup over
// warmup_steps to lr, then cosine / linear decay to lr * final_lr_frac at the last step,
// or constant.
#pragma once
#include <cmath>

#include "src/config/config.h"  // LrSchedule

namespace tg {

inline double lr_at(int step, int total_steps, double lr, int warmup, LrSchedule kind,
                    double final_frac) {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  if (kind == LrSchedule::Constant) return lr;
  int decay_steps = total_steps - warmup - 1;
  double progress = decay_steps > 0 ? double(step - warmup) / double(decay_steps) : 1.0;
  if (progress > 1) progress = 1;
  double coeff =
      kind == LrSchedule::Linear ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return lr * (final_frac + (1.0 - final_frac) * coeff);
}

}  // namespace tg
