// storage.h: element types of the CPU ops and how they widen and narrow.
//
// Tensors are stored in their real type (bf16 and fp16 as 16-bit codes), and every op
// widens on load to its accumulation type A (float; double for the fp64 checks), computes
// in A and rounds once on store, to nearest even, through src/formats.h: the same rounding
// points a GPU kernel that keeps fp32 in registers has.
//
// fp16 uses the F16C instructions when the compiler targets them: they round to nearest even
// like __float2half_rn; only NaNs differ (hardware keeps the payload), so NaNs are mapped to
// CUDA's canonical codes here. tests/test_precision.cpp checks every code against formats.h.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "../formats.h"

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
// finite x (tests/test_precision.cpp checks it against formats.h).
template <int kMantBits, int kMinNormalExp, int kSubnormalExp>
inline float fp8_round_trip(float x, float fmax) {
  float a = std::fabs(x);
  float r;
  if (a >= std::ldexp(1.0f, kMinNormalExp)) {
    uint32_t b = f32_bits(a);
    const int drop = 23 - kMantBits;
    b += ((1u << (drop - 1)) - 1) + ((b >> drop) & 1u);
    r = bits_f32(b & ~((1u << drop) - 1));
  } else {
    const float step = std::ldexp(1.0f, kSubnormalExp);
    r = std::rint(a / step) * step;
  }
  r = r > fmax ? fmax : r;
  return std::copysign(r, x);
}
inline float e4m3_round_trip(float x) { return fp8_round_trip<3, -6, -9>(x, E4M3_MAX); }
inline float e5m2_round_trip(float x) { return fp8_round_trip<2, -14, -16>(x, E5M2_MAX); }

}  // namespace tg::cpu
