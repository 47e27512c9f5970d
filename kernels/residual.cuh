// residual.cuh: out = a + b elementwise (fp32 math, one rounding), 16-byte packs when the
// pointers and length allow, else one element per thread. (Its backward is the identity: the
// model adds the gradient into both branches itself.)
#pragma once
#include "common.cuh"

namespace tg::gpu {

template <typename T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = st<T>(ld(a[i]) + ld(b[i]));
}

// n16 = number of 16-byte packs.
template <typename T>
__global__ void residual_forward_pack_kernel(T* out, const T* a, const T* b, size_t n16) {
  constexpr int K = Pack16<T>::N;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16;
       i += size_t(gridDim.x) * blockDim.x) {
    Pack16<T> pa = load16(a + i * K), pb = load16(b + i * K), po;
#pragma unroll
    for (int k = 0; k < K; k++) po.v[k] = st<T>(ld(pa.v[k]) + ld(pb.v[k]));
    store16(out + i * K, po);
  }
}

}  // namespace tg::gpu
