// gelu.cuh: GELU, tanh approximation (GPT-2), elementwise in fp32, one rounding per store.
//   forward:  out = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)
//   backward: dinp = (0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2)) * dout
// 16-byte packs when pointers and length allow, else one element per thread. The forward takes
// its output's amax as it writes it where given (the MLP projection's input, kernels/amax.cuh).
#pragma once
#include "amax.cuh"
#include "common.cuh"

namespace tg::gpu {

__device__ __forceinline__ float gelu_f(float x) {
  const float k = 0.7978845608028654f;
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.f + tanhf(k * (x + cube)));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float k = 0.7978845608028654f;
  const float cube = 0.044715f * x * x * x;
  const float th = tanhf(k * (x + cube));
  const float dth = (1.f - th * th) * k * (1.f + float(3 * 0.044715) * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * dth;
}

// amax (device, when given; block-uniform): the max of |out|'s bits (kernels/amax.cuh).
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n, unsigned* amax) {
  __shared__ unsigned wmax[32];
  unsigned m = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const T y = st<T>(gelu_f(ld(inp[i])));
    out[i] = y;
    m = max_bits(m, abs_bits(y));
  }
  if (amax) block_amax(m, amax, wmax);
}
template <typename T>
__global__ void gelu_forward_pack_kernel(T* out, const T* inp, size_t n16, unsigned* amax) {
  constexpr int K = Pack16<T>::N;
  __shared__ unsigned wmax[32];
  unsigned m = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16;
       i += size_t(gridDim.x) * blockDim.x) {
    Pack16<T> x = load16(inp + i * K), y;
#pragma unroll
    for (int k = 0; k < K; k++) {
      y.v[k] = st<T>(gelu_f(ld(x.v[k])));
      m = max_bits(m, abs_bits(y.v[k]));
    }
    store16(out + i * K, y);
  }
  if (amax) block_amax(m, amax, wmax);
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dinp[i] = st<T>(gelu_grad_f(ld(inp[i])) * ld(dout[i]));
}
template <typename T>
__global__ void gelu_backward_pack_kernel(T* dinp, const T* inp, const T* dout, size_t n16) {
  constexpr int K = Pack16<T>::N;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16;
       i += size_t(gridDim.x) * blockDim.x) {
    Pack16<T> x = load16(inp + i * K), d = load16(dout + i * K), y;
#pragma unroll
    for (int k = 0; k < K; k++) y.v[k] = st<T>(gelu_grad_f(ld(x.v[k])) * ld(d.v[k]));
    store16(dinp + i * K, y);
  }
}

}  // namespace tg::gpu
