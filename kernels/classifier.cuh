// classifier.cuh: fused softmax + cross-entropy + its gradient, one block per row of
// logits(N, Vp) (fp32), over the first V entries:
//   loss[n] = logsumexp(z) - z[target]
//   when dloss != 0: z[i] = dloss * (softmax(z)[i] - [i == target]) in place, 0 in the
//   padding V..Vp-1 -- the probabilities never get a buffer of their own.
// Two block reductions (max, then sum of exp), one pass writing the gradient.
#pragma once
#include "common.cuh"

namespace tg::gpu {

__global__ void classifier_kernel(float* logits, float* losses, const int32_t* targets, float dloss,
                                  int V, int Vp) {
  __shared__ float shared[32];
  const int n = blockIdx.x;
  float* z = logits + size_t(n) * Vp;
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
  if (dloss != 0.f) {
    const float inv = 1.f / s;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
      float g = 0.f;
      if (i < V) g = dloss * (expf(z[i] - m) * inv - (i == tgt ? 1.f : 0.f));
      z[i] = g;
    }
  }
}

}  // namespace tg::gpu
