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

}  // namespace tg::cpu
