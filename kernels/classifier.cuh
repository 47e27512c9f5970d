// classifier.cuh: fused softmax + cross-entropy + its gradient, one block per row of
// logits(N, Vp) (fp32), over the first V entries:
//   loss[n] = logsumexp(z) - z[target], from the fp32 logits
//   when dloss != 0: g[i] = dloss * (softmax(z)[i] - [i == target]) in fp32, rounded once to
//   G (fp32 in place; bf16 / fp16, the model's compute type, over the first half of the row's
//   fp32 bytes: Backend::classifier, dlogits_view), 0 in the padding V..Vp-1 -- the
//   probabilities never get a buffer of their own, and the lm_head's backward GEMMs read G.
// classifier_smem_kernel, wherever the row's V fp32 logits fit a block's dynamic shared
// memory (GPT-2's V 50257: 201 KB of an H100's or H200's 227 KiB): the row read from global
// memory once, into shared memory, with its max; each exponential computed once over the
// staged row and kept in its logit's place, with their sum; the gradient written from them.
// Global memory sees the row read once and G written once, the minimum.
// classifier_kernel, for rows too wide to stage: two block reductions (max, then sum of exp)
// and one pass writing the gradient, each reading the row from global memory.
#pragma once
#include "common.cuh"

namespace tg::gpu {

// The smem kernel's static shared memory is under this (the launcher adds it to the dynamic).
inline constexpr size_t kClassifierStaticSmem = 256;
// Its block: at GPT-2's 201 KB of shared memory one block per SM, so as many threads (loads in
// flight) as a block may have; the launch bounds keep its registers within 64 a thread.
inline constexpr int kClassifierThreads = 1024;

// Copies z[0, V) into s and returns this thread's max of it: 16-byte packs where the launcher
// found the row aligned (kVec), then the scalars the packs leave.
template <bool kVec>
__device__ __forceinline__ float classifier_stage(float* s, const float* z, int V) {
  float m = -INFINITY;
  int i0 = 0;
  if constexpr (kVec) {
    const int packs = V / 4;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack16<float> x = load16(z + 4 * size_t(p));
      store16(s + 4 * p, x);
      for (int k = 0; k < 4; k++) m = fmaxf(m, x.v[k]);
    }
    i0 = 4 * packs;
  }
  for (int i = i0 + threadIdx.x; i < V; i += blockDim.x) {
    const float x = z[i];
    s[i] = x;
    m = fmaxf(m, x);
  }
  return m;
}

// Replaces each staged logit by exp(z - m) and returns this thread's sum of them. Each entry
// has one owner here, which reads the target's logit (into *zt) before overwriting it.
template <bool kVec>
__device__ __forceinline__ float classifier_exp(float* s, int V, float m, int tgt, float* zt) {
  float sum = 0;
  int i0 = 0;
  if constexpr (kVec) {
    const int packs = V / 4;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      Pack16<float> x = load16(s + 4 * p);
      for (int k = 0; k < 4; k++) {
        if (4 * p + k == tgt) *zt = x.v[k];
        x.v[k] = expf(x.v[k] - m);
        sum += x.v[k];
      }
      store16(s + 4 * p, x);
    }
    i0 = 4 * packs;
  }
  for (int i = i0 + threadIdx.x; i < V; i += blockDim.x) {
    if (i == tgt) *zt = s[i];
    const float e = expf(s[i] - m);
    s[i] = e;
    sum += e;
  }
  return sum;
}

// g[0, Vp) from the exponentials e[0, V) and 1 / their sum: packs of G where aligned (kVec).
template <typename G, bool kVec>
__device__ __forceinline__ void classifier_grad(G* g, const float* e, int V, int Vp, int tgt,
                                                float dloss, float inv) {
  auto val = [&](int i) { return i < V ? dloss * (e[i] * inv - (i == tgt ? 1.f : 0.f)) : 0.f; };
  int i0 = 0;
  if constexpr (kVec) {
    constexpr int kN = Pack16<G>::N;
    const int packs = Vp / kN;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      Pack16<G> o;
      for (int k = 0; k < kN; k++) o.v[k] = st<G>(val(kN * p + k));
      store16(g + kN * size_t(p), o);
    }
    i0 = kN * packs;
  }
  for (int i = i0 + threadIdx.x; i < Vp; i += blockDim.x) g[i] = st<G>(val(i));
}

// The row in dynamic shared memory (V floats, 16-byte aligned). Every global read (the row,
// the target) comes before the first barrier, every global write after the last, so G may
// overlap the row's bytes in any way. The target is read once per row (by thread 0), not
// per warp; an out-of-range target leaves the loss NaN.
template <typename G, bool kVec>
__global__ void __launch_bounds__(kClassifierThreads)
    classifier_smem_kernel(const float* logits, float* losses, const int32_t* targets, G* dlogits,
                           size_t ld, float dloss, int V, int Vp) {
  __shared__ float shared[32];
  __shared__ int tgt_s;
  __shared__ float zt;
  float* s = dynamic_smem<float>();
  const int n = blockIdx.x;
  if (threadIdx.x == 0) {
    tgt_s = targets[n];
    zt = NAN;
  }
  const float m = block_reduce<true>(classifier_stage<kVec>(s, logits + size_t(n) * Vp, V), shared);
  const int tgt = tgt_s;
  const float sum = block_reduce<false>(classifier_exp<kVec>(s, V, m, tgt, &zt), shared);
  if (threadIdx.x == 0) losses[n] = (m + logf(sum)) - zt;
  if (dloss == 0.f) return;
  classifier_grad<G, kVec>(dlogits + size_t(n) * ld, s, V, Vp, tgt, dloss, 1.f / sum);
}

// dlogits: row n at dlogits + n * ld; it may be the logits' own memory (no __restrict__).
template <typename G>
__global__ void classifier_kernel(const float* logits, float* losses, const int32_t* targets,
                                  G* dlogits, size_t ld, float dloss, int V, int Vp) {
  __shared__ float shared[32];
  const int n = blockIdx.x;
  const float* z = logits + size_t(n) * Vp;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, z[i]);
  m = block_reduce<true>(m, shared);
  float s = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(z[i] - m);
  s = block_reduce<false>(s, shared);
  const int tgt = targets[n];
  const float zt = z[tgt];  // read by every thread before anyone overwrites it
  __syncthreads();
  if (threadIdx.x == 0) losses[n] = (m + logf(s)) - zt;
  if (dloss == 0.f) return;
  G* g = dlogits + size_t(n) * ld;
  const float inv = 1.f / s;
  // Chunks of blockDim.x entries, every thread through every chunk (the barriers). In place
  // (fp32), each thread writes only the entry it read. A 16-bit row over the fp32 row's first
  // half: chunk c's stores cover fp32 entries [c B / 2, (c + 1) B / 2) (B = blockDim.x), read
  // by other threads in chunks up to c, so every thread reads its entry of chunk c before the
  // barrier and stores after it; chunk c + 1's reads lie beyond chunk c's stores.
  for (int base = 0; base < Vp; base += blockDim.x) {
    const int i = base + threadIdx.x;
    float v = 0.f;
    if (i < V) v = dloss * (expf(z[i] - m) * inv - (i == tgt ? 1.f : 0.f));
    if constexpr (sizeof(G) < sizeof(float)) __syncthreads();
    if (i < Vp) g[i] = st<G>(v);
  }
}

}  // namespace tg::gpu
