// global_norm.cuh: sums of squares over a gradient buffer in fp32, deterministic.
//   sum_squares:        sum x^2
//   unscale_check_norm: sum (x * inv_scale)^2 and the count of non-finite x, in one pass:
//                       the loss scaler's finiteness check and the clipping norm together.
// Pass 1: a fixed grid (kNormBlocks blocks) strides over the buffer, each block writes its
// partial sum (and non-finite count); pass 2: one block adds the partials in a fixed order.
// The result stays on the device (out[0] = sum, out[1] = non-finite count) until the host
// asks for it.
#pragma once
#include "common.cuh"

namespace tg::gpu {

constexpr int kNormBlocks = 512, kNormThreads = 512;

// A thread takes runs of V elements (common.cuh's Run: 16 bytes where x is aligned, else V 1),
// striding by the grid; the last n % V elements go to the first threads of block 0.
template <typename T>
__device__ __forceinline__ void add_norm(float& s, float& bad, T x, float inv_scale) {
  const float raw = ld(x);
  if (!isfinite(raw)) bad += 1.f;
  const float g = raw * inv_scale;
  s += g * g;
}
template <typename T, int V>
__global__ void norm_partial_kernel(float* partial_sum, float* partial_bad, const T* x, size_t n,
                                    float inv_scale) {
  __shared__ float shared[32];
  float s = 0, bad = 0;
  const size_t runs = n / V;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < runs;
       i += size_t(gridDim.x) * blockDim.x) {
    const Run<T, V> r = load_run<V>(x + i * V);
    for (int j = 0; j < V; j++) add_norm(s, bad, r.v[j], inv_scale);
  }
  if (blockIdx.x == 0 && threadIdx.x < n - runs * V)
    add_norm(s, bad, x[runs * V + threadIdx.x], inv_scale);
  s = block_reduce<false>(s, shared);
  bad = block_reduce<false>(bad, shared);
  if (threadIdx.x == 0) {
    partial_sum[blockIdx.x] = s;
    partial_bad[blockIdx.x] = bad;
  }
}

// One block of kNormThreads threads; out[0] = sum, out[1] = non-finite count.
__global__ void norm_final_kernel(float* out, const float* partial_sum, const float* partial_bad,
                                  int parts) {
  __shared__ float shared[32];
  float s = 0, bad = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) {
    s += partial_sum[i];
    bad += partial_bad[i];
  }
  s = block_reduce<false>(s, shared);
  bad = block_reduce<false>(bad, shared);
  if (threadIdx.x == 0) {
    out[0] = s;
    out[1] = bad;
  }
}

}  // namespace tg::gpu
