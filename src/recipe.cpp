#include "recipe.h"

#include "common.h"
#include "formats.h"

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

float elem_format_max(ElemFormat f) {
  switch (f) {
    case ElemFormat::E4M3: return E4M3_MAX;
    case ElemFormat::E5M2: return E5M2_MAX;
    case ElemFormat::E2M1: return 6.0f;
    case ElemFormat::BF16: return 3.3895313892515355e38f;
  }
  return 0;
}

const char* elem_format_name(ElemFormat f) {
  switch (f) {
    case ElemFormat::BF16: return "bf16";
    case ElemFormat::E4M3: return "E4M3";
    case ElemFormat::E5M2: return "E5M2";
    case ElemFormat::E2M1: return "E2M1";
  }
  return "?";
}

const char* scale_source_name(ScaleSource s) {
  return s == ScaleSource::Delayed ? "delayed" : "current";
}

std::string describe(const QuantRecipe& r) {
  static const char* roles[kGemmRoles] = {"fwd", "dgrad", "wgrad"};
  std::string s;
  for (int g = 0; g < kGemmRoles; g++)
    s += strf("%s%s %s x %s", g ? ", " : "", roles[g], elem_format_name(r.gemm[g].a.elem),
              elem_format_name(r.gemm[g].b.elem));
  const OperandRecipe& a = r.gemm[kForward].a;
  s += strf(", per-tensor fp32 scales, %s", scale_source_name(a.source));
  if (a.source == ScaleSource::Delayed)
    s += strf(" (history %d, margin %d)", r.history_len, r.margin);
  else
    s += strf(" (margin %d)", r.margin);
  return s;
}

}  // namespace tg
