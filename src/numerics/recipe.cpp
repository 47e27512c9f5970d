#include "recipe.h"

#include <algorithm>

#include "formats.h"
#include "src/base/common.h"

namespace tg {

QuantRecipe fp8_tensor_recipe(ScaleSource source, int history_len, int margin,
                              const std::vector<int>& keep_bf16) {
  QuantRecipe r;
  r.name = source == ScaleSource::Delayed ? "fp8-delayed" : "fp8-current";
  OperandRecipe fwd;
  fwd.elem = ElemFormat::E4M3;
  fwd.source = source;
  OperandRecipe grad = fwd;
  grad.elem = ElemFormat::E5M2;
  r.gemm[kForward] = {fwd, fwd};
  r.gemm[kInputGrad] = {grad, fwd};
  r.gemm[kWeightGrad] = {grad, fwd};
  r.history_len = history_len;
  r.margin = margin;
  r.keep_bf16 = keep_bf16;
  return r;
}

namespace {
OperandRecipe operand(ElemFormat e, Granularity g, int block, ScaleFormat s) {
  OperandRecipe o;
  o.elem = e;
  o.granularity = g;
  o.block = block;
  o.scale = s;
  o.source = ScaleSource::Current;
  return o;
}
// The same recipe for every operand of every role.
void all_operands(QuantRecipe* r, const OperandRecipe& o) {
  for (auto& g : r->gemm) g.a = g.b = o;
}
void hadamard_wgrad(QuantRecipe* r, int size) {
  for (OperandRecipe* o : {&r->gemm[kWeightGrad].a, &r->gemm[kWeightGrad].b}) {
    o->transform = Transform::Hadamard;
    o->transform_size = size;
  }
}
}  // namespace

namespace {
[[noreturn]] void not_block_scaled(const std::string& name) {
  throw UsageError(
      strf("config key 'precision.mode': '%s' is not a block-scaled mode", name.c_str()));
}
}  // namespace

QuantRecipe block_scaled_recipe(const std::string& mode, const RecipeOptions& opt) {
  const ModeInfo* m = find_mode(mode);
  if (!m) not_block_scaled(mode);
  return block_scaled_recipe(m->mode, opt);
}

QuantRecipe block_scaled_recipe(Mode mode, const RecipeOptions& opt) {
  using E = ElemFormat;
  using G = Granularity;
  using S = ScaleFormat;
  QuantRecipe r;
  r.name = mode_name(mode);
  int bf16_last = 0;
  if (mode == Mode::FP8Rowwise) {
    all_operands(&r, operand(E::E4M3, G::Row, 0, opt.pow2_scales ? S::Pow2 : S::FP32));
  } else if (mode == Mode::FP8Block) {
    all_operands(&r, operand(E::E4M3, G::Block, 128, S::FP32));
    r.gemm[kForward].b = r.gemm[kInputGrad].b = operand(E::E4M3, G::Tile, 128, S::FP32);
  } else if (mode == Mode::MXFP8 || mode == Mode::MXFP4) {
    const bool fp8 = mode == Mode::MXFP8;
    OperandRecipe o = operand(fp8 ? E::E4M3 : E::E2M1, G::Block, 32, S::E8M0);
    const ScaleRuleChoice rule = opt.scale_rule;
    const bool ceil = rule == ScaleRuleChoice::Ceil || (rule == ScaleRuleChoice::Auto && fp8);
    o.scale_rule = ceil ? ScaleRule::Ceil : ScaleRule::Ocp;
    all_operands(&r, o);
    OperandRecipe g = o;
    if (fp8 && opt.grad_format == GradFormat::E5M2) g.elem = E::E5M2;  // auto, e4m3: o's E4M3
    if (!fp8 && opt.stochastic_grads) g.rounding = RoundMode::Stochastic;
    r.gemm[kInputGrad].a = r.gemm[kWeightGrad].a = g;
    if (!fp8 && opt.hadamard) hadamard_wgrad(&r, opt.hadamard_size);
  } else if (mode == Mode::NVFP4) {
    const OperandRecipe o = operand(E::E2M1, G::Block, 16, S::E4M3);
    all_operands(&r, o);
    if (opt.weight_2d)
      r.gemm[kForward].b = r.gemm[kInputGrad].b = operand(E::E2M1, G::Tile, 16, S::E4M3);
    if (opt.stochastic_grads)
      r.gemm[kInputGrad].a.rounding = r.gemm[kWeightGrad].a.rounding = RoundMode::Stochastic;
    if (opt.hadamard) hadamard_wgrad(&r, opt.hadamard_size);
    bf16_last = 1;
  } else {
    not_block_scaled(r.name);
  }
  if (opt.bf16_last >= 0) bf16_last = opt.bf16_last;
  r.keep_bf16 = opt.keep_bf16;
  for (int i = 1; i <= bf16_last; i++)
    if (std::find(r.keep_bf16.begin(), r.keep_bf16.end(), -i) == r.keep_bf16.end())
      r.keep_bf16.push_back(-i);
  return r;
}

bool is_per_tensor(const QuantRecipe& r) {
  for (const auto& g : r.gemm)
    for (const OperandRecipe* o : {&g.a, &g.b})
      if (o->granularity != Granularity::Tensor || o->scale != ScaleFormat::FP32 ||
          !is_low_bit(o->elem))
        return false;
  return true;
}

namespace {
[[noreturn]] void not_a_candidate(const std::string& name, const char* key) {
  std::string names;  // registry order: wide to narrow
  for (const ModeInfo& m : precision_modes())
    if (m.auto_candidate) names += (names.empty() ? "" : ", ") + std::string(m.name);
  throw UsageError(strf("config key '%s': '%s' is not a candidate format (%s)", key, name.c_str(),
                        names.c_str()));
}
}  // namespace

QuantRecipe candidate_recipe(const std::string& name, const RecipeOptions& o, const char* key) {
  const ModeInfo* m = find_mode(name);
  if (!m) not_a_candidate(name, key);
  return candidate_recipe(m->mode, o, key);
}

QuantRecipe candidate_recipe(Mode mode, const RecipeOptions& o, const char* key) {
  const ModeInfo& m = mode_info(mode);
  if (!m.auto_candidate) not_a_candidate(m.name, key);
  QuantRecipe r;
  switch (m.recipe) {
    case ModeRecipe::None: break;  // every operand BF16: the GEMMs see their inputs as they are
    case ModeRecipe::Fp8Tensor: r = fp8_tensor_recipe(ScaleSource::Current, 16, 0, {}); break;
    case ModeRecipe::BlockScaled: {
      RecipeOptions every_layer = o;
      every_layer.bf16_last = 0;
      every_layer.keep_bf16.clear();
      return block_scaled_recipe(mode, every_layer);
    }
    case ModeRecipe::Auto: not_a_candidate(m.name, key);
  }
  r.name = m.name;
  return r;
}

bool is_low_bit(const OperandRecipe& o) { return is_low_bit(o.elem); }

bool scales_from_tensor_amax(const OperandRecipe& o) {
  return is_low_bit(o.elem) && (o.granularity == Granularity::Tensor || o.scale == ScaleFormat::E4M3);
}

bool has_tensor_scale_over_groups(const QuantRecipe& r) {
  for (const GemmRecipe& g : r.gemm)
    for (const OperandRecipe* o : {&g.a, &g.b})
      if (is_low_bit(o->elem) && o->scale == ScaleFormat::E4M3) return true;
  return false;
}

bool dequantizes_to_bf16(const OperandRecipe& o) {
  if (!is_operand_format(o.elem)) return false;
  const int elem_bits = elem_format_info(o.elem).mantissa_bits + 1;  // significant bits
  const int ue4m3_bits = elem_format_info(ElemFormat::UE4M3).mantissa_bits + 1;
  switch (o.scale) {
    case ScaleFormat::E8M0:
    case ScaleFormat::Pow2: return elem_bits <= 8;
    case ScaleFormat::E4M3: return elem_bits + ue4m3_bits <= 8;
    case ScaleFormat::FP32: return false;
  }
  return false;
}

namespace {
// e.g. "E2M1 1x16 E4M3+fp32 SR H16"
std::string describe(const OperandRecipe& o) {
  std::string s = elem_format_name(o.elem);
  switch (o.granularity) {
    case Granularity::Tensor: s += " tensor"; break;
    case Granularity::Row: s += " row"; break;
    case Granularity::Block: s += strf(" 1x%d", o.block); break;
    case Granularity::Tile: s += strf(" %dx%d", o.block, o.block); break;
  }
  switch (o.scale) {
    case ScaleFormat::FP32: s += " fp32"; break;
    case ScaleFormat::Pow2: s += " pow2"; break;
    case ScaleFormat::E8M0:
      s += o.scale_rule == ScaleRule::Ceil ? " E8M0(ceil)" : " E8M0(ocp)";
      break;
    case ScaleFormat::E4M3: s += " UE4M3+fp32"; break;
  }
  if (o.rounding == RoundMode::Stochastic) s += " SR";
  if (o.transform == Transform::Hadamard) s += strf(" H%d", o.transform_size);
  return s;
}
}  // namespace

std::string describe(const QuantRecipe& r) {
  static const char* roles[kGemmRoles] = {"fwd", "dgrad", "wgrad"};
  std::string s;
  if (!is_per_tensor(r)) {
    s = r.name + ":";
    for (int g = 0; g < kGemmRoles; g++)
      s += strf("%s %s [%s] x [%s]", g ? "," : "", roles[g], describe(r.gemm[g].a).c_str(),
                describe(r.gemm[g].b).c_str());
    return s + ", current scales";
  }
  for (int g = 0; g < kGemmRoles; g++)
    s += strf("%s%s %s x %s", g ? ", " : "", roles[g], elem_format_name(r.gemm[g].a.elem),
              elem_format_name(r.gemm[g].b.elem));
  const OperandRecipe& a = r.gemm[kForward].a;
  s += strf(", per-tensor fp32 scales, %s", enum_name(a.source));
  if (a.source == ScaleSource::Delayed)
    s += strf(" (history %d, margin %d)", r.history_len, r.margin);
  else
    s += strf(" (margin %d)", r.margin);
  return s;
}

}  // namespace tg
