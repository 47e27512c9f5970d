// quantize_lanes: quantize.cpp's stochastic rounding and Hadamard butterflies in AVX-512 lanes.
//
// Stochastic rounding, 16 elements at a time: the random bits of elements 2k and 2k + 1 are
// the low and high halves of one 64-bit hash (quant_sr_pair), so 8 hashes in 64-bit lanes,
// read as 16 32-bit lanes, are the bits of 16 consecutive elements from an even index. Each
// FP8 element then goes through formats.h's detail::round_magnitude (stochastic branch) and
// detail::magnitude_to_f32 in 32-bit integer lanes, step by step; where the scalar code adds
// the random bits in 64 bits, the lanes take the carry of a 32-bit add (round_sr16 says why
// that is the same). E2M1, whose grid is small, takes a shorter way to the same bits
// (sr_round16_e2m1). NaN lanes take the value formats.h's encoders give NaN (E2M1: +6, FP8:
// the NaN code, decoded to 0x7fffffff).
//
// The Hadamard butterflies of a 16-value run stay inside one register: the partner of lane j
// at distance h (1, 2, 4, 8) is a permute away, the lower lane takes a + b and the upper a - b,
// with a the lower value, as the scalar loop writes them; longer runs add the distances 16,
// 32, ... between whole registers. Every add is the scalar loop's, with its operands in its
// order, so the results are the same bits.
#include "quantize_lanes.h"

#include "avx512_intrinsics.h"
#include "cpu_features.h"
#include "src/numerics/formats.h"

namespace tg::cpu {

bool quantize_lanes_available() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl;
}

#ifdef TG_QUANT_AVX512
#define TG_TARGET_LANES __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// splitmix64's finalizer in 64-bit lanes (formats.h's detail::splitmix64_mix).
TG_TARGET_LANES inline __m512i mix64(__m512i z) {
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(int64_t(0xbf58476d1ce4e5b9ull)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(int64_t(0x94d049bb133111ebull)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// round_magnitude(a, M, bias, stochastic, rand) for 16 finite-or-infinite magnitudes a and
// their random bits, in 32-bit lanes: the magnitude code, unbounded above (32-bit wrap as the
// scalar's). The scalar adds r to the mantissa in 64 bits, r = rand mod 2^s for a shift s <= 32
// and rand 2^(s - 32) past it; here q = (mant >> s) + carry, where the carry of the dropped
// part is the carry out of one 32-bit add: s <= 32: (mant << (32 - s)) + (rand << (32 - s))
// (both dropped parts aligned to the top); s > 32: (mant >> (s - 32)) + rand, since then
// (mant + rand 2^(s - 32)) >> s = (rand + (mant >> (s - 32))) >> 32 (the bits of mant below
// 2^(s - 32) cannot carry past an integer). Variable shifts by a count past 31 (a negative
// one included) give 0, which picks the right term of each OR.
template <int M, int kBias>
TG_TARGET_LANES inline __m512i round_sr16(__m512i a, __m512i rnd) {
  const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
  __m512i e = _mm512_srli_epi32(a, 23);
  __m512i mant = _mm512_and_si512(a, _mm512_set1_epi32(0x7fffff));
  const __mmask16 normal = _mm512_cmpneq_epi32_mask(e, zero);
  mant = _mm512_mask_or_epi32(mant, normal, mant, _mm512_set1_epi32(0x800000));
  e = _mm512_max_epi32(e, one);  // fp32 subnormal: exponent 1, no implicit bit
  // te = e - 127 + bias; shift = 23 - M, plus 1 - te (and te = 1) below the normal range.
  __m512i te = _mm512_add_epi32(e, _mm512_set1_epi32(kBias - 127));
  const __m512i below = _mm512_max_epi32(_mm512_sub_epi32(one, te), zero);
  te = _mm512_max_epi32(te, one);
  const __m512i shift =
      _mm512_min_epi32(_mm512_add_epi32(_mm512_set1_epi32(23 - M), below), _mm512_set1_epi32(56));
  const __m512i up = _mm512_sub_epi32(_mm512_set1_epi32(32), shift);  // < 0 past 32
  const __m512i down = _mm512_sub_epi32(shift, _mm512_set1_epi32(32));
  const __m512i x = _mm512_or_si512(_mm512_sllv_epi32(mant, up), _mm512_srlv_epi32(mant, down));
  const __m512i y = _mm512_sllv_epi32(rnd, _mm512_max_epi32(up, zero));
  const __mmask16 carry = _mm512_cmplt_epu32_mask(_mm512_add_epi32(x, y), x);
  __m512i q = _mm512_srlv_epi32(mant, shift);
  q = _mm512_mask_add_epi32(q, carry, q, one);
  return _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(te, one), M), q);
}

// Operand format F's stochastic round trip of 16 values v (already scaled) with their random
// bits, by F's row (elem_format.h): its mantissa bits, bias and largest code.
template <ElemFormat F>
TG_TARGET_LANES inline __m512 sr_round16(__m512 v, __m512i rnd) {
  constexpr ElemFormatInfo row = elem_format_info(F);
  constexpr int M = row.mantissa_bits, kBias = row.bias;
  constexpr uint32_t kMaxMag = row.max_code;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i sign = _mm512_and_si512(u, _mm512_set1_epi32(int(0x80000000u)));
  __m512i mag = round_sr16<M, kBias>(a, rnd);
  mag = _mm512_min_epu32(mag, _mm512_set1_epi32(int(kMaxMag)));  // saturate
  // magnitude_to_f32: exponent field e = mag >> M, mantissa m; e == 0: m 2^(1 - bias - M).
  const __m512i e = _mm512_srli_epi32(mag, M);
  const __m512i m = _mm512_and_si512(mag, _mm512_set1_epi32((1 << M) - 1));
  const __m512i norm_bits =
      _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127 - kBias)), 23),
                      _mm512_slli_epi32(m, 23 - M));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(m),
                                   _mm512_castsi512_ps(_mm512_set1_epi32((128 - kBias - M) << 23)));
  const __mmask16 is_sub = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
  __m512i val = _mm512_mask_blend_epi32(is_sub, norm_bits, _mm512_castps_si512(sub));
  val = _mm512_or_si512(val, sign);
  // NaN: the format's NaN code, which decodes to 0x7fffffff, or +max in a format without NaN.
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  const __m512i nan_value = row.specials == SpecialValues::None
                                ? _mm512_castps_si512(_mm512_set1_ps(row.max))
                                : _mm512_set1_epi32(0x7fffffff);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(val, nan, nan_value));
}

// E2M1's stochastic round trip (values 0, 0.5, 1, ..., 6) in fewer steps than the general
// one above, the same bits. From 0.5 up the dropped bits are fp32 mantissa bits below the step
// (22 of them, 23 in [0.5, 1) where the step is the leading bit), so adding the random bits'
// low 22 (23) to a's bits and clearing those is the rounding, the carry walking into the
// exponent as the code's does (1.75 + carry: 2.0). Below 0.5 the result is 0 or 0.5: up when
// the dropped bits aligned to the top of 32 bits, floor(a 2^33) (exact: a 2^33 < 2^32), plus
// the random bits aligned the same way (rnd << (e - 117) up to 32 dropped bits, rnd itself
// past them, as round_sr16 aligns them) carries out of 32 bits.
TG_TARGET_LANES inline __m512 sr_round16_e2m1(__m512 v, __m512i rnd) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i e = _mm512_srli_epi32(a, 23);
  const __mmask16 below1 = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(127));
  const __m512i low =
      _mm512_mask_blend_epi32(below1, _mm512_set1_epi32(0x3fffff), _mm512_set1_epi32(0x7fffff));
  const __m512i up = _mm512_andnot_si512(low, _mm512_add_epi32(a, _mm512_and_si512(rnd, low)));
  const __m512i x =
      _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(0x1p33f)));
  const __m512i align =
      _mm512_max_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(117)), _mm512_setzero_si512());
  const __mmask16 carry =
      _mm512_cmplt_epu32_mask(_mm512_add_epi32(x, _mm512_sllv_epi32(rnd, align)), x);
  const __mmask16 below_half = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(126));
  const __m512i six = _mm512_set1_epi32(0x40c00000);
  __m512i r = _mm512_mask_blend_epi32(below_half, up,
                                      _mm512_maskz_mov_epi32(carry, _mm512_set1_epi32(0x3f000000)));
  r = _mm512_min_epu32(r, six);  // saturate (inf included)
  r = _mm512_or_si512(r, _mm512_and_si512(u, _mm512_set1_epi32(int(0x80000000u))));
  // NaN: +6, as formats.h's encoder gives it.
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, six));
}

// The hashes' inputs mixed + (p + 1 + k) golden of the 8 pairs from element idx0 (even) on;
// the next 16 elements' are these plus 8 golden (the same sums mod 2^64).
TG_TARGET_LANES inline __m512i hash_inputs(uint64_t mixed, uint64_t idx0) {
  const __m512i lane = _mm512_setr_epi64(1, 2, 3, 4, 5, 6, 7, 8);
  const __m512i idx = _mm512_add_epi64(_mm512_set1_epi64(int64_t(idx0 >> 1)), lane);
  return _mm512_add_epi64(_mm512_set1_epi64(int64_t(mixed)),
                          _mm512_mullo_epi64(idx, _mm512_set1_epi64(int64_t(kGolden))));
}

// x[c] for c in [0, n16), n16 a multiple of 16, at one scale; z: the hash inputs of x[0],
// advanced past x[n16).
template <ElemFormat F>
TG_TARGET_LANES inline void sr_round_run(float* x, int n16, __m512 venc, __m512 vdec, __m512i& z) {
  const __m512i step = _mm512_set1_epi64(int64_t(8 * kGolden));
  for (int c = 0; c < n16; c += 16) {
    const __m512i rnd = mix64(z);
    z = _mm512_add_epi64(z, step);
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + c), venc);
    __m512 r;
    if constexpr (F == ElemFormat::E2M1)  // its own shorter path, the same bits
      r = sr_round16_e2m1(v, rnd);
    else
      r = sr_round16<F>(v, rnd);
    _mm512_storeu_ps(x + c, _mm512_mul_ps(r, vdec));
  }
}

template <ElemFormat F>
TG_TARGET_LANES int sr_round_impl(float* x, int n, float enc, float dec, uint64_t mixed,
                                  uint64_t idx0) {
  __m512i z = hash_inputs(mixed, idx0);
  const int n16 = n / 16 * 16;
  sr_round_run<F>(x, n16, _mm512_set1_ps(enc), _mm512_set1_ps(dec), z);
  return n16;
}

// Whole groups of gc values (a multiple of 16), each at its scale, one hash stream throughout.
template <ElemFormat F>
TG_TARGET_LANES void sr_round_groups_impl(float* x, int groups, int gc, const GroupScale* sg,
                                          uint64_t mixed, uint64_t idx0) {
  __m512i z = hash_inputs(mixed, idx0);
  for (int j = 0; j < groups; j++)
    sr_round_run<F>(x + size_t(j) * gc, gc, _mm512_set1_ps(sg[j].enc), _mm512_set1_ps(sg[j].dec),
                    z);
}

}  // namespace

int sr_round_lanes(float* x, int n, float enc, float dec, uint64_t mixed, uint64_t idx0,
                   ElemFormat f) {
  if (!quantize_lanes_available() || (idx0 & 1)) return 0;
  int done = 0;
  dispatch_operand_format(f, [&](auto format) {
    done = sr_round_impl<decltype(format)::value>(x, n, enc, dec, mixed, idx0);
  });
  return done;
}

TG_TARGET_LANES void group_amax_lanes(const float* x, int groups, int gc, uint32_t* out) {
  const __m512i abs = _mm512_set1_epi32(0x7fffffff);
  for (int j = 0; j < groups; j++) {
    const float* g = x + size_t(j) * gc;
    __m512i m = _mm512_setzero_si512();
    for (int c = 0; c < gc; c += 16)
      m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(g + c), abs));
    out[j] = _mm512_reduce_max_epu32(m);
  }
}

int sr_round_groups_lanes(float* x, int groups, int gc, const GroupScale* sg, uint64_t mixed,
                          uint64_t idx0, ElemFormat f) {
  if (!quantize_lanes_available() || (idx0 & 1) || gc % 16 != 0) return 0;
  const bool done = dispatch_operand_format(f, [&](auto format) {
    sr_round_groups_impl<decltype(format)::value>(x, groups, gc, sg, mixed, idx0);
  });
  return done ? groups : 0;
}

namespace {
// storage.h's e2m1_round_trip of 16 values: the step 0.5 below 2, 1 below 4, 2 above, rint
// (ties to even) at that step, 6 at most (a NaN stays NaN: the min takes r when unordered, as
// the scalar's r > 6 ? 6 : r does), the sign put back.
TG_TARGET_LANES inline __m512 rne_round16_e2m1(__m512 v) {
  const __m512 a = _mm512_abs_ps(v);
  const __mmask16 lt2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_LT_OQ);
  const __mmask16 lt4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_LT_OQ);
  __m512 step = _mm512_mask_blend_ps(lt4, _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f));
  step = _mm512_mask_blend_ps(lt2, step, _mm512_set1_ps(0.5f));
  __m512 inv = _mm512_mask_blend_ps(lt4, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f));
  inv = _mm512_mask_blend_ps(lt2, inv, _mm512_set1_ps(2.0f));
  const __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(a, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_mul_ps(k, step));
  const __m512i sign =
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

TG_TARGET_LANES void rne_round_groups_e2m1_impl(float* x, int groups, int gc,
                                                const GroupScale* sg) {
  for (int j = 0; j < groups; j++) {
    float* g = x + size_t(j) * gc;
    const __m512 enc = _mm512_set1_ps(sg[j].enc), dec = _mm512_set1_ps(sg[j].dec);
    for (int c = 0; c < gc; c += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(g + c), enc);
      _mm512_storeu_ps(g + c, _mm512_mul_ps(rne_round16_e2m1(v), dec));
    }
  }
}
}  // namespace

// Not compiled for AVX-512 itself: the check must run before any of its instructions.
int rne_round_groups_e2m1_lanes(float* x, int groups, int gc, const GroupScale* sg) {
  if (!quantize_lanes_available() || gc % 16 != 0) return 0;
  rne_round_groups_e2m1_impl(x, groups, gc, sg);
  return groups;
}

namespace {
// One butterfly stage at distance h < 16 inside a register: lower lanes a + b, upper a - b,
// where `partner` holds each lane's partner and `upper` marks the upper lanes.
TG_TARGET_LANES inline __m512 butterfly(__m512 v, __m512 partner, __mmask16 upper) {
  return _mm512_mask_blend_ps(upper, _mm512_add_ps(v, partner), _mm512_sub_ps(partner, v));
}

// The signs (forward) and the four in-register stages of one 16-value run.
TG_TARGET_LANES inline __m512 hadamard16(__m512 x, const float* sign, bool inverse) {
  if (!inverse) x = _mm512_mul_ps(x, _mm512_loadu_ps(sign));
  x = butterfly(x, _mm512_permute_ps(x, 0xB1), 0xAAAA);
  x = butterfly(x, _mm512_permute_ps(x, 0x4E), 0xCCCC);
  x = butterfly(x, _mm512_shuffle_f32x4(x, x, 0xB1), 0xF0F0);
  return butterfly(x, _mm512_shuffle_f32x4(x, x, 0x4E), 0xFF00);
}

TG_TARGET_LANES void hadamard_impl(float* v, const float* sign, int n, float norm, bool inverse) {
  if (n == 16) {  // no stages between registers: the scaling (and inverse signs) in one pass
    __m512 x = _mm512_mul_ps(hadamard16(_mm512_loadu_ps(v), sign, inverse), _mm512_set1_ps(norm));
    if (inverse) x = _mm512_mul_ps(x, _mm512_loadu_ps(sign));
    _mm512_storeu_ps(v, x);
    return;
  }
  for (int i = 0; i < n; i += 16)
    _mm512_storeu_ps(v + i, hadamard16(_mm512_loadu_ps(v + i), sign + i, inverse));
  for (int h = 16; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; j += 16) {
        const __m512 a = _mm512_loadu_ps(v + j), b = _mm512_loadu_ps(v + j + h);
        _mm512_storeu_ps(v + j, _mm512_add_ps(a, b));
        _mm512_storeu_ps(v + j + h, _mm512_sub_ps(a, b));
      }
  const __m512 vn = _mm512_set1_ps(norm);
  for (int i = 0; i < n; i += 16) {
    __m512 x = _mm512_mul_ps(_mm512_loadu_ps(v + i), vn);
    if (inverse) x = _mm512_mul_ps(x, _mm512_loadu_ps(sign + i));
    _mm512_storeu_ps(v + i, x);
  }
}
}  // namespace

void hadamard_runs_lanes(float* v, const float* sign, int n, int runs, float norm, bool inverse) {
  for (int i = 0; i < runs; i++)
    hadamard_impl(v + size_t(i) * n, sign + size_t(i) * n, n, norm, inverse);
}

#else
int sr_round_lanes(float*, int, float, float, uint64_t, uint64_t, ElemFormat) { return 0; }
int sr_round_groups_lanes(float*, int, int, const GroupScale*, uint64_t, uint64_t, ElemFormat) {
  return 0;
}
int rne_round_groups_e2m1_lanes(float*, int, int, const GroupScale*) { return 0; }
void hadamard_runs_lanes(float*, const float*, int, int, float, bool) {}
void group_amax_lanes(const float*, int, int, uint32_t*) {}
#endif

}  // namespace tg::cpu
