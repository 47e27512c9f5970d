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

// grid = (ceil(OC / (V kBiasThreads)), chunks), kBiasThreads threads; partial (chunks, OC)
// fp32. A thread sums V adjacent columns (common.cuh's Run: a 16-byte read of each row where OC
// is a whole number of packs and dout is aligned, else V 1), each column over the chunk's rows
// in row order: the same sums whatever V is. With V > 1 the block's sums leave through shared
// memory in 16-byte runs of consecutive columns (a lane's own V sums, written directly, would
// put 32 or 16 bytes between the lanes of each store: 2 to 8 times the sectors).
// amax (device, when given; must start at 0): the max of |dout|'s fp32 bits, one atomicMax a
// block, for a per-tensor-scaled linear's gradient quantizers, which then read dout once
// (src/backends/cuda/matmul_scaled.cu): the amax pass they would make is this kernel's read.
constexpr int kBiasThreads = 256;
template <typename T, int V>
__global__ void bias_backward_partial_kernel(float* partial, const T* dout, int N, int OC, int rows,
                                             unsigned* amax) {
  const int j0 = blockIdx.x * kBiasThreads * V, j = j0 + int(threadIdx.x) * V;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float s[V] = {};
  unsigned m = 0;  // |x|'s bits order as |x| does; inf and NaN above every finite value
  if (j < OC)
    for (int r = r0; r < r1; r++) {
      const Run<T, V> d = load_run<V>(dout + size_t(r) * OC + j);
      for (int k = 0; k < V; k++) {
        const float x = ld(d.v[k]);
        s[k] += x;
        const unsigned a = f32_bits(x) & 0x7fffffffu;
        m = a > m ? a : m;
      }
    }
  if (amax) {  // (block-uniform)
    __shared__ unsigned wmax[kBiasThreads / 32];
    m = __reduce_max_sync(0xffffffffu, m);
    if (threadIdx.x % 32 == 0) wmax[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kBiasThreads / 32; w++) m = wmax[w] > m ? wmax[w] : m;
      atomicMax(amax, m);
    }
  }
  float* out = partial + size_t(blockIdx.y) * OC + j0;
  if constexpr (V == 1) {
    if (j < OC) out[threadIdx.x] = s[0];
  } else {
    __shared__ __align__(16) float sums[kBiasThreads * V];
    for (int k = 0; k < V; k++) sums[threadIdx.x * V + k] = s[k];
    __syncthreads();
    const int n = min(kBiasThreads * V, OC - j0);  // a whole number of packs, so of 4 floats
    for (int i = threadIdx.x * 4; i < n; i += kBiasThreads * 4)
      store_run<4>(out + i, load_run<4>(sums + i));
  }
}

// dbias += the chunks' partials, each column's in chunk order, rounded once.
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
