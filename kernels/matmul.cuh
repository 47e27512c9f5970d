// matmul.cuh: the parts of the linear layer that are not the GEMM itself (the GEMMs run in
// cuBLASLt, src/backends/cuda/matmul.cu):
//   forward:  out(N,OC) = inp(N,C) W(OC,C)^T + bias   -- cuBLASLt with the BIAS epilogue
//   backward: dinp = dout W;  dW += dout^T inp         -- cuBLASLt, beta = 1 for dW
//             dbias += column sums of dout             -- bias_backward_* below
// The column sums are deterministic: fixed chunks of rows into fp32 partials, then the
// partials added in chunk order and rounded once.
// matmul_epilogue_kernel is the fallback when cuBLASLt offers no algorithm (odd alignments):
// a plain cuBLAS GEMM writes fp32 products to a scratch buffer, and this kernel forms
// out = beta * out + acc + bias in fp32 and rounds once, so the rounding points stay those
// of the CPU reference.
#pragma once
#include "common.cuh"

namespace tg::gpu {

// Rows per chunk of the column sums: 64, more when N is so large that the chunks would
// outgrow the grid's y dimension (at most 4096 chunks).
inline int bias_rows_per_chunk(int N) { return N <= 64 * 4096 ? 64 : (N + 4095) / 4096; }

// grid = (ceil(OC / blockDim.x), chunks); partial (chunks, OC) fp32.
template <typename T>
__global__ void bias_backward_partial_kernel(float* partial, const T* dout, int N, int OC,
                                             int rows) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= OC) return;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float s = 0;
  for (int r = r0; r < r1; r++) s += ld(dout[size_t(r) * OC + j]);
  partial[size_t(blockIdx.y) * OC + j] = s;
}

template <typename T>
__global__ void bias_backward_final_kernel(T* dbias, const float* partial, int chunks, int OC) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= OC) return;
  float s = 0;
  for (int k = 0; k < chunks; k++) s += partial[size_t(k) * OC + j];
  dbias[j] = st<T>(ld(dbias[j]) + s);
}

// out(rows, cols) = beta * out + acc + bias[col] (bias may be null), row-major.
template <typename T, typename B>
__global__ void matmul_epilogue_kernel(T* out, const float* acc, const B* bias, float beta,
                                       int rows, int cols) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float v = acc[i];
    if (bias) v += ld(bias[i % cols]);
    if (beta != 0.f) v += beta * ld(out[i]);
    out[i] = st<T>(v);
  }
}

}  // namespace tg::gpu
