// tanh_fp32: glibc's tanhf re-evaluated in AVX-512F lanes. glibc 2.36 on x86-64 (Debian 12)
// computes tanhf as fdlibm's float tanh over fdlibm's float expm1, both plain SSE code: neither
// is an IFUNC and neither uses a fused multiply-add. With t = expm1f(2|x|) for 1 <= |x| < 22 and
// t = expm1f(-2|x|) below 1,
//   tanh(x) = sign(x) (1 - 2/(t + 2))   or   sign(x) (-t/(t + 2)),
// sign(x) from 22 on, x (1 + x) below 2^-55, a NaN for a NaN. expm1f(u) writes u = k ln2 + r
// (ln2 split in a high part whose multiples are exact and a low part, c the rounding error of
// r), takes expm1(r) from a rational approximation in r^2/2 and scales by 2^k by adding k to
// the exponent bits, with its own formula for k = 0, -1, 1, for 2 <= k <= 22, 23 <= k <= 56 and
// for the rest. Here every lane evaluates each case tanh can reach and masks pick the lane's
// case; the float operations are the library's, in its order, so every rounding is the same.
// This file is compiled with -ffp-contract=off (Makefile): a fused multiply-add would round once
// where glibc rounds twice.
//
// Checked against std::tanh for all 2^32 inputs (a one-off run when this was written) and on a
// dense sample by tests/precision/test_precision.cpp. At first use the lanes are also compared with
// std::tanh on a fixed sample and not used if one value differs: fdlibm's tanhf is not
// correctly rounded for about a fifth of its inputs, so a C library with another tanhf fails
// it (a subtler slip, like fused multiply-adds, is left to the tests).
#include "tanh_fp32.h"

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
#define TG_TANH_AVX512 1
#endif

namespace tg::cpu {

namespace {

void tanh_scalar(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = std::tanh(x[i]);
}

#ifdef TG_TANH_AVX512
#define TG_TARGET_AVX512 __attribute__((target("avx512f")))

TG_TARGET_AVX512 inline __m512 bits(uint32_t b) {
  return _mm512_castsi512_ps(_mm512_set1_epi32(int(b)));
}
TG_TARGET_AVX512 inline __m512 num(float v) { return _mm512_set1_ps(v); }
TG_TARGET_AVX512 inline __m512i as_int(__m512 v) { return _mm512_castps_si512(v); }
TG_TARGET_AVX512 inline __m512 as_float(__m512i v) { return _mm512_castsi512_ps(v); }
// y with k added to its exponent field (y and the result normal).
TG_TARGET_AVX512 inline __m512 scale_exponent(__m512 y, __m512i k) {
  return as_float(_mm512_add_epi32(as_int(y), _mm512_slli_epi32(k, 23)));
}

// fdlibm's constants, by their bits.
constexpr uint32_t kLn2Hi = 0x3f317180, kLn2Lo = 0x3717f7d1, kInvLn2 = 0x3fb8aa3b;
constexpr uint32_t kQ1 = 0xbd088889, kQ2 = 0x3ad00d01, kQ3 = 0xb8a670cd, kQ4 = 0x36867e54,
                   kQ5 = 0xb457edbb;

// expm1f(u) for the u that tanh passes: -2 < u <= -2^-54 or 2 <= u < 44 (other lanes: garbage).
TG_TARGET_AVX512 __m512 expm1_lanes(__m512 u) {
  const __m512i hx = _mm512_and_si512(as_int(u), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 neg = _mm512_cmplt_epi32_mask(as_int(u), _mm512_setzero_si512());
  const __mmask16 tiny = _mm512_cmplt_epi32_mask(hx, _mm512_set1_epi32(0x33000000));
  const __mmask16 reduce = _mm512_cmpgt_epi32_mask(hx, _mm512_set1_epi32(0x3eb17218));
  const __mmask16 one_step = reduce & _mm512_cmplt_epi32_mask(hx, _mm512_set1_epi32(0x3f851592));

  // Argument reduction: u = k ln2 + (hi - lo), k = +-1 near ln2, else rounded u / ln2.
  const __m512 half_signed = _mm512_mask_blend_ps(neg, num(0.5f), num(-0.5f));
  const __m512i k_round =
      _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(bits(kInvLn2), u), half_signed));
  const __m512i k_one = _mm512_mask_blend_epi32(neg, _mm512_set1_epi32(1), _mm512_set1_epi32(-1));
  __m512i k = _mm512_mask_blend_epi32(one_step, k_round, k_one);
  k = _mm512_maskz_mov_epi32(reduce, k);
  const __m512 kf = _mm512_cvtepi32_ps(k_round);
  const __m512 hi_round = _mm512_sub_ps(u, _mm512_mul_ps(kf, bits(kLn2Hi)));
  const __m512 lo_round = _mm512_mul_ps(kf, bits(kLn2Lo));
  const __m512 hi_one =
      _mm512_mask_blend_ps(neg, _mm512_sub_ps(u, bits(kLn2Hi)), _mm512_add_ps(u, bits(kLn2Hi)));
  const __m512 lo_one = _mm512_mask_blend_ps(neg, bits(kLn2Lo), bits(kLn2Lo | 0x80000000u));
  const __m512 hi = _mm512_mask_blend_ps(one_step, hi_round, hi_one);
  const __m512 lo = _mm512_mask_blend_ps(one_step, lo_round, lo_one);
  const __m512 r_reduced = _mm512_sub_ps(hi, lo);
  const __m512 c = _mm512_sub_ps(_mm512_sub_ps(hi, r_reduced), lo);
  const __m512 r = _mm512_mask_blend_ps(reduce, u, r_reduced);

  // expm1(r) on the primary range: r1 = 1 + hxs P(hxs), e the correction.
  const __m512 hfx = _mm512_mul_ps(num(0.5f), r);
  const __m512 hxs = _mm512_mul_ps(r, hfx);
  __m512 p = _mm512_add_ps(bits(kQ4), _mm512_mul_ps(hxs, bits(kQ5)));
  p = _mm512_add_ps(bits(kQ3), _mm512_mul_ps(hxs, p));
  p = _mm512_add_ps(bits(kQ2), _mm512_mul_ps(hxs, p));
  p = _mm512_add_ps(bits(kQ1), _mm512_mul_ps(hxs, p));
  const __m512 r1 = _mm512_add_ps(num(1.f), _mm512_mul_ps(hxs, p));
  const __m512 t = _mm512_sub_ps(num(3.f), _mm512_mul_ps(r1, hfx));
  const __m512 e = _mm512_mul_ps(
      hxs, _mm512_div_ps(_mm512_sub_ps(r1, t), _mm512_sub_ps(num(6.f), _mm512_mul_ps(r, t))));

  // k = 0: r - (r e - hxs).
  const __m512 y_k0 = _mm512_sub_ps(r, _mm512_sub_ps(_mm512_mul_ps(r, e), hxs));
  // k != 0: e' = (r (e - c) - c) - hxs, then one formula per range of k.
  const __m512 ec = _mm512_sub_ps(_mm512_sub_ps(_mm512_mul_ps(r, _mm512_sub_ps(e, c)), c), hxs);
  const __m512 y_km1 = _mm512_sub_ps(_mm512_mul_ps(num(0.5f), _mm512_sub_ps(r, ec)), num(0.5f));
  const __m512 y_k1_low = _mm512_mul_ps(num(-2.f), _mm512_sub_ps(ec, _mm512_add_ps(r, num(0.5f))));
  const __m512 y_k1_high = _mm512_add_ps(num(1.f), _mm512_mul_ps(num(2.f), _mm512_sub_ps(r, ec)));
  const __m512 y_k1 =
      _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, num(-0.25f), _CMP_LT_OQ), y_k1_high, y_k1_low);
  // k <= -2 or k > 56: (1 - (e' - r)) 2^k - 1.
  const __m512 y_far =
      _mm512_sub_ps(scale_exponent(_mm512_sub_ps(num(1.f), _mm512_sub_ps(ec, r)), k), num(1.f));
  // 2 <= k <= 22: ((1 - 2^-k) - (e' - r)) 2^k.
  const __m512 one_minus = as_float(_mm512_sub_epi32(
      _mm512_set1_epi32(0x3f800000), _mm512_srlv_epi32(_mm512_set1_epi32(0x1000000), k)));
  const __m512 y_near = scale_exponent(_mm512_sub_ps(one_minus, _mm512_sub_ps(ec, r)), k);
  // 23 <= k <= 56: ((r - (e' + 2^-k)) + 1) 2^k.
  const __m512 two_minus_k =
      as_float(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(0x7f), k), 23));
  const __m512 y_mid =
      scale_exponent(_mm512_add_ps(_mm512_sub_ps(r, _mm512_add_ps(ec, two_minus_k)), num(1.f)), k);

  const __m512i k_plus_1 = _mm512_add_epi32(k, _mm512_set1_epi32(1));
  const __mmask16 far = _mm512_cmpgt_epi32_mask(k_plus_1, _mm512_set1_epi32(57)) |
                        _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(-1));
  const __mmask16 near = _mm512_cmpgt_epi32_mask(k, _mm512_set1_epi32(1)) &
                         _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(23)) & ~far;
  __m512 y = y_mid;
  y = _mm512_mask_mov_ps(y, near, y_near);
  y = _mm512_mask_mov_ps(y, far, y_far);
  y = _mm512_mask_mov_ps(y, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1)), y_k1);
  y = _mm512_mask_mov_ps(y, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(-1)), y_km1);
  y = _mm512_mask_mov_ps(y, _mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), y_k0);
  return _mm512_mask_mov_ps(y, tiny, u);
}

TG_TARGET_AVX512 __m512 tanh_lanes(__m512 x) {
  const __m512i sign_bit = _mm512_set1_epi32(int(0x80000000u));
  const __m512i ix = _mm512_andnot_si512(sign_bit, as_int(x));
  const __m512i sign = _mm512_and_si512(sign_bit, as_int(x));
  const __m512 ax = as_float(ix);
  const __mmask16 big = _mm512_cmpge_epi32_mask(ix, _mm512_set1_epi32(0x3f800000));
  // t = expm1f(2|x|) from 1 on, expm1f(-2|x|) below.
  const __m512 u =
      _mm512_mask_blend_ps(big, _mm512_mul_ps(num(-2.f), ax), _mm512_mul_ps(num(2.f), ax));
  const __m512 t = expm1_lanes(u);
  const __m512 d = _mm512_add_ps(t, num(2.f));
  // 1 - 2/(t + 2) or -t/(t + 2): one division for both.
  const __m512 neg_t = as_float(_mm512_xor_si512(as_int(t), sign_bit));
  const __m512 q = _mm512_div_ps(_mm512_mask_blend_ps(big, neg_t, num(2.f)), d);
  const __m512 z = _mm512_mask_blend_ps(big, q, _mm512_sub_ps(num(1.f), q));
  __m512 y = as_float(_mm512_xor_si512(as_int(z), sign));
  // |x| >= 22 (and +-inf): 1 - 1e-30 rounds to 1.
  y = _mm512_mask_mov_ps(y, _mm512_cmpge_epi32_mask(ix, _mm512_set1_epi32(0x41b00000)),
                         as_float(_mm512_or_si512(as_int(num(1.f)), sign)));
  // |x| < 2^-55: x (1 + x), which is x (+-0 and subnormals included).
  y = _mm512_mask_mov_ps(y, _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32(0x24000000)),
                         _mm512_mul_ps(x, _mm512_add_ps(num(1.f), x)));
  return _mm512_mask_mov_ps(y, _mm512_cmpgt_epi32_mask(ix, _mm512_set1_epi32(0x7f800000)),
                            _mm512_add_ps(x, x));
}

TG_TARGET_AVX512 void tanh_avx512(float* x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, tanh_lanes(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, tanh_lanes(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// The lanes against std::tanh on a fixed sample reaching every case above, both signs: |x| up
// to 24 in steps of 3/256, and 1..2 times 2^0, 2^-2, ..., 2^-126.
bool lanes_match_library() { return lanes_match(tanh_avx512, tanh_scalar, 2048, 24.f); }
#endif

bool use_lanes() {
#ifdef TG_TANH_AVX512
  static const bool on = cpu_features().avx512f && lanes_match_library();
  return on;
#else
  return false;
#endif
}

}  // namespace

bool tanh_fp32_vectorized() { return use_lanes(); }

void tanh_fp32(float* x, size_t n) {
#ifdef TG_TANH_AVX512
  if (use_lanes()) return tanh_avx512(x, n);
#endif
  tanh_scalar(x, n);
}

}  // namespace tg::cpu
