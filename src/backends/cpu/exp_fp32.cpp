// exp_fp32: glibc's expf re-evaluated in AVX-512F lanes. glibc 2.36 on x86-64 (Debian 12) picks
// expf at load time (an IFUNC): __expf_fma on a CPU with FMA and AVX2, which every AVX-512F CPU
// has. It is ARM's optimized-routines expf, computed in double precision: with N = 32,
//   z = x N/ln2 + 1.5*2^52 (fused: k = round(x N/ln2) sits in z's low bits), kd = z - 1.5*2^52,
//   r = x N/ln2 - kd (fused), s = 2^(k/N) = double bits tab[k % N] + (k << 47),
//   y = ((C0 r + C1) r^2 + (C2 r + 1)) s (each multiply-add fused), result = float(y),
// whenever x's exponent bits pass (bits >> 20) & 0x7ff <= 0x42a (|x| below 88, zeros and
// subnormals included); larger |x|, infinities and NaNs take its special cases (overflow,
// underflow, errno, x + x). Here the lanes evaluate the main formula with the library's constants
// (tab and C as in glibc's __exp2f_data, read from its libm), in its order, with its fused
// multiply-adds, so every rounding is the same; a lane past the test is recomputed by std::exp
// itself. This file is compiled with -ffp-contract=off (Makefile): every fused multiply-add is
// written as one.
//
// Checked against std::exp for all 2^32 inputs (a one-off run when this was written) and on a
// dense sample by tests/precision/test_precision.cpp. At first use the lanes are also compared with
// std::exp on a fixed sample and not used if one value differs, so a C library with another expf
// falls back to the per-element calls.
#include "exp_fp32.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_features.h"
#include "lanes_check.h"

#if defined(__x86_64__)
// GCC 12 warns on its own _mm512_undefined_* (self-initialised) in the intrinsics that use it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define TG_EXP_AVX512 1
#endif

namespace tg::cpu {

namespace {

void exp_scalar(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = std::exp(x[i]);
}

#ifdef TG_EXP_AVX512
#define TG_TARGET_AVX512 __attribute__((target("avx512f")))

// glibc's __exp2f_data, by their bits: tab[i] = bits(2^(i/32)) - (i << 47), then N/ln2, the
// polynomial's C0, C1, C2 (scaled by 1/N^3, 1/N^2, 1/N) and the rounding shift 1.5*2^52.
constexpr uint64_t kTab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
constexpr uint64_t kInvLn2N = 0x40471547652b82fe, kC0 = 0x3ebc6af84b912394,
                   kC1 = 0x3f2ebfce50fac4f3, kC2 = 0x3f962e42ff0c52d6, kShift = 0x4338000000000000;

TG_TARGET_AVX512 inline __m512d dbits(uint64_t b) {
  return _mm512_castsi512_pd(_mm512_set1_epi64(int64_t(b)));
}
TG_TARGET_AVX512 inline __m512i tab(int from) {
  return _mm512_loadu_si512(reinterpret_cast<const void*>(kTab + from));
}

// The main formula on eight lanes of x, widened to double.
TG_TARGET_AVX512 __m256 exp_main(__m512d xd) {
  const __m512d shift = dbits(kShift), inv = dbits(kInvLn2N);
  const __m512d z = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(z);
  const __m512d kd = _mm512_sub_pd(z, shift);
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  // tab[k % 32]: bits 0-3 pick among 16 entries, bit 4 which 16.
  const __m512i lo = _mm512_permutex2var_epi64(tab(0), ki, tab(8));
  const __m512i hi = _mm512_permutex2var_epi64(tab(16), ki, tab(24));
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  const __m512i t =
      _mm512_add_epi64(_mm512_mask_blend_epi64(upper, lo, hi), _mm512_slli_epi64(ki, 47));
  const __m512d s = _mm512_castsi512_pd(t);
  const __m512d z2 = _mm512_fmadd_pd(dbits(kC0), r, dbits(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(dbits(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z2, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

// Sixteen lanes; those past the library's main-path test are redone by std::exp.
TG_TARGET_AVX512 __m512 exp_lanes(__m512 x, float* spill) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d hi =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castps_pd(_mm512_castps256_ps512(exp_main(lo))), _mm256_castps_pd(exp_main(hi)), 1));
  const __m512i top =
      _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
  const __mmask16 special = _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x42a));
  if (special) {
    _mm512_storeu_ps(spill, x);
    for (int j = 0; j < 16; j++)
      if (special >> j & 1) spill[j] = std::exp(spill[j]);
    y = _mm512_mask_loadu_ps(y, special, spill);
  }
  return y;
}

TG_TARGET_AVX512 void exp_avx512(float* x, size_t n) {
  alignas(64) float spill[16];
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp_lanes(_mm512_loadu_ps(x + i), spill));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    // The masked-off lanes hold 0, which takes the main path.
    _mm512_mask_storeu_ps(x + i, m, exp_lanes(_mm512_maskz_loadu_ps(m, x + i), spill));
  }
}

// The lanes against std::exp on a fixed sample covering the main path's range, both signs, and
// each of the library's special cases: |x| up to 104 in steps of 1/64, and 1..2 times 2^0, 2^-2,
// ..., 2^-126.
bool lanes_match_library() { return lanes_match(exp_avx512, exp_scalar, 8192, 104.f); }
#endif

bool use_lanes() {
#ifdef TG_EXP_AVX512
  static const bool on = cpu_features().avx512f && lanes_match_library();
  return on;
#else
  return false;
#endif
}

}  // namespace

bool exp_fp32_vectorized() { return use_lanes(); }

void exp_fp32(float* x, size_t n) {
#ifdef TG_EXP_AVX512
  if (use_lanes()) return exp_avx512(x, n);
#endif
  exp_scalar(x, n);
}

}  // namespace tg::cpu
