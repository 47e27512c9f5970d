// moment_block.h: Adam moments stored as FP8 codes with one scale per block of elements
// (precision.state.adam_m / adam_v = fp8-e4m3 or fp8-e5m2; docs/precision.md, "FP8 moments"),
// the encoder and decoder both backends run (__host__ __device__, like moment_format.h), so
// that the CPU is the CUDA kernel's bit-exact oracle.
//
// A block is `block` consecutive elements of the flat parameter vector (the last one may be
// shorter). Its values are y = m, or y = sqrt(v) for the second moment (as in fp16:
// moment_format.h says why). Per block:
//   n  the normalizer, every |y| / n <= 1: the block's amax (scale format fp32), or the
//      smallest power of two >= amax (e8m0, the MX convention: a scale that is exact to apply)
//   k  COAT's dynamic range expansion (Xi et al. 2024, "COAT: Compressing Optimizer states
//      and Activation for memory-efficient FP8 Training"), when enabled: the codes hold
//      (|y| / n)^k, which spreads a block whose values span a narrow range over more of
//      FP8's binades; decoding takes the k-th root, so a relative rounding error e of the
//      code becomes about e / k in y. COAT picks a real k per group; here k is the largest of
//      4, 2, 1 that keeps the block's smallest nonzero value a normal FP8 number. Powers of two
//      make the transform squares and square roots, which IEEE rounds exactly once on every
//      target, so the CPU and the GPU agree bit for bit (a real pow() does not).
//   code = fp8((sign y) (|y| / n)^k * fmax), rounded to nearest even, saturating.
// Decoding: y = sign * (|fp8 value| / fmax)^(1/k) * n, then v = y^2.
//
// Storage: one byte tensor per moment, the codes of its `count` elements first, then, from
// byte moment_meta_offset(count), each block's meta as fp32 words: n (and k when expanding).
// Blocks lie on the grid of the flat parameter vector, so ZeRO-1 shards (whole blocks each,
// src/model/model.h) and checkpoints of any sharding cut no block.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "moment_format.h"

namespace tg {

inline constexpr int kMomentBlockMin = 16, kMomentBlockMax = 1024;

// An FP8 moment's element format (its dtype E4M3 or E5M2) and that format's range, from the
// element formats' table (elem_format.h).
TG_HD inline ElemFormat moment_elem_format(const MomentFormat& f) {
  return f.dtype == DType::E4M3 ? ElemFormat::E4M3 : ElemFormat::E5M2;
}
TG_HD inline float moment_fp8_max(const MomentFormat& f) {
  return elem_format_max(moment_elem_format(f));
}
TG_HD inline float moment_fp8_min_normal(const MomentFormat& f) {
  return elem_format_info(moment_elem_format(f)).min_normal;
}

// One block's scale: its normalizer n and expansion power k (1, 2 or 4).
struct MomentBlockScale {
  float n = 1.f;
  int k = 1;
};

// fp32 words of meta per block: n, and k when expanding.
TG_HD inline int moment_meta_words(const MomentFormat& f) { return f.expand ? 2 : 1; }
// Byte offset of the meta in a tensor of `count` codes (16-byte aligned).
TG_HD inline size_t moment_meta_offset(size_t count) { return (count + 15) / 16 * 16; }
TG_HD inline size_t moment_blocks(size_t count, int block) {
  return (count + size_t(block) - 1) / size_t(block);
}
// Bytes of `count` elements of a blocked moment: codes, padding, meta.
TG_HD inline size_t moment_blocked_bytes(size_t count, const MomentFormat& f) {
  return moment_meta_offset(count) +
         moment_blocks(count, f.block) * size_t(moment_meta_words(f)) * sizeof(float);
}

// The value a block's codes stand for: m itself, or sqrt(v).
TG_HD inline float moment_block_value(float x, const MomentFormat& f) {
  return f.sqrt ? sqrtf(x) : x;
}

// The scale of a block whose values have largest magnitude amax and smallest nonzero
// magnitude amin (both from moment_block_value; max and min do not depend on the order of
// reduction). An all-zero or non-finite block keeps n = 1, k = 1.
TG_HD inline MomentBlockScale moment_block_scale(float amax, float amin, const MomentFormat& f) {
  MomentBlockScale s;
  if (!(amax > 0.f) || !(amax <= 3.4028234663852886e38f)) return s;
  s.n = f.pow2 ? e8m0_to_f32(f32_to_e8m0(amax, true, true)) : amax;
  if (f.expand && amin > 0.f) {
    const float fmax = moment_fp8_max(f), lo = moment_fp8_min_normal(f);
    const float u = amin / s.n, u2 = u * u, u4 = u2 * u2;
    s.k = u4 * fmax >= lo ? 4 : u2 * fmax >= lo ? 2 : 1;
  }
  return s;
}

TG_HD inline uint8_t moment_encode8(float y, MomentBlockScale s, const MomentFormat& f) {
  const float u = fabsf(y) / s.n;
  const float z = s.k == 4 ? (u * u) * (u * u) : s.k == 2 ? u * u : u;
  const float q = copysignf(z * moment_fp8_max(f), y);
  return f.dtype == DType::E4M3 ? f32_to_e4m3(q, true) : f32_to_e5m2(q, true);
}

// The moment (m, or v itself) a code of a block with scale s stands for.
TG_HD inline float moment_decode8(uint8_t code, MomentBlockScale s, const MomentFormat& f) {
  const float c = f.dtype == DType::E4M3 ? e4m3_to_f32(code) : e5m2_to_f32(code);
  const float z = fabsf(c) / moment_fp8_max(f);
  const float u = s.k == 4 ? sqrtf(sqrtf(z)) : s.k == 2 ? sqrtf(z) : z;
  const float y = copysignf(u * s.n, c);
  return f.sqrt ? y * y : y;
}

TG_HD inline void moment_meta_store(float* meta, MomentBlockScale s, const MomentFormat& f) {
  meta[0] = s.n;
  if (f.expand) meta[1] = float(s.k);
}
// A block's scale from its meta (a k other than 2 or 4 reads as 1).
TG_HD inline MomentBlockScale moment_meta_load(const float* meta, const MomentFormat& f) {
  MomentBlockScale s;
  s.n = meta[0];
  if (f.expand) s.k = meta[1] == 4.f ? 4 : meta[1] == 2.f ? 2 : 1;
  return s;
}

// A whole block on one thread (the CPU; the CUDA kernel spreads it over a warp): the moments
// x[0..len) into codes q and the block's meta.
TG_HD inline void moment_encode_block(const float* x, int len, const MomentFormat& f, uint8_t* q,
                                      float* meta) {
  float amax = 0.f, amin = INFINITY;
  for (int i = 0; i < len; i++) {
    const float a = fabsf(moment_block_value(x[i], f));
    amax = fmaxf(amax, a);
    if (a > 0.f) amin = fminf(amin, a);
  }
  const MomentBlockScale s = moment_block_scale(amax, amin, f);
  moment_meta_store(meta, s, f);
  for (int i = 0; i < len; i++) q[i] = moment_encode8(moment_block_value(x[i], f), s, f);
}

TG_HD inline void moment_decode_block(const uint8_t* q, const float* meta, int len,
                                      const MomentFormat& f, float* x) {
  const MomentBlockScale s = moment_meta_load(meta, f);
  for (int i = 0; i < len; i++) x[i] = moment_decode8(q[i], s, f);
}

// `count` moments, block after block (host code: uploads, checkpoints, telemetry, tests).
inline void moment_encode_blocks(const float* x, size_t count, const MomentFormat& f, uint8_t* q,
                                 float* meta) {
  const size_t block = size_t(f.block), words = size_t(moment_meta_words(f));
  for (size_t i0 = 0; i0 < count; i0 += block)
    moment_encode_block(x + i0, int(count - i0 < block ? count - i0 : block), f, q + i0,
                        meta + i0 / block * words);
}
inline void moment_decode_blocks(const uint8_t* q, const float* meta, size_t count,
                                 const MomentFormat& f, float* x) {
  const size_t block = size_t(f.block), words = size_t(moment_meta_words(f));
  for (size_t i0 = 0; i0 < count; i0 += block)
    moment_decode_block(q + i0, meta + i0 / block * words,
                        int(count - i0 < block ? count - i0 : block), f, x + i0);
}

}  // namespace tg
