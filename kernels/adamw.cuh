// adamw.cuh: AdamW on fp32 master weights, writing the compute copy of the weights.
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   master -= lr * (m / c1 / (sqrt(v / c2) + eps) + wd * master)
//   params = master rounded to P (nearest even, or stochastic with sr_hash(seed, offset + i))
// c1 = 1 - b1^step and c2 = 1 - b2^step come from the host (computed as the CPU reference
// computes them). One thread per element, grid-stride; params may alias master (fp32).
// convert_kernel (dst = src in another type, same rounding choices) sits here too: it is the
// same master -> compute-copy rounding, used at init and on resume.
#pragma once
#include "common.cuh"

namespace tg::gpu {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2;
  bool stochastic;
  uint64_t seed, offset;
};

// Element i, gradients multiplied by grad_scale (shared with loss_scale.cuh's device-scaled
// variant).
template <typename P>
__device__ __forceinline__ void adamw_element(P* params, float* master, const P* grads, float* m,
                                              float* v, size_t i, const AdamWParams& a,
                                              float grad_scale) {
  const float g = ld(grads[i]) * grad_scale;
  const float mi = a.beta1 * m[i] + (1.f - a.beta1) * g;
  const float vi = a.beta2 * v[i] + (1.f - a.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  float w = master[i];
  w -= a.lr * ((mi / a.c1) / (sqrtf(vi / a.c2) + a.eps) + a.weight_decay * w);
  master[i] = w;
  params[i] = st_round<P>(w, a.stochastic, a.seed, a.offset + i);
}

template <typename P>
__global__ void adamw_kernel(P* params, float* master, const P* grads, float* m, float* v, size_t n,
                             AdamWParams a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    adamw_element(params, master, grads, m, v, i, a, a.grad_scale);
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, size_t n, bool stochastic, uint64_t seed,
                               uint64_t offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = st_round<D>(ld(src[i]), stochastic, seed, offset + i);
}

}  // namespace tg::gpu
