#include "precision.h"

#include "common.h"
#include "formats.h"
#include "rng.h"

namespace tg {

DType mode_dtype(const std::string& mode) {
  if (mode == "fp32") return DType::F32;
  if (mode == "bf16") return DType::BF16;
  if (mode == "fp16") return DType::F16;
  if (mode == "fp8") return DType::BF16;               // FP8 only in the block linears
  if (is_block_scaled_mode(mode)) return DType::BF16;  // likewise the block-scaled linears
  if (mode == "auto") return DType::BF16;  // the block linears' formats chosen while training
  throw UsageError(strf("config key 'precision.mode': unknown mode '%s'", mode.c_str()));
}

std::string loss_scale_kind(const Config& cfg) {
  const std::string& k = cfg.precision.loss_scale.kind;
  if (k != "auto") return k;
  return cfg.precision.mode == "fp16" ? "dynamic" : "none";
}

Rounding weight_rounding(const Config& cfg, int opt_step) {
  Rounding r;
  r.stochastic = cfg.precision.stochastic_rounding && opt_step > 0;
  // A fresh stream of random bits for every update, the same on every backend.
  uint64_t x = uint64_t(cfg.train.seed) ^ 0x5352ull /*"SR"*/;
  r.seed = splitmix64(x) + uint64_t(opt_step) * 0x9E3779B97F4A7C15ull;
  return r;
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

PrecisionSpec precision_spec(const Config& cfg) {
  const auto& p = cfg.precision;
  PrecisionSpec s;
  s.mode = p.mode;
  s.compute = mode_dtype(p.mode);
  s.quantized_linears = p.mode == "fp8" || is_block_scaled_mode(p.mode) || p.mode == "auto";
  s.loss_scale = loss_scale_kind(cfg);
  if (is_block_scaled_mode(p.mode)) {
    s.recipe = block_scaled_recipe(p.mode, recipe_options(cfg));
  } else if (p.mode == "auto") {
    // Every linear starts as bf16; the Trainer sets each one's recipe from AutoPrecision.
    s.recipe = candidate_recipe("bf16", recipe_options(cfg), "precision.mode");
    s.recipe.name = "auto";
    s.recipe.keep_bf16 = p.fp8.keep_bf16;
  } else {
    s.recipe =
        fp8_recipe(Fp8Config{p.fp8.recipe, p.fp8.history_len, p.fp8.margin, p.fp8.keep_bf16});
  }
  return s;
}

}  // namespace tg
