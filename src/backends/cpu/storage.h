// storage.h: element types of the CPU ops and how they widen and narrow.
//
// Tensors are stored in their real type (bf16 and fp16 as 16-bit codes), and every op
// widens on load to its accumulation type A (float; double for the fp64 checks), computes
// in A and rounds once on store, to nearest even, through src/numerics/formats.h: the same rounding
// points a GPU kernel that keeps fp32 in registers has.
//
// fp16 uses the F16C instructions when the compiler targets them: they round to nearest even
// like __float2half_rn; only NaNs differ (hardware keeps the payload), so NaNs are mapped to
// CUDA's canonical codes here. tests/precision/test_precision.cpp checks every code against
// formats.h.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "src/numerics/formats.h"

namespace tg::cpu {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

template <typename T>
struct acc {
  using type = float;
};
template <>
struct acc<double> {
  using type = double;
};
template <typename T>
using acc_t = typename acc<T>::type;

inline float ld(float x) { return x; }
inline double ld(double x) { return x; }
inline float ld(bf16 x) { return bf16_to_f32(x.bits); }
#if defined(__F16C__)
inline float ld(f16 x) {
  if ((x.bits & 0x7c00u) == 0x7c00u && (x.bits & 0x3ffu)) return bits_f32(0x7fffffffu);
  return _cvtsh_ss(x.bits);
}
#else
inline float ld(f16 x) { return f16_to_f32(x.bits); }
#endif

template <typename T>
inline T st(acc_t<T> v);
template <>
inline float st<float>(float v) {
  return v;
}
template <>
inline double st<double>(double v) {
  return v;
}
template <>
inline bf16 st<bf16>(float v) {
  return bf16{f32_to_bf16(v)};
}
template <>
inline f16 st<f16>(float v) {
#if defined(__F16C__)
  if (v != v) return f16{0x7fff};
  return f16{uint16_t(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))};
#else
  return f16{f32_to_f16(v)};
#endif
}

// FP8 round trip of a finite fp32 value, x -> E4M3/E5M2 (round to nearest even, saturating)
// -> fp32, without the bit-by-bit encoder: round the fp32 mantissa to the format's bits
// with the add-and-mask trick in the normal range, round to the subnormal step with rint()
// below it, clamp to the largest finite value. Equal to decode(encode(x, saturate)) for all
// finite x (tests/precision/test_precision.cpp checks it against formats.h).
// Both roundings are computed and one selected, without branches, so that loops over
// tensors vectorise (the quantize passes of the fp8 mode).
template <int kMantBits, int kMinNormalExp, int kSubnormalExp>
inline float fp8_round_trip(float x, float fmax) {
  const uint32_t sign = f32_bits(x) & 0x80000000u;
  const float a = std::fabs(x);
  const uint32_t b = f32_bits(a);
  constexpr int drop = 23 - kMantBits;
  const float normal =
      bits_f32((b + ((1u << (drop - 1)) - 1) + ((b >> drop) & 1u)) & ~((1u << drop) - 1));
  // x / step and back: exact, the step being a power of two.
  constexpr float step = float(1ull << (kSubnormalExp + 64)) / 18446744073709551616.0f;
  const float sub = std::rint(a * (1.0f / step)) * step;
  float r = a >= step * float(1 << (kMinNormalExp - kSubnormalExp)) ? normal : sub;
  r = r > fmax ? fmax : r;
  return bits_f32(f32_bits(r) | sign);
}
// fp8_round_trip of operand format F, from its row (a format with subnormals).
template <ElemFormat F>
inline float nearest_round_trip(float x) {
  constexpr ElemFormatInfo r = elem_format_info(F);
  static_assert(r.subnormals, "fp8_round_trip rounds to the subnormal step below min_normal");
  return fp8_round_trip<r.mantissa_bits, 1 - r.bias, 1 - r.bias - r.mantissa_bits>(x, r.max);
}
inline float e4m3_round_trip(float x) { return nearest_round_trip<ElemFormat::E4M3>(x); }
// E2M1 round trip (nearest even, saturating at 6) of a finite value without branches: the
// grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} has step 0.5 below 2, 1 below 4, 2 above, and in each
// range an even multiple of the step is an even code, so rint (ties to even) at that step is
// the format's rounding. Equal to e2m1_to_f32(f32_to_e2m1(x)) for finite x
// (tests/backends/test_quantize.cpp checks it).
inline float e2m1_round_trip(float x) {
  const float a = std::fabs(x);
  const float step = a < 2.0f ? 0.5f : a < 4.0f ? 1.0f : 2.0f;
  const float inv = a < 2.0f ? 2.0f : a < 4.0f ? 1.0f : 0.5f;  // exact: powers of two
  float r = std::rint(a * inv) * step;
  r = r > 6.0f ? 6.0f : r;
  return std::copysign(r, x);
}
// The same with stochastic rounding: e2m1_to_f32(f32_to_e2m1_sr(x, bits)) for finite x, with
// the dropped bits read as a fraction of the step instead of through the bit encoder. Values
// more than 2^32 below their step (where formats.h scales the random bits) take formats.h.
inline float e2m1_sr_round_trip(float x, uint32_t bits) {
  const float a = std::fabs(x);
  const float step = a < 2.0f ? 0.5f : a < 4.0f ? 1.0f : 2.0f;
  const float inv = a < 2.0f ? 2.0f : a < 4.0f ? 1.0f : 0.5f;
  const float k = a * inv, fl = std::floor(k);
  // a's dropped bits: shift = log2(step) - (exponent of a's last mantissa bit).
  const int e = int(f32_bits(a) >> 23);
  const int shift = (a < 2.0f ? -1 : a < 4.0f ? 0 : 1) + 150 - (e > 0 ? e : 1);
  // Outside [0, 32] (tiny values; or beyond 2^24 and non-finite, where the shift would go
  // negative) formats.h decides.
  if (shift > 32 || shift < 0) return e2m1_to_f32(f32_to_e2m1_sr(x, bits));
  const uint64_t F = uint64_t(double(k - fl) * double(uint64_t(1) << shift));  // exact
  const uint64_t R = bits & ((uint64_t(1) << shift) - 1);
  float r = (fl + float((F + R) >> shift)) * step;
  r = r > 6.0f ? 6.0f : r;
  return std::copysign(r, x);
}
inline float e5m2_round_trip(float x) { return nearest_round_trip<ElemFormat::E5M2>(x); }

}  // namespace tg::cpu
