#include "bench_step.h"

#include <algorithm>

#include "src/base/rng.h"
#include "src/precision/precision.h"
#include "src/training/trainer.h"

namespace tg {

Config bench_config(const BenchArgs& a, Mode mode) {
  Config cfg = a.cfg;
  set_precision_mode(cfg, mode);
  config_set(cfg, "precision.fp8.recipe", enum_name(a.fp8cfg.recipe));
  config_set(cfg, "precision.fp8.fast_accum", a.fp8opt.fast_accum ? "true" : "false");
  config_set(cfg, "precision.recipe.bf16_last", "0");
  config_set(cfg, "precision.telemetry_every", "0");
  return cfg;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// auto's linears start in bf16 and are measured at step 1, as in training. The attention path
// is settled at this case's shape before the model sizes its activations, as a run's is.
BenchStep::BenchStep(Backend& be, const BenchCase& bc, const Config& cfg)
    : cfg_(cfg), gcfg_(gpt_config(bc.L, bc.NH, bc.C, bc.V, bc.maxT)), bc_(bc) {
  const PrecisionSpec spec = precision_spec(cfg);
  require_runnable(
      be.settle_attention(AttentionShape{bc.B, bc.T, bc.NH, bc.C / bc.NH, spec.compute}));
  model_ = std::make_unique<GPT>(gcfg_, be, spec.compute, DataParallel{}, spec.moments);
  precision_ = std::make_unique<PrecisionRuntime>(cfg_, be, *model_);
  model_->init_random(1);
  Rng r(2);
  in_.resize(size_t(bc.B) * bc.T);
  tg_.resize(in_.size());
  for (size_t i = 0; i < in_.size(); i++) {
    in_[i] = int32_t(r.below(bc.V));
    tg_[i] = int32_t(r.below(bc.V));
  }
}

void BenchStep::run() {
  step_++;
  precision_->begin_step(step_);
  model_->zero_grad();
  precision_->before_forward(0);
  model_->forward(in_.data(), tg_.data(), bc_.B, bc_.T, 1.0f);
  model_->backward();
  precision_->after_backward();
  double norm;
  apply_update(*model_, scaler_, cfg_, 1e-4, 1.0, opt_step_, &norm);
}

}  // namespace tg
