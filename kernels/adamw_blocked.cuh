// adamw_blocked.cuh: AdamW when either Adam moment is stored as FP8 codes with a scale per
// block of elements (precision.state.adam_m / adam_v = fp8-*; src/numerics/moment_block.h).
// One warp per scale block: each lane decodes, updates (adamw_math.h, as adamw.cuh) and holds
// the block's elements lane, lane + 32, ...; the warp then reduces the block's largest and
// smallest nonzero magnitudes (max and min: exact, so the order of the shuffles does not
// matter), every lane encodes its elements with the block's new scale, and lane 0 stores the
// meta. The other moment, when it is not blocked, is stored per element as adamw.cuh does.
// The CPU's adamw_block_loop (src/backends/cpu/adamw.cpp) runs the same encoder on one
// thread per block: the bits agree (tests/cuda/kernels_emulated.cpp).
// Weight decay per element from the call's DecayRanges (the call spans a whole shard); the
// device loss scaler's factor and skip are read from d when given (as adamw_device_kernel); the
// weights' amaxes taken as adamw.cuh's kernels take them (SegmentAmax).
#pragma once
#include "loss_scale.cuh"
#include "src/numerics/moment_block.h"

namespace tg::gpu {

constexpr int kBlockedPerLane = kMomentBlockMax / 32;

// A moment as the kernel reads it: storage, FP8 blocks' meta (or null), format, SR seed.
struct MomentRef {
  void* data;
  float* meta;
  MomentFormat f;
  uint64_t seed;
};

__device__ __forceinline__ float warp_min(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float moment_at(const MomentRef& r, size_t i, MomentBlockScale s) {
  if (moment_is_blocked(r.f)) return moment_decode8(static_cast<const uint8_t*>(r.data)[i], s, r.f);
  if (moment_is_plain(r.f)) return static_cast<const float*>(r.data)[i];
  return moment_decode16(static_cast<const uint16_t*>(r.data)[i], r.f);
}

// The lane's updated values x[k] of elements i0 + lane + 32 k (< i0 + len) stored back; block
// b's new scale reduced over the warp (every lane of the warp calls this).
__device__ __forceinline__ void moment_store_warp(const MomentRef& r, size_t b, size_t i0,
                                                  int len, const float* x, uint64_t offset,
                                                  int lane) {
  if (!moment_is_blocked(r.f)) {
    for (int k = 0; lane + 32 * k < len; k++) {
      const size_t i = i0 + size_t(lane + 32 * k);
      if (moment_is_plain(r.f))
        static_cast<float*>(r.data)[i] = x[k];
      else
        static_cast<uint16_t*>(r.data)[i] =
            moment_encode16(x[k], r.f, r.f.stochastic ? sr_hash(r.seed, offset + i) : 0u);
    }
    return;
  }
  float amax = 0.f, amin = INFINITY;
  for (int k = 0; lane + 32 * k < len; k++) {
    const float a = fabsf(moment_block_value(x[k], r.f));
    amax = fmaxf(amax, a);
    if (a > 0.f) amin = fminf(amin, a);
  }
  amax = warp_max(amax);
  amin = warp_min(amin);
  const MomentBlockScale s = moment_block_scale(amax, amin, r.f);
  for (int k = 0; lane + 32 * k < len; k++)
    static_cast<uint8_t*>(r.data)[i0 + size_t(lane + 32 * k)] =
        moment_encode8(moment_block_value(x[k], r.f), s, r.f);
  if (lane == 0) moment_meta_store(r.meta + b * size_t(moment_meta_words(r.f)), s, r.f);
}

__device__ __forceinline__ MomentBlockScale block_scale_of(const MomentRef& r, size_t b) {
  if (!moment_is_blocked(r.f)) return MomentBlockScale{};
  return moment_meta_load(r.meta + b * size_t(moment_meta_words(r.f)), r.f);
}

// The weights' amax of the scale block at i0 (len elements; the lane's largest |x| bits wmax):
// one warp reduction where the block lies in one word's segment, else (a segment ends inside
// it, or it lies outside the ranges) each element to its own word, if any. Every lane of the warp
// calls it.
template <typename P>
__device__ __forceinline__ void block_weights_amax(const SegmentAmax& amax, const P* params,
                                                   size_t i0, int len, unsigned wmax, int lane) {
  unsigned* first = segment_word(amax, i0);
  if (first && first == segment_word(amax, i0 + size_t(len) - 1)) return segment_amax(first, wmax);
  for (int j = 0; lane + 32 * j < len; j++) {
    const size_t i = i0 + size_t(lane + 32 * j);
    if (unsigned* word = segment_word(amax, i)) atomicMax(word, abs_bits(params[i]));
  }
}

// blockDim.x a multiple of 32; warps stride over the scale blocks.
template <typename P>
__global__ void adamw_blocked_kernel(P* params, MasterPtrs w, const P* grads, MomentRef m,
                                     MomentRef v, size_t n, AdamWParams a, DecayRanges decay,
                                     SegmentAmax amax, const LossScaleDevice* d) {
  if (d && d->step.skip) return weights_amax_loop<1>(params, n, amax);
  const float gs = d ? d->step.grad_scale : a.grad_scale;
  const int block = moment_is_blocked(m.f) ? m.f.block : v.f.block, lane = threadIdx.x % 32;
  const AdamWConsts<float> k{a.beta1, a.beta2, a.c1, a.c2, a.lr, a.eps, a.weight_decay};
  AdamWConsts<float> k0 = k;
  k0.wd = 0.f;
  const size_t warps = size_t(gridDim.x) * (blockDim.x / 32), blocks = moment_blocks(n, block);
  for (size_t b = blockIdx.x * size_t(blockDim.x / 32) + threadIdx.x / 32; b < blocks;
       b += warps) {
    const size_t i0 = b * size_t(block);
    const int len = int(n - i0 < size_t(block) ? n - i0 : size_t(block));
    const MomentBlockScale sm = block_scale_of(m, b), sv = block_scale_of(v, b);
    float mm[kBlockedPerLane], vv[kBlockedPerLane];
    unsigned wmax = 0;  // the lane's written weights' largest |x| bits
    for (int j = 0; lane + 32 * j < len; j++) {
      const size_t i = i0 + size_t(lane + 32 * j);
      mm[j] = moment_at(m, i, sm);
      vv[j] = moment_at(v, i, sv);
      float x = load_master(params, w, i);
      adamw_math(ld(grads[i]) * gs, mm[j], vv[j], x, decays_at(decay, i) ? k : k0);
      store_master(params, w, i, x, a);
      wmax = max_bits(wmax, abs_bits(params[i]));
    }
    if (amax.n) block_weights_amax(amax, params, i0, len, wmax, lane);
    moment_store_warp(m, b, i0, len, mm, a.offset, lane);
    moment_store_warp(v, b, i0, len, vv, a.offset, lane);
  }
}

}  // namespace tg::gpu
