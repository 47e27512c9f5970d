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
// thread per element (adamw_kernel) or per 4 elements in one access per array
// (adamw_packed_kernel, where the arrays allow), grid-stride; params may alias master (fp32). The
// master weights are an fp32 copy or the bf16 weights themselves (MasterPtrs below), read and
// stored as the CPU's adamw_bf16_master does. Given a SegmentAmax (kernels/amax.cuh), the kernels
// also take the amax of each linear's weight as they write it (Backend's WeightAmax), reduced over
// the warp: their loops step in warp-uniform strides for it (adamw_loop), the same elements a
// thread as before. convert_kernel (dst = src in another type, same rounding choices) sits here
// too: it is the same master -> compute-copy rounding, used at init and on resume.
#pragma once
#include "amax.cuh"
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

// One element's update where its values lie (memory, or a packed kernel's registers): the
// gradient times grad_scale; the master weight in *master (fp32 master weights), or the bf16
// weight itself with its compensation *comp (bf16-kahan) or without (bf16-sr); `param` gets the
// master rounded to P. i is the element's index (the stochastic roundings' counter).
template <typename P, typename SM, typename SV>
__device__ __forceinline__ void adamw_core(P& param, float* master, uint16_t* comp, P grad,
                                           SM& m, SV& v, size_t i, const AdamWParams& a,
                                           float grad_scale) {
  const AdamWConsts<float> k{a.beta1, a.beta2, a.c1, a.c2, a.lr, a.eps, a.weight_decay};
  const float g = ld(grad) * grad_scale;
  float mi = load_moment(m, a.m_format), vi = load_moment(v, a.v_format);
  float x;  // the weights are read only where they are the master (bf16-sr, bf16-kahan)
  if (master) {
    x = *master;
  } else {
    x = ld(param);
    if constexpr (std::is_same_v<P, bf16>)
      if (comp) x = kahan_load(param.bits, *comp);
  }
  adamw_math(g, mi, vi, x, k);
  m = store_moment<SM>(mi, a.m_format, a.m_seed, a.offset + i);
  v = store_moment<SV>(vi, a.v_format, a.v_seed, a.offset + i);
  if (master) *master = x;
  if constexpr (std::is_same_v<P, bf16>)
    if (comp) return kahan_store(x, param.bits, *comp);
  param = st_round<P>(x, a.stochastic, a.seed, a.offset + i);
}

// Element i, gradients multiplied by grad_scale; returns the written weight's |x| bits.
template <typename P, typename SM, typename SV>
__device__ __forceinline__ unsigned adamw_element(P* params, MasterPtrs w, const P* grads, SM* m,
                                                  SV* v, size_t i, const AdamWParams& a,
                                                  float grad_scale) {
  adamw_core(params[i], w.master ? w.master + i : nullptr, w.comp ? w.comp + i : nullptr,
             grads[i], m[i], v[i], i, a, grad_scale);
  return abs_bits(params[i]);
}

// The packed form: kAdamWPack consecutive elements a thread, each array read and written in
// one access a thread (an fp32 array's four elements in 16 bytes, a 16-bit array's in 8, so a
// warp's access covers whole sectors), the same adamw_core per element (the same bits as
// adamw_element), in a quarter of the memory instructions. Eight elements a thread would make
// the fp32 arrays' accesses 32 bytes apart, each warp access half of every sector it touches.
// Only where n is a whole number of groups and every array is 16-byte aligned (can_pack16);
// params may alias master (fp32: the group is stored twice, alike).
constexpr int kAdamWPack = 4;
template <typename T>
struct alignas(kAdamWPack * sizeof(T)) AdamWGroup {
  T v[kAdamWPack];
};
template <typename T>
__device__ __forceinline__ AdamWGroup<T> load_group(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "fp32 or 16-bit arrays");
  AdamWGroup<T> g;
  if constexpr (sizeof(T) == 4) {
    const Pack16<T> x = load16(p);
    for (int e = 0; e < kAdamWPack; e++) g.v[e] = x.v[e];
  } else {
    *reinterpret_cast<uint64_t*>(&g) = *reinterpret_cast<const uint64_t*>(p);
  }
  return g;
}
template <typename T>
__device__ __forceinline__ void store_group(T* p, const AdamWGroup<T>& g) {
  if constexpr (sizeof(T) == 4) {
    Pack16<T> x;
    for (int e = 0; e < kAdamWPack; e++) x.v[e] = g.v[e];
    store16(p, x);
  } else {
    *reinterpret_cast<uint64_t*>(p) = *reinterpret_cast<const uint64_t*>(&g);
  }
}

// The largest |x| bits of a group's values.
template <typename T>
__device__ __forceinline__ unsigned group_abs_bits(const AdamWGroup<T>& g) {
  unsigned b = 0;
  for (int e = 0; e < kAdamWPack; e++) b = max_bits(b, abs_bits(g.v[e]));
  return b;
}

// Group j (elements j kAdamWPack ..) of the update, gradients multiplied by grad_scale; returns
// the written weights' largest |x| bits.
template <typename P, typename SM, typename SV>
__device__ __forceinline__ unsigned adamw_group(P* params, MasterPtrs w, const P* grads, SM* m,
                                                SV* v, size_t j, const AdamWParams& a,
                                                float grad_scale) {
  const size_t i0 = j * kAdamWPack;
  const AdamWGroup<P> g = load_group(grads + i0);
  AdamWGroup<P> p{};  // written whole below; read only where the weights are the master
  if (!w.master) p = load_group(params + i0);
  AdamWGroup<SM> gm = load_group(m + i0);
  AdamWGroup<SV> gv = load_group(v + i0);
  AdamWGroup<float> x{};
  AdamWGroup<uint16_t> c{};
  if (w.master) x = load_group(w.master + i0);
  if (w.comp) c = load_group(w.comp + i0);
  for (int e = 0; e < kAdamWPack; e++)
    adamw_core(p.v[e], w.master ? &x.v[e] : nullptr, w.comp ? &c.v[e] : nullptr, g.v[e],
               gm.v[e], gv.v[e], i0 + e, a, grad_scale);
  store_group(m + i0, gm);
  store_group(v + i0, gv);
  if (w.master) store_group(w.master + i0, x);
  if (w.comp) store_group(w.comp + i0, c);
  store_group(params + i0, p);
  return group_abs_bits(p);
}

// The call's n elements in units of Pack (1, or kAdamWPack: n a whole number of groups),
// grid-stride, unit j on lane j % 32 of a warp as before, in steps every lane of a warp takes
// (blockDim.x a multiple of 32), so that the warp reduces the weights' amax as it goes:
// update(j) updates unit j and returns its weights' largest |x| bits (Backend's WeightAmax).
template <int Pack, typename F>
__device__ __forceinline__ void adamw_loop(size_t n, const SegmentAmax& amax, F&& update) {
  const size_t units = n / Pack, lane = threadIdx.x % 32, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t j0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x - lane; j0 < units; j0 += stride) {
    const size_t j = j0 + lane;
    const unsigned m = j < units ? update(j) : 0u;
    if (amax.n) segment_amax(j < units ? segment_word(amax, j * Pack) : nullptr, m);
  }
}

// The weights' amax alone, for a step the device loss scaler skipped: the words were zeroed
// for this call, and the weights stand as they were.
template <int Pack, typename P>
__device__ __forceinline__ void weights_amax_loop(const P* params, size_t n,
                                                  const SegmentAmax& amax) {
  if (!amax.n) return;
  adamw_loop<Pack>(n, amax, [&](size_t j) {
    unsigned b = 0;
    for (int e = 0; e < Pack; e++) b = max_bits(b, abs_bits(params[j * Pack + e]));
    return b;
  });
}

template <typename P, typename SM, typename SV>
__global__ void adamw_packed_kernel(P* params, MasterPtrs w, const P* grads, SM* m, SV* v, size_t n,
                                    AdamWParams a, SegmentAmax amax) {
  adamw_loop<kAdamWPack>(
      n, amax, [&](size_t j) { return adamw_group(params, w, grads, m, v, j, a, a.grad_scale); });
}

template <typename P, typename SM, typename SV>
__global__ void adamw_kernel(P* params, MasterPtrs w, const P* grads, SM* m, SV* v, size_t n,
                             AdamWParams a, SegmentAmax amax) {
  adamw_loop<1>(
      n, amax, [&](size_t i) { return adamw_element(params, w, grads, m, v, i, a, a.grad_scale); });
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, size_t n, bool stochastic, uint64_t seed,
                               uint64_t offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = st_round<D>(ld(src[i]), stochastic, seed, offset + i);
}

}  // namespace tg::gpu
