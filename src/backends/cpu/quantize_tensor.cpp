// quantize_tensor: the per-tensor FP8 of the fp8 mode's linears (precision.mode=fp8,
// TensorScaling in src/backends/backend.h). Every value of an operand is taken at one scale s
// and rounded into E4M3 or E5M2 (nearest even, saturating: storage.h's round trips, equal to
// formats.h's encoder and decoder), then either scaled back (qdq_tensor_fp8: the operands of
// the exact path's fp32 GEMMs) or kept as the FP8 value itself in a bf16 code, exact
// (quantize_tensor_fp8: the operands of the bf16 GEMMs).
//
// Delayed scaling knows s before it reads the operand, so the amax this step reports and the
// results come out of one pass; current scaling derives s from the operand's own amax, which
// takes a pass of its own first. On the CPU these passes are bound by memory (from bf16, two
// bytes read and two written per value), so the number of passes is what counts: the separate
// amax pass of delayed scaling cost about as much as the rounding, and the AVX-512 lanes
// (quantize_tensor_lanes.cpp), though they round in half the instructions, gained little on a
// cold operand. The fp8 linears therefore quantize bf16 inputs and weights with delayed
// scales inside the GEMMs' packing instead (fp8_codes_serial on each packed panel, gemm_bf16.h's
// PackQuant); this file's passes remain for the output gradient, current scaling and the
// exact path. A non-finite value turns every result into NaN (the loss scaler then skips the
// step); the single pass learns it only at its end and overwrites what it wrote, which is as
// rare as an overflowed gradient.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops.h"
#include "quantize_lanes.h"
#include "src/numerics/formats.h"

namespace tg::cpu {

namespace {

// max |x[i]| as fp32 bits: |x|'s bits order as |x| does (inf above every finite value, NaNs
// above inf), so one integer max, which vectorises where a float max with NaN checks does not,
// gives the amax and (bits >= 0x7f800000) whether x holds a non-finite value. A max does not
// depend on the order, nor on the split across threads.
template <typename T>
uint32_t amax_bits(const T* x, size_t n) {
  uint32_t m = 0;
#pragma omp parallel for simd reduction(max : m) schedule(static)
  for (size_t i = 0; i < n; i++) {
    const uint32_t a = f32_bits(ld(x[i])) & 0x7fffffffu;
    m = a > m ? a : m;
  }
  return m;
}

// The amax a max of bits stands for: infinite when a value was not finite.
float amax_of(uint32_t bits) { return bits < 0x7f800000u ? bits_f32(bits) : INFINITY; }

// q's scale: the given one (delayed), or from the amax (current).
float scale_of(const TensorQuant& q, float amax) {
  return q.current ? fp8_scale_from_amax(amax, elem_format_max(q.format), q.margin) : q.scale;
}

// codes[i] = round(x[i] s) in F as a bf16 code: FP8 values have 3 (E4M3) or 2 (E5M2) mantissa
// bits and exponents in [-9, 8] / [-16, 15], well inside bf16's 7 bits and [-126, 127], so
// the top half of the fp32 value is the exact bf16 code. Returns amax_bits of x.
template <ElemFormat F, typename T>
uint32_t codes_loop(bf16* codes, const T* x, size_t n, float s) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < n; i++) {
    const float v = ld(x[i]);
    const uint32_t a = f32_bits(v) & 0x7fffffffu;
    m = a > m ? a : m;
    codes[i] = bf16{uint16_t(f32_bits(nearest_round_trip<F>(v * s)) >> 16)};
  }
  return m;
}

// The lanes' view of the values: bf16 codes as 16-bit words.
inline const uint16_t* lanes_src(const bf16* x) { return reinterpret_cast<const uint16_t*>(x); }
inline const float* lanes_src(const float* x) { return x; }

// codes_loop on one thread, through the lanes where the CPU has them.
template <ElemFormat F, typename T>
uint32_t codes_serial(bf16* codes, const T* x, size_t n, float s) {
  uint32_t lm = 0;
  const size_t done =
      fp8_codes_lanes(reinterpret_cast<uint16_t*>(codes), lanes_src(x), n, s, F, &lm);
  return std::max(lm, codes_loop<F>(codes + done, x + done, n - done, s));
}

// codes_loop over all of x, each part's range through the AVX-512 lanes where the CPU has them
// (quantize_tensor_lanes.cpp, the same bits; about twice as fast on a Xeon), the loop for the
// rest. The parts are whole 32-value runs; the max does not depend on the split.
template <ElemFormat F, typename T>
uint32_t codes_pass(bf16* codes, const T* x, size_t n, float s) {
  const size_t runs = n / 32;
  uint32_t m = 0;
#pragma omp parallel reduction(max : m) if (n >= kParallelMin)
  {
    const size_t nt = size_t(omp_get_num_threads()), id = size_t(omp_get_thread_num());
    const size_t i0 = runs * id / nt * 32, i1 = id + 1 == nt ? n : runs * (id + 1) / nt * 32;
    m = std::max(m, codes_serial<F>(codes + i0, x + i0, i1 - i0, s));
  }
  return m;
}

// x[i] = round(x[i] s) in F, times inv; returns amax_bits of x as it was.
template <ElemFormat F>
uint32_t qdq_pass(float* x, size_t n, float s, float inv) {
  uint32_t m = 0;
#pragma omp parallel for simd reduction(max : m) schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float v = x[i];
    const uint32_t a = f32_bits(v) & 0x7fffffffu;
    m = a > m ? a : m;
    x[i] = nearest_round_trip<F>(v * s) * inv;
  }
  return m;
}

// f(format tag) for E4M3, else E5M2 (the per-tensor recipes' two formats).
template <typename Fn>
uint32_t with_fp8_format(ElemFormat f, Fn&& fn) {
  if (f == ElemFormat::E4M3) return fn(std::integral_constant<ElemFormat, ElemFormat::E4M3>{});
  return fn(std::integral_constant<ElemFormat, ElemFormat::E5M2>{});
}

template <typename T>
float quantize_codes(bf16* codes, const T* x, size_t n, const TensorQuant& q, float* amax) {
  const float s = scale_of(q, q.current ? amax_of(amax_bits(x, n)) : 0.0f);
  const uint32_t m = with_fp8_format(
      q.format, [&](auto f) { return codes_pass<decltype(f)::value>(codes, x, n, s); });
  *amax = amax_of(m);
  // NaN codes (0x7fc0) when x was not finite: the step is skipped.
  if (m >= 0x7f800000u) std::fill(codes, codes + n, bf16{0x7fc0});
  return s;
}

}  // namespace

uint32_t fp8_codes_serial(uint16_t* codes, const uint16_t* x, size_t n, float s, ElemFormat f) {
  bf16* c = reinterpret_cast<bf16*>(codes);
  const bf16* v = reinterpret_cast<const bf16*>(x);
  return with_fp8_format(f, [&](auto t) { return codes_serial<decltype(t)::value>(c, v, n, s); });
}

float qdq_tensor_fp8(float* x, size_t n, const TensorQuant& q, float* amax) {
  const float s = scale_of(q, q.current ? amax_of(amax_bits(x, n)) : 0.0f), inv = 1.0f / s;
  const uint32_t m =
      with_fp8_format(q.format, [&](auto f) { return qdq_pass<decltype(f)::value>(x, n, s, inv); });
  *amax = amax_of(m);
  if (m >= 0x7f800000u) std::fill(x, x + n, NAN);
  return s;
}

float quantize_tensor_fp8(bf16* codes, const float* x, size_t n, const TensorQuant& q,
                          float* amax) {
  return quantize_codes(codes, x, n, q, amax);
}

// bf16 widens to fp32 exactly, so reading it directly gives the codes and amax of its fp32
// copy without writing that copy.
float quantize_tensor_fp8(bf16* codes, const bf16* x, size_t n, const TensorQuant& q, float* amax) {
  return quantize_codes(codes, x, n, q, amax);
}

}  // namespace tg::cpu
