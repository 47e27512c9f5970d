// quantize_tensor_lanes: the per-tensor FP8 codes of quantize_tensor.cpp in AVX-512 lanes, 32
// values a step, equal to storage.h's nearest_round_trip bit for bit
// (tests/backends/test_quantize_tensor.cpp: every bf16 input at many scales, random and
// adversarial fp32 inputs).
//
// The scalar round trip rounds the fp32 bits with an add-and-mask in the normal range and by
// rint at the subnormal step below it, then picks one and clamps: about twenty vector
// instructions per 16 values once the compiler has vectorised it. Here one rounding covers
// both ranges: with e = max(exponent of |v|, the format's smallest normal exponent), v 2^-e is
// exact (a power of two), lies in [1, 2) for normal values and below 1 for the format's
// subnormals, and rounding it to M fraction bits (vrndscaleps, nearest even) rounds v to the
// step 2^(e - M): M mantissa bits in the normal range, the subnormal step below it; 2^e back
// is exact again. Then the clamp to the format's largest value, keeping the sign (vrangeps),
// as the scalar's. v is clamped to 2^16 first (past every FP8 maximum, so the result is the
// same): the exponent of an infinite v (a finite x times a huge scale) would turn the scaling
// into NaN. NaN inputs give some value here; the caller overwrites the whole tensor then.
// The codes are the results' top halves (exact in bf16), two registers' worth picked by one
// permute; bf16 inputs widen by interleaving with zeros, which the permute's order undoes.
#include "quantize_lanes.h"

#include "avx512_intrinsics.h"
#include "src/numerics/elem_format.h"

namespace tg::cpu {

#ifdef TG_QUANT_AVX512
#define TG_TARGET_LANES __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

namespace {

// min(|a|, |b|) with a's sign: vrangeps's "min absolute", sign from the first operand.
constexpr int kMinAbsSignA = 0x02;
// vrndscaleps: round to nearest even at M fraction bits (imm bits 7:4), no precision exception.
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// The FP8 round trip of v (fp32 lanes) in a format of kMant mantissa bits whose smallest
// normal exponent is kMinExp, saturating at fmax.
template <int kMant, int kMinExp>
TG_TARGET_LANES inline __m512 round_fp8(__m512 v, __m512 fmax) {
  v = _mm512_range_ps(v, _mm512_set1_ps(65536.0f), kMinAbsSignA);
  const __m512 e = _mm512_max_ps(_mm512_getexp_ps(v), _mm512_set1_ps(float(kMinExp)));
  __m512 y = _mm512_scalef_ps(v, _mm512_sub_ps(_mm512_setzero_ps(), e));
  y = _mm512_roundscale_ps(y, (kMant << 4) | kRoundNearest);
  return _mm512_range_ps(_mm512_scalef_ps(y, e), fmax, kMinAbsSignA);
}

// 32 codes from two registers of results: word 2i + 1 (a dword's top half) of lo, then of hi,
// at the output positions `order` gives (its entry j: the word of the 64 that becomes code j).
TG_TARGET_LANES inline void store_codes(uint16_t* out, __m512 lo, __m512 hi, __m512i order) {
  _mm512_storeu_si512(
      out, _mm512_permutex2var_epi16(_mm512_castps_si512(lo), order, _mm512_castps_si512(hi)));
}

// Codes j of 32 from results in order: the top half of dword j of lo (j < 16), of hi after.
TG_TARGET_LANES inline __m512i straight_order() {
  alignas(64) uint16_t idx[32];
  for (int j = 0; j < 32; j++) idx[j] = uint16_t(j < 16 ? 2 * j + 1 : 32 + 2 * (j - 16) + 1);
  return _mm512_load_si512(idx);
}

// The same after unpacklo / unpackhi of 32 bf16 values with zeros: in each 128-bit lane L,
// lo holds values 8L..8L+3 and hi values 8L+4..8L+7, each the top half of its dword.
TG_TARGET_LANES inline __m512i unpacked_order() {
  alignas(64) uint16_t idx[32];
  for (int j = 0; j < 32; j++) {
    const int lane = j / 8, r = j % 8, dword = 4 * lane + r % 4;
    idx[j] = uint16_t((r < 4 ? 0 : 32) + 2 * dword + 1);
  }
  return _mm512_load_si512(idx);
}

template <int kMant, int kMinExp>
TG_TARGET_LANES size_t codes_from_bf16(uint16_t* codes, const uint16_t* x, size_t n, float s,
                                       float fmax, uint32_t* amax_bits) {
  const __m512 vs = _mm512_set1_ps(s), vmax = _mm512_set1_ps(fmax);
  const __m512i order = unpacked_order(), magnitude = _mm512_set1_epi16(0x7fff);
  __m512i m = _mm512_setzero_si512();  // max |x| as 16-bit codes (bf16 orders as fp32 does)
  const size_t n32 = n / 32 * 32;
  for (size_t i = 0; i < n32; i += 32) {
    const __m512i raw = _mm512_loadu_si512(x + i);
    m = _mm512_max_epu16(m, _mm512_and_si512(raw, magnitude));
    const __m512 lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), raw));
    const __m512 hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), raw));
    store_codes(codes + i, round_fp8<kMant, kMinExp>(_mm512_mul_ps(lo, vs), vmax),
                round_fp8<kMant, kMinExp>(_mm512_mul_ps(hi, vs), vmax), order);
  }
  // The widest 16-bit lane, widened: the fp32 bits of the largest |x|.
  const __m512i m32 =
      _mm512_max_epu32(_mm512_srli_epi32(m, 16), _mm512_and_si512(m, _mm512_set1_epi32(0xffff)));
  *amax_bits = uint32_t(_mm512_reduce_max_epu32(m32)) << 16;
  return n32;
}

template <int kMant, int kMinExp>
TG_TARGET_LANES size_t codes_from_f32(uint16_t* codes, const float* x, size_t n, float s,
                                      float fmax, uint32_t* amax_bits) {
  const __m512 vs = _mm512_set1_ps(s), vmax = _mm512_set1_ps(fmax);
  const __m512i order = straight_order(), magnitude = _mm512_set1_epi32(0x7fffffff);
  __m512i m = _mm512_setzero_si512();
  const size_t n32 = n / 32 * 32;
  for (size_t i = 0; i < n32; i += 32) {
    const __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + i + 16);
    m = _mm512_max_epu32(m, _mm512_and_si512(a, magnitude));
    m = _mm512_max_epu32(m, _mm512_and_si512(b, magnitude));
    store_codes(codes + i,
                round_fp8<kMant, kMinExp>(_mm512_mul_ps(_mm512_castsi512_ps(a), vs), vmax),
                round_fp8<kMant, kMinExp>(_mm512_mul_ps(_mm512_castsi512_ps(b), vs), vmax), order);
  }
  *amax_bits = uint32_t(_mm512_reduce_max_epu32(m));
  return n32;
}

// The row's mantissa width, smallest normal exponent and largest value.
template <ElemFormat F, typename T>
size_t codes_lanes(uint16_t* codes, const T* x, size_t n, float s, uint32_t* amax_bits) {
  constexpr ElemFormatInfo r = elem_format_info(F);
  constexpr int kMant = r.mantissa_bits, kMinExp = 1 - r.bias;
  if constexpr (sizeof(T) == 2)
    return codes_from_bf16<kMant, kMinExp>(codes, x, n, s, r.max, amax_bits);
  else
    return codes_from_f32<kMant, kMinExp>(codes, x, n, s, r.max, amax_bits);
}

template <typename T>
size_t codes_lanes(uint16_t* codes, const T* x, size_t n, float s, ElemFormat f,
                   uint32_t* amax_bits) {
  *amax_bits = 0;
  if (!quantize_lanes_available()) return 0;
  if (f == ElemFormat::E4M3) return codes_lanes<ElemFormat::E4M3>(codes, x, n, s, amax_bits);
  return codes_lanes<ElemFormat::E5M2>(codes, x, n, s, amax_bits);
}

}  // namespace

size_t fp8_codes_lanes(uint16_t* codes, const uint16_t* x, size_t n, float s, ElemFormat f,
                       uint32_t* amax_bits) {
  return codes_lanes(codes, x, n, s, f, amax_bits);
}

size_t fp8_codes_lanes(uint16_t* codes, const float* x, size_t n, float s, ElemFormat f,
                       uint32_t* amax_bits) {
  return codes_lanes(codes, x, n, s, f, amax_bits);
}

#else  // no AVX-512 in this build: the callers' scalar loops do everything

size_t fp8_codes_lanes(uint16_t*, const uint16_t*, size_t, float, ElemFormat, uint32_t* amax_bits) {
  *amax_bits = 0;
  return 0;
}
size_t fp8_codes_lanes(uint16_t*, const float*, size_t, float, ElemFormat, uint32_t* amax_bits) {
  *amax_bits = 0;
  return 0;
}

#endif

}  // namespace tg::cpu
