// moment_format.h: how an Adam moment (m or v) is stored, and the one encoder and decoder
// both backends store and load it through.
//
// Header-only and __host__ __device__ like formats.h: the CPU's AdamW
// (src/backends/cpu/adamw.cpp) and the CUDA kernel (kernels/adamw.cuh) turn the same fp32 moment
// into the same code, so the CPU stays the kernel's bit-exact oracle in every format. A
// MomentFormat is data, made by the registry of precision.state.* values
// (src/numerics/state_format.h); nothing here reads a name.
//
//   dtype       F32 (the value itself; F64 in the gradient checks' fp64 models), BF16 or F16
//   stochastic  the store rounds stochastically with sr_hash(seed, index) (else nearest even)
//   sqrt        the code holds sqrt(value): the second moment in fp16
//   scale       the code holds (sqrt ? sqrt(value) : value) * scale, a power of two, so that
//               multiplying by it and by 1 / scale is exact
//
// fp16 moments (as NVIDIA Transformer Engine's FusedAdam offers, exp_avg_dtype /
// exp_avg_sq_dtype = float16): fp16 has 5 exponent bits, normal values 2^-14 .. 65504 and
// subnormals down to 2^-24. Adam's moments do not live there: m is a gradient-sized number
// (about 1e-10 .. 1 after clipping) and v its square (1e-20 .. 1), so v stored as it is would
// flush most of the model's second moments to zero (and m / (sqrt(0) + eps) blows the update
// up by 1 / eps), while an unclipped large gradient would overflow v to inf. Two fixed,
// exact transforms bring both into range:
//   - v is stored as sqrt(v). That halves its exponent range back to the gradients' own
//     (sqrt(v) is the RMS of the recent gradients), the range m has too; squaring the 11-bit
//     code on load is exact in fp32, so nothing is lost beyond the store's rounding.
//   - both are scaled by 2^12 (kF16MomentScale): fp16's normal range then covers
//     [2^-26, 16) = [1.5e-8, 16) of the moments, and its subnormals reach 2^-36 = 1.5e-11
//     with a spacing of 2^-36. The update is m / (sqrt(v / c2) + eps): every error in m or
//     sqrt(v) counts against that denominator, which is at least eps (1e-8 = 2^-26.6 by
//     default), so an absolute error of at most 2^-37 is at most 2^-10.4 of the denominator,
//     no worse than fp16's own 2^-11 relative rounding of the normal values. The top, 16,
//     is 4 binades above the largest moment of a clipped run (grad_clip <= 1 bounds every
//     |g|, so |m| and sqrt(v) are <= 1); a larger value saturates at 65504 / 2^12 instead of
//     becoming inf, so the update stays finite (|m| / sqrt(v) <= about 1 either way).
// Transformer Engine scales each fp16 state tensor by its own amax instead (a second pass
// over the tensor per step and a scale per tensor to keep and checkpoint); with sqrt(v) the
// fixed window already holds every value that matters to the update, and the store stays
// one pass with nothing but the codes to checkpoint. With optim.eps far below 1e-8 the
// smallest moments keep less relative precision (the window's floor does not move).
// bf16 keeps fp32's exponent range: its m and v are stored as they are (scale 1, no sqrt).
#pragma once
#include <cmath>
#include <cstdint>

#include "formats.h"
#include "src/base/common.h"

namespace tg {

inline constexpr float kF16MomentScale = 4096.f;  // 2^12, see above
inline constexpr float kF16Max = 65504.f;

struct MomentFormat {
  DType dtype = DType::F32;
  bool stochastic = false;
  bool sqrt = false;
  float scale = 1.f;
  // FP8 moments (dtype E4M3 or E5M2) only: elements per scale block, the block's normalizer
  // as a power of two (e8m0) instead of its amax, and COAT's range expansion (below).
  int block = 0;
  bool pow2 = false;
  bool expand = false;
};

// Adam's two moments.
struct MomentFormats {
  MomentFormat m, v;
};

// Whether the moment is stored as the value itself (fp32, fp64): no encoding at all.
TG_HD inline bool moment_is_plain(const MomentFormat& f) {
  return f.dtype == DType::F32 || f.dtype == DType::F64;
}
// Whether the moment is stored as FP8 codes with a scale per block (moment_block.h).
TG_HD inline bool moment_is_blocked(const MomentFormat& f) {
  return f.dtype == DType::E4M3 || f.dtype == DType::E5M2;
}

// The fp32 value a 16-bit code is rounded from: sqrt'ed and scaled, and in fp16 clamped to
// the largest finite code (comparisons, so that a NaN stays NaN).
TG_HD inline float moment_scaled(float x, const MomentFormat& f) {
  float y = f.sqrt ? sqrtf(x) : x;
  y = y * f.scale;
  if (f.dtype == DType::F16) y = y > kF16Max ? kF16Max : (y < -kF16Max ? -kF16Max : y);
  return y;
}

// The 16-bit code of moment value x (bf16 or fp16 per f.dtype); rand_bits are used by
// stochastic formats only (sr_hash(seed, index)).
TG_HD inline uint16_t moment_encode16(float x, const MomentFormat& f, uint32_t rand_bits) {
  const float y = moment_scaled(x, f);
  if (f.dtype == DType::BF16) return f.stochastic ? f32_to_bf16_sr(y, rand_bits) : f32_to_bf16(y);
  return f.stochastic ? f32_to_f16_sr(y, rand_bits) : f32_to_f16(y);
}

// The moment value a 16-bit code holds, exactly (scale is a power of two; the square of an
// fp16 value fits in fp32's 24 bits).
TG_HD inline float moment_decode16(uint16_t code, const MomentFormat& f) {
  const float y = (f.dtype == DType::BF16 ? bf16_to_f32(code) : f16_to_f32(code)) * (1.f / f.scale);
  return f.sqrt ? y * y : y;
}

}  // namespace tg
