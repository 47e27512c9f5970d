// precision.h: the precision mode, parsed once from the precision.* keys.
//
// A mode names a preset (docs/precision.md): the compute type of weights and
// activations, whether the block linears run quantized, and the loss scaling that `auto`
// resolves to. Code reads this description, never the mode string.
#pragma once
#include <string>
#include <utility>

#include "src/backends/backend.h"
#include "src/config/config.h"
#include "src/model/linear_quantizers.h"

namespace tg {

// Everything the precision.* keys say, read once: the rest of the program reads this
// description, never cfg.precision (tests/test_layout.cpp holds every file outside
// src/precision/ and src/config/ to that).
struct PrecisionSpec {
  Mode mode = Mode::FP32;  // its row in src/numerics/precision_mode.h
  DType compute = DType::F32;
  bool quantized_linears = false;            // the four block linears in FP8 (Fp8Config below)
  Config::Precision::LossScale loss_scale;   // precision.loss_scale.*, its kind resolved (not auto)
  QuantRecipe recipe;                        // of the quantized linears
  MomentFormats moments;                     // Adam's m and v (precision.state.*)
  MasterFormat master = MasterFormat::FP32;  // precision.state.master
  // How the optimizer state is stored and moved between ranks (precision.state.*, its preset
  // applied by the config).
  Config::Precision::State state;
  bool stochastic_rounding = false;  // of the master -> 16-bit weight copy
  // The numerics probes: telemetry every N steps (0: off), the step whose gradients are
  // poisoned (tests and demos; 0: none), the ln2 gains scaled ("": none).
  int telemetry_every = 0;
  int inject_nonfinite_step = 0;
  std::string inject_outlier;
};

PrecisionSpec precision_spec(const Config& cfg);
// Sets precision.mode through the config's own parser, as a command line would: `bench`,
// `memory` and `compare` plan several modes under one config.
void set_precision_mode(Config& cfg, Mode mode);
// The precision.recipe.* options of the block-scaled presets (with precision.fp8.keep_bf16).
RecipeOptions recipe_options(const Config& cfg);

// The master weights' format a run in `mode` keeps: precision.state.master for modes with bf16
// weights, fp32 for the others (whose runs config_validate refuses a bf16 master; `memory`
// and `compare` plan several modes under one config).
MasterFormat mode_master(const Config& cfg, Mode mode);
// How fp8 moments are blocked and scaled (precision.state.moment_*).
MomentBlocking moment_blocking(const Config& cfg);

// precision.loss_scale.kind with `auto` resolved (the mode's default: dynamic for fp16, none
// otherwise).
LossScaling loss_scale_kind(const Config& cfg);
// How the update numbered opt_step (1-based; 0 = the initial copy) rounds master weights
// into the compute copy: nearest, or stochastic from a stream derived from the seed.
Rounding weight_rounding(const Config& cfg, int opt_step);
// The seeds of the Adam moments' stochastic rounding (precision.state.* = bf16-sr) in the
// update numbered opt_step, {m's, v's}: a stream per moment and update derived from the run's
// seed as weight_rounding's is, so that a resumed run draws the same bits.
std::pair<uint64_t, uint64_t> moment_seeds(const Config& cfg, int opt_step);
// The seed of the random bits (stochastic rounding, Hadamard signs) of the block-scaled
// linears in micro-batch `micro` of step `step` (0-based): a function of the run's seed and
// the position only, so a resumed run draws the same bits (nothing to checkpoint).
uint64_t quant_seed(const Config& cfg, int64_t step, int micro);

}  // namespace tg
