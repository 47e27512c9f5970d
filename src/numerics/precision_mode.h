// precision_mode.h: the registry of precision modes, one row per value of precision.mode.
//
// A mode is carried through the code as the typed value `Mode`, parsed once from its name
// (the config key, a checkpoint's state.json); everything a mode means is a column of its
// row here: the type weights and activations are stored and computed in, whether the block
// linears run quantized and after which recipe family, what precision.loss_scale.kind=auto
// resolves to, whether precision.auto may choose it per operand, and which GPU peak
// (src/training/gpu_peak.h) its MFU is measured against. The names are spelled in
// precision_mode.cpp only; they are also what config.json, state.json, compare.json and reports
// hold, so a name, once written, must keep parsing.
#pragma once
#include <string>
#include <vector>

#include "loss_scaler.h"
#include "src/base/common.h"

namespace tg {

enum class Mode { FP32, BF16, FP16, FP8, FP8Rowwise, FP8Block, MXFP8, MXFP4, NVFP4, Auto };

// Where the quantized linears' recipe (src/numerics/recipe.h) comes from.
enum class ModeRecipe {
  None,         // no linear quantized
  Fp8Tensor,    // per-tensor FP8 scales, delayed or current (precision.fp8.*)
  BlockScaled,  // a block-scaled preset (precision.recipe.*)
  Auto,         // chosen per operand while training (precision.auto.*)
};

// The tensor-core peak a mode's MFU is measured against (src/training/gpu_peak.cpp).
enum class PeakClass { Fp32, Tensor16 };

struct ModeInfo {
  Mode mode;
  const char* name;        // precision.mode's value
  DType storage;           // weights' compute copy and activations
  bool quantized;          // the block linears run below 16 bits (or may: auto)
  LossScaling loss_scale;  // what precision.loss_scale.kind=auto means for this mode
  ModeRecipe recipe;
  bool auto_candidate;  // may be one of precision.auto.candidates
  PeakClass peak;
};

// Every row, in the order `--help` lists the modes.
const std::vector<ModeInfo>& precision_modes();
const ModeInfo& mode_info(Mode m);
const char* mode_name(Mode m);
// The row named `name`, or nullptr.
const ModeInfo* find_mode(const std::string& name);
// The mode named `name`; UsageError "config key '<key>': unknown mode '<name>'" otherwise.
Mode parse_mode(const std::string& name, const char* key);
// Every mode's name, registry order.
std::vector<std::string> mode_names();
// The names precision.auto.candidates accepts, narrowest first.
std::vector<std::string> auto_candidate_names();
// Comma-separated lists of modes, as the subcommands' --modes options take them: parsed
// (empty entries skipped; an unknown name is parse_mode's UsageError naming `key`), and
// written.
std::vector<Mode> parse_mode_list(const std::string& text, const char* key);
std::string mode_list_text(const std::vector<Mode>& modes);

inline bool is_block_scaled(Mode m) { return mode_info(m).recipe == ModeRecipe::BlockScaled; }
inline DType mode_dtype(Mode m) { return mode_info(m).storage; }

}  // namespace tg
