// group_scale.h: the scale of one scale group of a block-scaled operand (src/numerics/recipe.h),
// the one rule the CPU quantizer (src/backends/cpu/quantize.cpp), its block statistics
// (src/backends/cpu/quant_error.cpp) and the CUDA quantizer (kernels/quantize_blocks.cuh) all call,
// so that they cannot drift apart. __host__ __device__ like formats.h, whose conversions it uses.
//
// A group of amax `amax` gets two multipliers: enc before rounding into the element format,
// dec after (x' = round(x enc) dec):
//   FP32  enc = max_elem / amax (fp8_scale_from_amax), dec = 1 / enc
//   Pow2  enc as FP32 rounded down to a power of two, dec = 1 / enc (exact)
//   E8M0  dec = 2^(floor(log2 amax) - emax_elem) (OCP MX v1.0, code clipped at 0) or
//         2^ceil(log2(amax / max_elem)) (ceil; the quotient in fp32); enc = 1 / dec (exact);
//         an all-zero group gets code 127 (scale 1)
//   E4M3  (NVFP4) dec = ue4m3(amax / max_elem * S) with S the fp32 tensor scale, enc = S / dec
//         (0 when dec rounds to zero: the group becomes zeros), clamped to the largest float
// Every step is one IEEE fp32 operation (division, ldexpf, bit masks), none contractible into
// an FMA, so host and device results are bit-identical.
#pragma once
#include <cmath>

#include "formats.h"
#include "recipe.h"

namespace tg {

struct GroupScale {
  float enc = 1, dec = 1;
};

// The largest finite fp32 value (the clamp of tiny groups' multipliers, below).
constexpr float kMaxFloat = 3.40282347e38f;

// The E8M0 code of a group's scale (the exponent + 127 of dec), as group_scale picks it.
TG_HD inline int e8m0_group_code(ElemFormat elem, ScaleRule rule, float amax) {
  if (!(amax > 0)) return 127;
  if (rule == ScaleRule::Ceil) return f32_to_e8m0(amax / elem_format_max(elem), true, true);
  const int code = int(f32_to_e8m0(amax, false, true)) - elem_emax(elem);
  return code < 0 ? 0 : code;
}

// NVFP4's second level, S: the fp32 tensor scale that maps the largest group scale an operand
// of amax `tensor_amax` can draw to UE4M3's max (fp8_scale_from_amax with max_elem x 448).
TG_HD inline float nvfp4_tensor_scale(ElemFormat elem, float tensor_amax) {
  return fp8_scale_from_amax(tensor_amax, elem_format_max(ElemFormat::UE4M3) * elem_format_max(elem),
                             0);
}

// The group's multipliers (header comment). tensor_scale: NVFP4's S (E4M3 scales), else 1.
TG_HD inline GroupScale group_scale(ElemFormat elem, ScaleFormat scale, ScaleRule rule, float amax,
                                    float tensor_scale) {
  const float fmax = elem_format_max(elem);
  GroupScale g;
  switch (scale) {
    case ScaleFormat::FP32:
      g.enc = fp8_scale_from_amax(amax, fmax, 0);
      g.dec = 1.0f / g.enc;
      break;
    case ScaleFormat::Pow2:
      // fp8_scale_from_amax is >= 2^-126 for any finite amax: a normal number's exponent.
      g.enc = bits_f32(f32_bits(fp8_scale_from_amax(amax, fmax, 0)) & 0xff800000u);
      g.dec = 1.0f / g.enc;  // exact: a power of two
      break;
    case ScaleFormat::E8M0: {
      const int code = e8m0_group_code(elem, rule, amax);
      g.dec = e8m0_to_f32(uint8_t(code));
      g.enc = ldexpf(1.0f, 127 - code);
      break;
    }
    case ScaleFormat::E4M3:
      g.dec = ue4m3_to_f32(f32_to_ue4m3(amax / fmax * tensor_scale));
      g.enc = g.dec > 0 ? tensor_scale / g.dec : 0.0f;
      // A tiny tensor (S clamped to the largest float) may overflow this: clamp likewise.
      if (!(g.enc <= kMaxFloat)) g.enc = kMaxFloat;
      break;
  }
  return g;
}

TG_HD inline GroupScale group_scale(const OperandRecipe& o, float amax, float tensor_scale) {
  return group_scale(o.elem, o.scale, o.scale_rule, amax, tensor_scale);
}

}  // namespace tg
