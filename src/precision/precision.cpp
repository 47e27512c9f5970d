#include "precision.h"

#include "src/base/common.h"
#include "src/base/rng.h"
#include "src/numerics/formats.h"

namespace tg {

LossScaling loss_scale_kind(const Config& cfg) {
  const LossScaling k = cfg.precision.loss_scale.kind;
  if (k != LossScaling::Auto) return k;
  return mode_info(cfg.precision.mode).loss_scale;
}

Rounding weight_rounding(const Config& cfg, int opt_step) {
  Rounding r;
  // bf16-sr master weights are stored back stochastically by every update.
  r.stochastic = (cfg.precision.stochastic_rounding ||
                  cfg.precision.state.master == MasterFormat::BF16SR) &&
                 opt_step > 0;
  // A fresh stream of random bits for every update, the same on every backend.
  uint64_t x = uint64_t(cfg.train.seed) ^ 0x5352ull /*"SR"*/;
  r.seed = splitmix64(x) + uint64_t(opt_step) * 0x9E3779B97F4A7C15ull;
  return r;
}

std::pair<uint64_t, uint64_t> moment_seeds(const Config& cfg, int opt_step) {
  uint64_t x = uint64_t(cfg.train.seed) ^ 0x414D5352ull /*"AMSR"*/;
  const uint64_t s = splitmix64(x) + uint64_t(opt_step) * 0x9E3779B97F4A7C15ull;
  return {detail::splitmix64_mix(s ^ 0x6Dull /*'m'*/), detail::splitmix64_mix(s ^ 0x76ull /*'v'*/)};
}

uint64_t quant_seed(const Config& cfg, int64_t step, int micro) {
  uint64_t x = uint64_t(cfg.train.seed) ^ 0x5152ull /*"QR"*/;
  const uint64_t s = splitmix64(x);
  return detail::splitmix64_mix(s + uint64_t(step) * 0x9E3779B97F4A7C15ull +
                                uint64_t(micro) * 0xD1B54A32D192ED03ull);
}

RecipeOptions recipe_options(const Config& cfg) {
  const auto& p = cfg.precision;
  const auto& r = p.recipe;
  return RecipeOptions{r.pow2_scales,   r.scale_rule, r.grad_format, r.stochastic_grads, r.hadamard,
                       r.hadamard_size, r.weight_2d,  r.bf16_last,   p.fp8.keep_bf16};
}

MasterFormat mode_master(const Config& cfg, Mode mode) {
  return mode_dtype(mode) == DType::BF16 ? cfg.precision.state.master : MasterFormat::FP32;
}

MomentBlocking moment_blocking(const Config& cfg) {
  const auto& st = cfg.precision.state;
  MomentBlocking b;
  b.block = st.moment_block;
  b.scale = st.moment_scale;
  b.expand = st.moment_expand;
  return b;
}

PrecisionSpec precision_spec(const Config& cfg) {
  const auto& p = cfg.precision;
  const ModeInfo& m = mode_info(p.mode);
  PrecisionSpec s;
  s.mode = p.mode;
  s.compute = m.storage;
  s.quantized_linears = m.quantized;
  s.loss_scale = p.loss_scale;
  s.loss_scale.kind = loss_scale_kind(cfg);
  s.moments = moment_formats(p.state.adam_m, p.state.adam_v, moment_blocking(cfg));
  s.master = p.state.master;
  s.state = p.state;
  s.stochastic_rounding = p.stochastic_rounding;
  s.telemetry_every = p.telemetry_every;
  s.inject_nonfinite_step = p.inject_nonfinite_step;
  s.inject_outlier = p.inject_outlier;
  switch (m.recipe) {
    case ModeRecipe::BlockScaled:
      s.recipe = block_scaled_recipe(p.mode, recipe_options(cfg));
      break;
    case ModeRecipe::Auto:
      // Every linear starts as bf16; the Trainer sets each one's recipe from AutoPrecision.
      s.recipe = candidate_recipe(Mode::BF16, recipe_options(cfg), "precision.mode");
      s.recipe.name = m.name;
      s.recipe.keep_bf16 = p.fp8.keep_bf16;
      break;
    case ModeRecipe::None:
    case ModeRecipe::Fp8Tensor:
      s.recipe =
          fp8_recipe(Fp8Config{p.fp8.recipe, p.fp8.history_len, p.fp8.margin, p.fp8.keep_bf16});
      break;
  }
  return s;
}

void set_precision_mode(Config& cfg, Mode mode) { config_set(cfg, "precision.mode", mode_name(mode)); }

}  // namespace tg
