// presets.cpp: the rows of the preset registry (presets.h), state presets first, then the
// precision presets of `compare --modes`. Formats and modes are named through their
// registries (src/numerics/), never spelled here.
#include "presets.h"

#include "config.h"
#include "src/base/common.h"
#include "src/numerics/master_format.h"
#include "src/numerics/precision_mode.h"
#include "src/numerics/state_format.h"
#include "src/numerics/wire_format.h"

namespace tg {

namespace {

// What a preset stores, beyond fp32 state.
struct StateChoice {
  MasterFormat master = MasterFormat::FP32;
  StateFormat m = StateFormat::FP32, v = StateFormat::FP32;
  MomentBlocking blocking = {};
  WireFormat grad_comm = WireFormat::FP32;
  GradAccum grads = GradAccum::Compute;
  WeightComm weight_comm = WeightComm::Compute;
};

KeyValues keys_of(const StateChoice& s) {
  return {{"precision.state.master", master_format_name(s.master)},
          {"precision.state.grad_comm", wire_format_name(s.grad_comm)},
          {"precision.state.grads", enum_name(s.grads)},
          {"precision.state.weight_comm", enum_name(s.weight_comm)},
          {"precision.state.adam_m", state_format_name(s.m)},
          {"precision.state.adam_v", state_format_name(s.v)},
          {"precision.state.moment_block", std::to_string(s.blocking.block)},
          {"precision.state.moment_scale", enum_name(s.blocking.scale)},
          {"precision.state.moment_expand", enum_name(s.blocking.expand)}};
}

Preset preset(std::string name, const char* what, StateChoice s) {
  return {std::move(name), PresetFamily::State, what, keys_of(s)};
}

// fp32 state with gradients on the wire in f.
StateChoice wire(WireFormat f) {
  StateChoice s;
  s.grad_comm = f;
  return s;
}
// fp32 state with a step's gradients summed in fp32 (grads) or ZeRO-1's weights gathered in
// fp8 (weights).
StateChoice fp32_grads() {
  StateChoice s;
  s.grads = GradAccum::FP32;
  return s;
}
StateChoice fp8_weights() {
  StateChoice s;
  s.weight_comm = WeightComm::FP8E4M3;
  return s;
}

std::vector<Preset> state_rows() {
  using MF = MasterFormat;
  using SF = StateFormat;
  using WF = WireFormat;
  const MomentBlocking coat{128, MomentScale::FP32, MomentExpand::Coat};
  // clang-format off
  return {
      preset(state_format_name(SF::FP32), "fp32 master weights and Adam moments", {}),
      preset("moments-bf16", "Adam moments in bf16 (nearest)", {MF::FP32, SF::BF16, SF::BF16}),
      preset("moments-bf16sr", "Adam moments in bf16 with stochastic rounding",
             {MF::FP32, SF::BF16SR, SF::BF16SR}),
      preset("moments-fp16", "Adam moments in fp16 (m and sqrt(v) scaled by 2^12)",
             {MF::FP32, SF::FP16, SF::FP16}),
      preset("master-bf16sr", "the bf16 weights as master weights, stochastic rounding (no fp32 copy)",
             {MF::BF16SR}),
      preset("master-kahan", "the bf16 weights plus a bf16 compensation as master weights",
             {MF::BF16Kahan}),
      preset("bf16sr-all", "bf16-sr master weights and bf16-sr Adam moments",
             {MF::BF16SR, SF::BF16SR, SF::BF16SR}),
      preset("moments-fp8", "Adam moments in fp8 e4m3, a scale per 128 (m and sqrt(v))",
             {MF::FP32, SF::FP8E4M3, SF::FP8E4M3}),
      preset("moments-fp8-coat", "Adam moments in fp8 e4m3, a scale per 128, COAT's range expansion",
             {MF::FP32, SF::FP8E4M3, SF::FP8E4M3, coat}),
      preset("moments-fp8m-fp16v", "m in fp8 e4m3 (a scale per 128), v in fp16 (FP8-LM's split)",
             {MF::FP32, SF::FP8E4M3, SF::FP16}),
      preset("bf16sr-fp8", "bf16-sr master weights, fp8 e4m3 Adam moments with COAT's expansion",
             {MF::BF16SR, SF::FP8E4M3, SF::FP8E4M3, coat}),
      // Gradients on the wire (several ranks).
      preset("wire-bf16", "gradients sent between ranks in bf16, summed in fp32",
             wire(WF::BF16)),
      preset("wire-fp8", "gradients sent between ranks in fp8 e4m3 (a scale per 128), summed in fp32",
             wire(WF::FP8E4M3)),
      preset("wire-e5m2", "gradients sent between ranks in fp8 e5m2 (a scale per 128), summed in fp32",
             wire(WF::FP8E5M2)),
      preset("grads-fp32", "a step's micro-step gradients summed in an fp32 buffer, rounded once",
             fp32_grads()),
      // ZeRO-1's weight all-gather (train.zero_stage=1).
      preset("weights-fp8", "ZeRO-1's weight all-gather in fp8 e4m3 (a scale per 128)",
             fp8_weights()),
      preset("zero-fp8", "ZeRO-1 with gradients and weights in fp8 e4m3 on the wire, fp8 Adam moments",
             {MF::FP32, SF::FP8E4M3, SF::FP8E4M3, {}, WF::FP8E4M3, GradAccum::Compute,
              WeightComm::FP8E4M3}),
      preset("lean", "bf16-sr master weights, fp8 e4m3 Adam moments, bf16 gradients on the wire",
             {MF::BF16SR, SF::FP8E4M3, SF::FP8E4M3, {}, WF::BF16}),
  };
  // clang-format on
}

// ---- precision presets: what each name on `compare --modes` means ----

// The config keys a study sets beyond its mode, each as `--key=value` would set it.
using Overlay = KeyValues;

// A precision preset: precision.mode, precision.stochastic_rounding off (unless the overlay
// says otherwise), then the overlay.
struct ModeRow {
  std::string name;
  Mode mode;
  const char* what;
  Overlay overlay;
};
Preset precision_preset(const ModeRow& r) {
  KeyValues keys = {{"precision.mode", mode_name(r.mode)}, {"precision.stochastic_rounding", "false"}};
  keys.insert(keys.end(), r.overlay.begin(), r.overlay.end());
  return {r.name, PresetFamily::Precision, r.what, keys};
}

// NVFP4's ingredients (arXiv 2509.25149), switched off one at a time by the ablation studies
// below so that a study shows what each buys: the overlay that leaves on those in `on`.
enum Nvfp4Ingredients {
  kSr = 1,        // stochastic rounding of the output gradients
  kRht = 2,       // 16-point random Hadamard transform of the wgrad operands
  kTiles2d = 4,   // 16x16 weight tiles
  kBf16Last = 8,  // the last layer's linears in bf16
  kAllIngredients = kSr | kRht | kTiles2d | kBf16Last,
};
Overlay nvfp4_ingredients(int on) {
  auto flag = [&](int bit) -> std::string { return (on & bit) ? "true" : "false"; };
  return {{"precision.recipe.stochastic_grads", flag(kSr)},
          {"precision.recipe.hadamard", flag(kRht)},
          {"precision.recipe.weight_2d", flag(kTiles2d)},
          {"precision.recipe.bf16_last", (on & kBf16Last) ? "-1" : "0"}};
}
Overlay operator+(Overlay a, const Overlay& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The study named after a mode plus `suffix` ("" for the mode as it is).
std::string named(Mode m, const char* suffix) { return mode_name(m) + std::string(suffix); }
const char* const kNoScale = "-noscale";  // the default --modes names fp16's

// One study per entry: its name, mode and description first.
// clang-format off
// Each mode as it is (fp8 with its scaling spelled out), and the 16-bit modes' variants.
std::vector<ModeRow> plain_studies() {
  return {
      {named(Mode::FP32, ""), Mode::FP32, "fp32 everywhere", {}},
      {named(Mode::BF16, ""), Mode::BF16,
       "bf16 weights, activations and gradients; fp32 master weights", {}},
      {named(Mode::BF16, "-sr"), Mode::BF16, "bf16 with stochastic rounding of the weight copy",
       {{"precision.stochastic_rounding", "true"}}},
      {named(Mode::FP16, ""), Mode::FP16, "fp16 with dynamic loss scaling",
       {{"precision.loss_scale.kind", "dynamic"}}},
      {named(Mode::FP16, kNoScale), Mode::FP16, "fp16 without loss scaling",
       {{"precision.loss_scale.kind", "none"}}},
      {named(Mode::FP8, ""), Mode::FP8,
       "bf16 with the block linears in FP8 (E4M3 forward, E5M2 gradients), delayed scaling",
       {{"precision.fp8.recipe", "delayed"}}},
      {named(Mode::FP8, "-current"), Mode::FP8, "fp8 with current (just-in-time) scaling",
       {{"precision.fp8.recipe", "current"}}},
      // The block-scaled recipes (src/numerics/recipe.h; options: precision.recipe.*).
      {named(Mode::FP8Rowwise, ""), Mode::FP8Rowwise,
       "block linears in E4M3 with one fp32 scale per row", {}},
      {named(Mode::FP8Block, ""), Mode::FP8Block,
       "block linears in E4M3, fp32 scales per 1x128 block (activations, gradients) and 128x128 "
       "tile (weights)",
       {}},
      {named(Mode::MXFP8, ""), Mode::MXFP8,
       "block linears in MXFP8: E4M3 with an E8M0 scale per 32", {}},
      {named(Mode::MXFP4, ""), Mode::MXFP4,
       "block linears in MXFP4: E2M1 with an E8M0 scale per 32, SR gradients, Hadamard wgrad", {}},
      {named(Mode::NVFP4, ""), Mode::NVFP4,
       "block linears in NVFP4: E2M1, UE4M3 per 16 + fp32 tensor scale, 16x16 weights, SR "
       "gradients, Hadamard wgrad, the last precision.recipe.bf16_last layers (default 1) "
       "in bf16",
       {}},
  };
}

// The ablation study of NVFP4's ingredients: each takes exactly one away (bare: all).
std::vector<ModeRow> nvfp4_ablations() {
  return {
      {named(Mode::NVFP4, "-no-sr"), Mode::NVFP4,
       "nvfp4 without stochastic rounding of the gradients (round to nearest)",
       nvfp4_ingredients(kAllIngredients & ~kSr)},
      {named(Mode::NVFP4, "-no-rht"), Mode::NVFP4,
       "nvfp4 without the random Hadamard transform of wgrad",
       nvfp4_ingredients(kAllIngredients & ~kRht)},
      {named(Mode::NVFP4, "-no-2d"), Mode::NVFP4,
       "nvfp4 with 1x16 weight blocks instead of 16x16 tiles",
       nvfp4_ingredients(kAllIngredients & ~kTiles2d)},
      {named(Mode::NVFP4, "-no-bf16last"), Mode::NVFP4, "nvfp4 with the last layer quantized too",
       nvfp4_ingredients(kAllIngredients & ~kBf16Last)},
      {named(Mode::NVFP4, "-bare"), Mode::NVFP4,
       "nvfp4 without any of them: E2M1 with UE4M3 scales per 1x16 and the tensor scale, nearest "
       "rounding, every layer quantized",
       nvfp4_ingredients(0)},
  };
}

// precision.mode=auto and the outlier-handling study.
std::vector<ModeRow> adaptive_studies() {
  const Overlay smooth = {{"precision.recipe.smooth", "true"}};
  return {
      {named(Mode::Auto, ""), Mode::Auto,
       "per GEMM operand, the narrowest of precision.auto.candidates whose measured SQNR meets "
       "precision.auto.threshold_db (src/precision/auto_precision.h)",
       {}},
      // Outlier handling (docs/precision.md: Adaptive precision; docs/outlier-study), each beside the plain
      // recipe it changes: the same uniform NVFP4 in every layer as nvfp4-no-bf16last, with the
      // outlier channels of the forward GEMMs split out into bf16 (auto's machinery with NVFP4
      // as its only candidate), or every channel smoothed.
      {named(Mode::NVFP4, "-split"), Mode::Auto,
       "nvfp4 in every layer with the outlier input channels of the forward GEMMs in bf16 (auto, "
       "nvfp4 its only candidate, precision.auto.outliers=split)",
       {{"precision.auto.candidates", mode_name(Mode::NVFP4)},
        {"precision.auto.priors", "false"},
        {"precision.auto.outliers", "split"}}},
      {named(Mode::NVFP4, "-smooth"), Mode::NVFP4,
       "nvfp4 in every layer with SmoothQuant smoothing of the forward GEMMs "
       "(precision.recipe.smooth)",
       nvfp4_ingredients(kAllIngredients & ~kBf16Last) + smooth},
      {named(Mode::FP8Rowwise, "-smooth"), Mode::FP8Rowwise,
       "fp8-rowwise with SmoothQuant smoothing of the forward GEMMs (precision.recipe.smooth)",
       smooth},
      {named(Mode::Auto, "-nosplit"), Mode::Auto,
       "auto with outlier channels only counted (precision.auto.outliers=none)",
       {{"precision.auto.outliers", "none"}}},
      {named(Mode::Auto, "-smooth"), Mode::Auto,
       "auto with every channel smoothed instead of outliers split (precision.auto.outliers=smooth)",
       {{"precision.auto.outliers", "smooth"}}},
  };
}
// clang-format on

std::vector<Preset> precision_rows() {
  std::vector<Preset> all;
  for (const auto& part : {plain_studies(), nvfp4_ablations(), adaptive_studies()})
    for (const ModeRow& r : part) all.push_back(precision_preset(r));
  return all;
}

}  // namespace

const std::vector<Preset>& presets(PresetFamily family) {
  static const std::vector<Preset> state = state_rows(), precision = precision_rows();
  return family == PresetFamily::State ? state : precision;
}

const Preset* find_preset(PresetFamily family, const std::string& name) {
  for (const Preset& p : presets(family))
    if (name == p.name) return &p;
  return nullptr;
}

std::string preset_names_text(PresetFamily family) {
  std::string all;
  for (const Preset& p : presets(family)) all += (all.empty() ? "" : ", ") + p.name;
  return all;
}

std::vector<const Preset*> default_mode_study() {
  std::vector<const Preset*> out;
  for (const std::string& name : {named(Mode::FP32, ""), named(Mode::BF16, ""), named(Mode::FP16, ""),
                                  named(Mode::FP16, kNoScale), named(Mode::FP8, "")})
    out.push_back(find_preset(PresetFamily::Precision, name));
  return out;
}

void apply_preset(Config& cfg, const Preset& preset) {
  if (preset.family == PresetFamily::State) {
    config_set(cfg, "precision.state.preset", preset.name);  // which sets its keys
    return;
  }
  for (const auto& [key, value] : preset.keys) config_set(cfg, key, value);
}

const char* no_state_preset() { return "none"; }

}  // namespace tg
