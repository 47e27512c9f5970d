// formats.h: exact conversions between fp32 and the narrow formats (bf16, fp16, FP8 E4M3 and
// E5M2, FP4 E2M1, and the block-scale formats E8M0 and UE4M3), stochastic rounding and the FP8
// scale rule. The low-bit formats' widths, bias, largest code, NaN and overflow behaviour are
// their rows in elem_format.h's table; the encoder and decoder below read them.
//
// Header-only and __host__ __device__ so that the CPU reference backend and the CUDA kernels
// round through the very same code: the CPU backend is the oracle for the kernels, so the two
// must agree bit for bit. Round-to-nearest-even results (including NaN, infinity and overflow)
// match the CUDA toolkit's __float2bfloat16_rn, __float2half_rn and
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE | __NV_NOSAT, ...); the decoders match
// __bfloat162float, __half2float and __nv_cvt_fp8_to_halfraw followed by __half2float (all as
// the toolkit implements them on the host, which tests/numerics/test_formats.cpp checks bit for
// bit).
//
// Semantics shared with CUDA that are easy to get wrong:
//   - every NaN input encodes to one canonical positive NaN (bf16/fp16 0x7FFF, fp8 0x7F); the
//     sign and payload are dropped. fp16/E4M3/E5M2 NaN codes decode to fp32 0x7FFFFFFF, bf16
//     codes decode by widening (payload and sign kept).
//   - bf16/fp16 overflow (including RNE ties above the largest finite) gives +-inf.
//   - FP8 with saturate: |x| beyond the rounding range, and +-inf, give +-max finite; NaN stays
//     NaN. Without saturate: E5M2 gives +-inf, E4M3 (no inf) gives a NaN that keeps the sign
//     (0x7F / 0xFF).
//   - underflow to zero keeps the sign.
//   - FP4 E2M1 (__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) always saturates: |x|
//     past 6 and +-inf give +-6, and NaN gives +6 (code 0x7; the format has no NaN).
//   - E8M0 (__nv_cvt_float_to_e8m0) is a power of two 2^(code - 127) that ignores the sign:
//     rounding toward zero keeps |x|'s exponent, rounding up takes the next power of two
//     unless |x| is one; both clip at 2^-127 (code 0: zero and subnormals) and, saturating, at
//     2^127 (0xFE); NaN (and overflow without saturation) is 0xFF.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "elem_format.h"

namespace tg {

// The largest finite values, from the table (scalars, so device code reads them directly).
inline constexpr float E4M3_MAX = elem_format_max(ElemFormat::E4M3);
inline constexpr float E5M2_MAX = elem_format_max(ElemFormat::E5M2);
inline constexpr float E2M1_MAX = elem_format_max(ElemFormat::E2M1);

TG_HD inline uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TG_HD inline float bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

namespace detail {

// Magnitude code (exponent << M | mantissa) of the finite, non-NaN fp32 magnitude `a` in a
// format with M mantissa bits and exponent bias `bias`, rounded to nearest even, or
// stochastically with `rand_bits` (see f32_to_bf16_sr). The exponent is left unbounded above,
// so the caller detects overflow as a code past the largest finite one; that way ties just
// above the largest finite value round the way IEEE says.
TG_HD inline uint32_t round_magnitude(uint32_t a, int M, int bias, bool stochastic,
                                      uint32_t rand_bits) {
  int e = int(a >> 23);
  uint32_t mant = a & 0x7fffffu;
  if (e == 0) {
    e = 1;  // fp32 subnormal: same scale as the smallest normal, no implicit bit
  } else {
    mant |= 0x800000u;
  }
  int te = e - 127 + bias;  // target biased exponent
  int shift = 23 - M;
  if (te < 1) {  // target subnormal: also drop the bits below the smallest subnormal
    shift += 1 - te;
    te = 1;
  }
  uint32_t q;
  if (stochastic) {
    // Past 32 dropped bits the random bits are scaled up, so the round-up probability stays
    // rem / 2^shift to within 2^-32; past 56 it is below that resolution anyway.
    if (shift > 56) shift = 56;
    const uint64_t r =
        shift <= 32 ? (rand_bits & ((1ull << shift) - 1u)) : uint64_t(rand_bits) << (shift - 32);
    q = uint32_t((mant + r) >> shift);
  } else {
    // mant < 2^24: from 25 dropped bits on, the value is below half the smallest subnormal.
    if (shift > 25) shift = 25;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    q = (mant >> shift) + ((rem > half || (rem == half && ((mant >> shift) & 1u))) ? 1u : 0u);
  }
  // q carries the implicit bit at position M for normals; adding it to (te - 1) << M forms
  // the exponent field, and a rounding carry moves up into the next binade by itself.
  return (uint32_t(te - 1) << M) + q;
}

// Finite magnitude code -> fp32 (exact: every such value fits in fp32).
TG_HD inline float magnitude_to_f32(uint32_t mag, int M, int bias) {
  const uint32_t e = mag >> M, m = mag & ((1u << M) - 1u);
  if (e == 0) return float(m) * bits_f32(uint32_t(127 + 1 - bias - M) << 23);
  return bits_f32(((e + 127u - uint32_t(bias)) << 23) | (m << (23 - M)));
}

TG_HD inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TG_HD inline bool is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

TG_HD inline uint16_t to_f16(float x, bool stochastic, uint32_t rand_bits) {
  const uint32_t u = f32_bits(x);
  if (is_nan_bits(u)) return 0x7fff;
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t mag = round_magnitude(u & 0x7fffffffu, 10, 15, stochastic, rand_bits);
  if (mag > 0x7bffu) mag = 0x7c00u;
  return uint16_t(sign | mag);
}

// Code of x in the signed low-bit format F (elem_format.h's row: widths, bias, largest code, NaN
// and overflow behaviour), rounded to nearest even or stochastically; beyond the largest finite
// magnitude (+-inf included) +-max when saturating (always, for Overflow::Saturate), else the
// row's overflow code; NaN gives the row's NaN code (or +max in a format without NaN).
template <ElemFormat F>
TG_HD inline uint32_t encode_signed(float x, bool saturate, bool stochastic, uint32_t rand_bits) {
  constexpr ElemFormatInfo r = elem_format_info(F);
  static_assert(r.is_signed && r.bits <= 8, "a signed low-bit format");
  const uint32_t u = f32_bits(x);
  if (is_nan_bits(u)) return elem_nan_code(r);
  const uint32_t sign = (u >> 31) << (r.bits - 1);
  uint32_t mag = round_magnitude(u & 0x7fffffffu, r.mantissa_bits, r.bias, stochastic, rand_bits);
  if (mag > r.max_code)
    mag = saturate || r.overflow == Overflow::Saturate ? r.max_code : elem_overflow_code(r);
  return sign | mag;
}

// fp32 value of code q of the signed low-bit format F: NaN codes give fp32 0x7FFFFFFF (sign
// dropped, as __nv_cvt_fp8_to_halfraw then __half2float do), inf keeps its sign.
template <ElemFormat F>
TG_HD inline float decode_signed(uint32_t q) {
  constexpr ElemFormatInfo r = elem_format_info(F);
  static_assert(r.is_signed && r.bits <= 8, "a signed low-bit format");
  const uint32_t sign = ((q >> (r.bits - 1)) & 1u) << 31, mag = q & elem_magnitude_mask(r);
  if constexpr (r.specials == SpecialValues::InfNan) {
    if (mag > elem_inf_code(r)) return bits_f32(0x7fffffffu);
    if (mag == elem_inf_code(r)) return bits_f32(sign | 0x7f800000u);
  } else if constexpr (r.specials == SpecialValues::NanOnly) {
    if (mag == elem_magnitude_mask(r)) return bits_f32(0x7fffffffu);
  }
  return bits_f32(sign | f32_bits(magnitude_to_f32(mag, r.mantissa_bits, r.bias)));
}

}  // namespace detail

// ---- bf16 ----

TG_HD inline uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if (detail::is_nan_bits(u)) return 0x7fff;
  // bf16 keeps fp32's exponent, so rounding is one add on the bit pattern: a carry out of the
  // mantissa bumps the exponent, and out of the largest finite value lands exactly on inf.
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

TG_HD inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

// ---- fp16 ----

TG_HD inline uint16_t f32_to_f16(float x) { return detail::to_f16(x, false, 0); }

TG_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, mag = h & 0x7fffu;
  if (mag > 0x7c00u) return bits_f32(0x7fffffffu);
  if (mag == 0x7c00u) return bits_f32(sign | 0x7f800000u);
  return bits_f32(sign | f32_bits(detail::magnitude_to_f32(mag, 10, 15)));
}

// ---- FP8 ----

TG_HD inline uint8_t f32_to_e4m3(float x, bool saturate) {
  return uint8_t(detail::encode_signed<ElemFormat::E4M3>(x, saturate, false, 0));
}

TG_HD inline uint8_t f32_to_e5m2(float x, bool saturate) {
  return uint8_t(detail::encode_signed<ElemFormat::E5M2>(x, saturate, false, 0));
}

TG_HD inline float e4m3_to_f32(uint8_t q) { return detail::decode_signed<ElemFormat::E4M3>(q); }

TG_HD inline float e5m2_to_f32(uint8_t q) { return detail::decode_signed<ElemFormat::E5M2>(q); }

// ---- FP4 E2M1 (OCP MX): 1 sign, 2 exponent (bias 1), 1 mantissa bit; +-{0, 0.5, 1, 1.5, 2, 3,
// 4, 6}; no inf, no NaN. Codes are 4 bits (sign = 0x8) in the low nibble of a byte. ----

// CUDA: NaN gives +max; an infinity's exponent is far past the format's, so it saturates like
// any large value (the row's Overflow::Saturate).
TG_HD inline uint8_t f32_to_e2m1(float x) {
  return uint8_t(detail::encode_signed<ElemFormat::E2M1>(x, true, false, 0));
}

TG_HD inline float e2m1_to_f32(uint8_t q) {
  return detail::decode_signed<ElemFormat::E2M1>(uint32_t(q & 0xfu));
}

// ---- E8M0 (OCP MX block scale): 8 exponent bits, bias 127, 2^-127 .. 2^127, 0xFF = NaN ----

TG_HD inline uint8_t f32_to_e8m0(float x, bool round_up, bool saturate) {
  const uint32_t a = f32_bits(x) & 0x7fffffffu;
  if (a > 0x7f800000u) return 0xff;
  if (a == 0x7f800000u) return saturate ? 0xfe : 0xff;
  uint32_t e = a >> 23;
  // Up: the next power of two when any mantissa bit is set, except at or below 2^-127
  // (0x00400000), where the clip to the smallest scale wins.
  if (round_up && (a & 0x7fffffu) && a > 0x00400000u) e++;
  if (e == 0xffu && saturate) e = 0xfe;
  return uint8_t(e);
}

// 2^(code - 127); 0xFF gives NaN, code 0 the fp32 subnormal 2^-127.
TG_HD inline float e8m0_to_f32(uint8_t c) {
  if (c == 0xffu) return bits_f32(0x7fffffffu);
  return c == 0 ? bits_f32(0x00400000u) : bits_f32(uint32_t(c) << 23);
}

// ---- UE4M3 (NVFP4 block scale): E4M3 without the sign bit, 0 .. 448 ----
//
// Encoding rounds to nearest even and saturates (+inf gives 448); a negative input (scales
// never are) gives 0, as does -0; NaN gives 0x7F.

TG_HD inline uint8_t f32_to_ue4m3(float x) {
  const uint32_t u = f32_bits(x);
  if (detail::is_nan_bits(u)) return 0x7f;
  if (u & 0x80000000u) return 0;
  return f32_to_e4m3(x, true);  // UE4M3's codes are E4M3's non-negative ones
}

TG_HD inline float ue4m3_to_f32(uint8_t q) { return e4m3_to_f32(uint8_t(q & 0x7fu)); }

// ---- stochastic rounding ----
//
// Rounds |x| away from zero with probability equal to the fraction of a unit in the last place
// that truncation would discard, so the rounded value is unbiased (E[result] = x): small weight
// updates survive on average instead of being rounded away. Random bits are added below the
// kept precision before truncating: the low 16 of rand_bits for bf16, the low 13 for fp16
// normals and more for fp16 subnormals (all 32, scaled up, beyond that: the probability then
// has a resolution of 2^-32). rand_bits = 0 truncates toward zero. NaN gives the canonical NaN,
// +-inf stays +-inf, and rounding up past the largest finite value gives +-inf, as RNE
// overflow does.

TG_HD inline uint16_t f32_to_bf16_sr(float x, uint32_t rand_bits) {
  const uint32_t u = f32_bits(x);
  if (detail::is_nan_bits(u)) return 0x7fff;
  // Adding below bit 16 cannot carry out of an infinity, and carries out of the largest finite
  // value into exactly infinity.
  return uint16_t((u + (rand_bits & 0xffffu)) >> 16);
}

TG_HD inline uint16_t f32_to_f16_sr(float x, uint32_t rand_bits) {
  return detail::to_f16(x, true, rand_bits);
}

// E2M1, E4M3 and E5M2 with stochastic rounding (saturating: rounding up past the largest
// finite value gives it): the low bits of rand_bits below the kept precision, as above (E2M1
// normals: 22 bits, E4M3: 20, E5M2: 21; more for subnormals). NaN as with nearest rounding.
TG_HD inline uint8_t f32_to_e2m1_sr(float x, uint32_t rand_bits) {
  return uint8_t(detail::encode_signed<ElemFormat::E2M1>(x, true, true, rand_bits));
}
TG_HD inline uint8_t f32_to_e4m3_sr(float x, uint32_t rand_bits) {
  return uint8_t(detail::encode_signed<ElemFormat::E4M3>(x, true, true, rand_bits));
}
TG_HD inline uint8_t f32_to_e5m2_sr(float x, uint32_t rand_bits) {
  return uint8_t(detail::encode_signed<ElemFormat::E5M2>(x, true, true, rand_bits));
}

// Any operand format F (elem_format.h's is_operand_format), chosen at compile time, as the
// quantizers round into it: saturating, to nearest even or stochastically with rand_bits.
// Equal to the named functions above (f32_to_e4m3(x, true), f32_to_e2m1_sr, ...): the same
// code, read from F's row.
template <ElemFormat F>
TG_HD inline uint8_t f32_to_elem(float x, bool stochastic, uint32_t rand_bits) {
  static_assert(is_operand_format(F), "an operand format");
  return uint8_t(detail::encode_signed<F>(x, true, stochastic, rand_bits));
}
template <ElemFormat F>
TG_HD inline float elem_to_f32(uint8_t q) {
  static_assert(is_operand_format(F), "an operand format");
  return detail::decode_signed<F>(q);
}

// Counter-based random bits: element `index` of a tensor rounded with `seed` gets the same bits
// on the CPU and on the GPU, whatever the thread layout. Two splitmix64 finalizer rounds; the
// seed is mixed first so that (seed, index) and (seed + 1, index - 1) do not collide.
TG_HD inline uint32_t sr_hash(uint64_t seed, uint64_t index) {
  const uint64_t golden = 0x9e3779b97f4a7c15ull;
  const uint64_t z = detail::splitmix64_mix(seed + golden);
  return uint32_t(detail::splitmix64_mix(z + (index + 1) * golden) >> 32);
}

// Random bits of the block quantizers' stochastic rounding (src/backends/cpu/quantize.cpp): element
// `index` of an operand takes one half of a 64-bit hash of (seed, index / 2), one mix per two
// elements instead of sr_hash's two per element. `mixed` = quant_sr_seed(seed), once per
// operand.
TG_HD inline uint64_t quant_sr_seed(uint64_t seed) {
  return detail::splitmix64_mix(seed + 0x9e3779b97f4a7c15ull);
}
TG_HD inline uint64_t quant_sr_pair(uint64_t mixed, uint64_t pair) {
  return detail::splitmix64_mix(mixed + (pair + 1) * 0x9e3779b97f4a7c15ull);
}
TG_HD inline uint32_t quant_sr_bits(uint64_t mixed, uint64_t index) {
  const uint64_t h = quant_sr_pair(mixed, index >> 1);
  return uint32_t((index & 1) ? h >> 32 : h);
}

// ---- FP8 scaling ----

// Per-tensor scale s = (fmax / amax) / 2^margin, so that q = sat(x * s) maps the largest
// magnitude `amax` 2^margin below the format's max `fmax`. amax == 0 (an all-zero tensor),
// negative or non-finite amax (a diverged step, which the loss scaler skips anyway) give s = 1
// so that a bad amax never poisons the scale history. A scale that would overflow fp32 (amax
// tiny) is clamped to the largest finite float: x * s then stays finite, since |x| <= amax.
TG_HD inline float fp8_scale_from_amax(float amax, float fmax, int margin) {
  if (!(amax > 0.f) || (f32_bits(amax) & 0x7fffffffu) >= 0x7f800000u) return 1.f;
  const float s = ldexpf(fmax / amax, -margin);
  if ((f32_bits(s) & 0x7fffffffu) >= 0x7f800000u) return bits_f32(0x7f7fffffu);
  return s;
}

}  // namespace tg
