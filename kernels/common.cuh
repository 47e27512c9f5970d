// common.cuh: what every kernel shares: the element types, how they widen and narrow,
// 16-byte packs, warp and block reductions.
//
// Storage types: float (fp32), bf16 and f16 (16-bit codes in a struct, never CUDA's own
// types, so that host code can pass them around as plain bytes). Every kernel widens on load
// to fp32 (ld), computes in fp32 and rounds once on store (st), to nearest even, bit for bit
// as the CPU backend does (src/backends/cpu/storage.h): bf16 through src/numerics/formats.h, fp16
// through the hardware conversion (__float2half_rn: IEEE round to nearest even, overflow to inf)
// with NaN mapped to formats.h's canonical 0x7FFF.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "src/numerics/formats.h"

namespace tg::gpu {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(bf16 x) { return bf16_to_f32(x.bits); }
__device__ __forceinline__ float ld(f16 x) { return __half2float(__ushort_as_half(x.bits)); }

template <typename T>
__device__ __forceinline__ T st(float v);
template <>
__device__ __forceinline__ float st<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 st<bf16>(float v) {
  return bf16{f32_to_bf16(v)};
}
template <>
__device__ __forceinline__ f16 st<f16>(float v) {
  if (v != v) return f16{0x7fff};
  return f16{__half_as_ushort(__float2half_rn(v))};
}

// Rounds v into T for element `index`: to nearest even, or stochastically with the bits
// sr_hash(seed, index) (bf16/fp16; fp32 stores v as it is), as src/backends/cpu/adamw.cpp does.
template <typename T>
__device__ __forceinline__ T st_round(float v, bool stochastic, uint64_t seed, uint64_t index) {
  if constexpr (sizeof(T) == 2) {
    if (stochastic) {
      const uint32_t r = sr_hash(seed, index);
      if constexpr (std::is_same_v<T, bf16>)
        return bf16{f32_to_bf16_sr(v, r)};
      else
        return f16{f32_to_f16_sr(v, r)};
    }
  }
  return st<T>(v);
}

// 16 bytes of T (4 floats or 8 16-bit values): one vector load or store per thread.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};
template <typename T>
__device__ __forceinline__ Pack16<T> load16(const T* p) {
  Pack16<T> out;
  *reinterpret_cast<int4*>(&out) = *reinterpret_cast<const int4*>(p);
  return out;
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const Pack16<T>& x) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}
// V consecutive elements of T accessed as one: a 16-byte vector access where V is a pack's
// count (Pack16<T>::N; the address then 16-byte aligned), a plain one where V is 1, so that a
// kernel templated on V is its scalar and its vector form at once.
template <typename T, int V>
struct alignas(V == 1 ? alignof(T) : 16) Run {
  T v[V];
};
template <int V, typename T>
__device__ __forceinline__ Run<T, V> load_run(const T* p) {
  Run<T, V> r;
  if constexpr (V == 1)
    r.v[0] = *p;
  else
    *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  return r;
}
template <int V, typename T>
__device__ __forceinline__ void store_run(T* p, const Run<T, V>& r) {
  if constexpr (V == 1)
    *p = r.v[0];
  else
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&r);
}
// Whether all pointers are 16-byte aligned and n is a whole number of packs.
template <typename T>
inline bool can_pack16(size_t n, std::initializer_list<const void*> ptrs) {
  if (n % Pack16<T>::N) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

// f(std::integral_constant<int, V>{}): V a 16-byte pack's count of T where `packed`, else 1.
// How a launcher picks the Run width of a kernel templated on V (packed: typically
// can_pack16<T> of the row length and the tensors).
template <typename T, typename F>
inline void with_run_width(bool packed, F&& f) {
  if (packed)
    f(std::integral_constant<int, Pack16<T>::N>{});
  else
    f(std::integral_constant<int, 1>{});
}

// The block's dynamic shared memory (the launch's smem bytes), 16-byte aligned.
template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char tg_dynamic_smem[];
  return reinterpret_cast<T*>(tg_dynamic_smem);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum (or max) over the block, returned to every thread. blockDim.x must be a multiple of
// 32 and at most 1024; `shared` holds 32 floats. The order is fixed by the thread layout, so
// the result is the same on every run.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = kMax ? warp_max(x) : warp_sum(x);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float y = lane < nwarps ? shared[lane] : (kMax ? -INFINITY : 0.f);
  return kMax ? warp_max(y) : warp_sum(y);
}

}  // namespace tg::gpu
