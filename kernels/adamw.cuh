// adamw.cuh: AdamW on the master weights, writing the compute copy of the weights.
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   master -= lr * (m / c1 / (sqrt(v / c2) + eps) + wd * master)
//   params = master rounded to P (nearest even, or stochastic with sr_hash(seed, offset + i))
// The arithmetic is src/numerics/adamw_math.h, the CPU backend's own, FMAs spelled out, so the
// kernel computes the CPU's bits. c1 = 1 - b1^step and c2 = 1 - b2^step come from the host
// (computed as the CPU reference computes them). The moments are stored per their
// MomentFormat (src/numerics/moment_format.h): SM / SV = float holds fp32 moments as they are,
// uint16_t the bf16 or fp16 codes, read widened to fp32 and stored back rounded (stochastic
// formats with sr_hash(m_seed or v_seed, offset + i)), through the encoder the CPU uses. One
// thread per element, grid-stride; params may alias master (fp32). The master weights are an
// fp32 copy or the bf16 weights themselves (MasterPtrs below), read and stored as the CPU's
// adamw_bf16_master does.
// convert_kernel (dst = src in another type, same rounding choices) sits here too: it is the
// same master -> compute-copy rounding, used at init and on resume.
#pragma once
#include "common.cuh"
#include "src/numerics/adamw_math.h"
#include "src/numerics/moment_format.h"

namespace tg::gpu {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2;
  bool stochastic;
  uint64_t seed, offset;
  MomentFormat m_format, v_format;
  uint64_t m_seed, v_seed;
};

// Where element i's master weight lives (precision.state.master, src/numerics/master_format.h):
// an fp32 copy (master), or the bf16 weights themselves (master null), with their bf16
// compensation (comp, bf16-kahan) or stochastically rounded (bf16-sr: a.stochastic is set).
struct MasterPtrs {
  float* master;
  uint16_t* comp;
};

template <typename P>
__device__ __forceinline__ float load_master(const P* params, MasterPtrs w, size_t i) {
  if (w.master) return w.master[i];
  if constexpr (std::is_same_v<P, bf16>)
    if (w.comp) return kahan_load(params[i].bits, w.comp[i]);
  return ld(params[i]);
}
template <typename P>
__device__ __forceinline__ void store_master(P* params, MasterPtrs w, size_t i, float x,
                                             const AdamWParams& a) {
  if (w.master) w.master[i] = x;
  if constexpr (std::is_same_v<P, bf16>)
    if (w.comp) return kahan_store(x, params[i].bits, w.comp[i]);
  params[i] = st_round<P>(x, a.stochastic, a.seed, a.offset + i);
}

__device__ __forceinline__ float load_moment(float x, const MomentFormat&) { return x; }
__device__ __forceinline__ float load_moment(uint16_t code, const MomentFormat& f) {
  return moment_decode16(code, f);
}
template <typename S>
__device__ __forceinline__ S store_moment(float x, const MomentFormat& f, uint64_t seed,
                                          uint64_t index) {
  if constexpr (std::is_same_v<S, uint16_t>)
    return moment_encode16(x, f, f.stochastic ? sr_hash(seed, index) : 0u);
  else
    return x;
}

// Element i, gradients multiplied by grad_scale (shared with loss_scale.cuh's device-scaled
// variant).
template <typename P, typename SM, typename SV>
__device__ __forceinline__ void adamw_element(P* params, MasterPtrs w, const P* grads, SM* m,
                                              SV* v, size_t i, const AdamWParams& a,
                                              float grad_scale) {
  const AdamWConsts<float> k{a.beta1, a.beta2, a.c1, a.c2, a.lr, a.eps, a.weight_decay};
  const float g = ld(grads[i]) * grad_scale;
  float mi = load_moment(m[i], a.m_format), vi = load_moment(v[i], a.v_format);
  float x = load_master(params, w, i);
  adamw_math(g, mi, vi, x, k);
  m[i] = store_moment<SM>(mi, a.m_format, a.m_seed, a.offset + i);
  v[i] = store_moment<SV>(vi, a.v_format, a.v_seed, a.offset + i);
  store_master(params, w, i, x, a);
}

template <typename P, typename SM, typename SV>
__global__ void adamw_kernel(P* params, MasterPtrs w, const P* grads, SM* m, SV* v, size_t n,
                             AdamWParams a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    adamw_element(params, w, grads, m, v, i, a, a.grad_scale);
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, size_t n, bool stochastic, uint64_t seed,
                               uint64_t offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = st_round<D>(ld(src[i]), stochastic, seed, offset + i);
}

}  // namespace tg::gpu
