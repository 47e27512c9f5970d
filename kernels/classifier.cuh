// classifier.cuh: fused softmax + cross-entropy + its gradient, one block per row of
// logits(N, Vp) (fp32), over the first V entries:
//   loss[n] = logsumexp(z) - z[target], from the fp32 logits
//   when dloss != 0: g[i] = dloss * (softmax(z)[i] - [i == target]) in fp32, rounded once to
//   G (fp32 in place; bf16 / fp16, the model's compute type, over the first half of the row's
//   fp32 bytes: Backend::classifier, dlogits_view), 0 in the padding V..Vp-1 -- the
//   probabilities never get a buffer of their own, and the lm_head's backward GEMMs read G.
// Two block reductions (max, then sum of exp), one pass writing the gradient.
#pragma once
#include "common.cuh"

namespace tg::gpu {

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
