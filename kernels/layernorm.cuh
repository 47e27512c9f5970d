// layernorm.cuh: LayerNorm over rows of C, optionally fused with the residual add before it.
//   forward:  out = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + 1e-5), biased variance;
//             mean and rstd (fp32) are kept for the backward pass.
//   fused:    res = a + b (rounded to T and stored), then the forward above on res: the
//             residual stream is read once instead of written and read back.
//   backward: dnorm = dout * w
//             dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
//             dw += sum_rows dout * norm,  db += sum_rows dout
// One warp per row (mean and variance in two passes, as the CPU reference). The dw/db sums
// are deterministic: kernel 2 sums fixed chunks of rows per channel into fp32 partials,
// kernel 3 adds the partials in chunk order and rounds once into dw/db.
#pragma once
#include "common.cuh"

namespace tg::gpu {

// Rows per chunk of the dw/db partial sums: 64, more when N is so large that the chunks
// would outgrow the grid's y dimension (at most kMaxChunks chunks).
constexpr int kMaxChunks = 4096;
inline int rows_per_chunk(int N) {
  return N <= 64 * kMaxChunks ? 64 : (N + kMaxChunks - 1) / kMaxChunks;
}

// Mean, rstd and out of one row x whose lane sums s the caller took (each lane reads back only
// the elements it summed itself, so a row staged by its own lanes needs no synchronisation).
template <typename T>
__device__ __forceinline__ void layernorm_row(T* o, float* mean, float* rstd, const T* x,
                                              const T* w, const T* b, float s, int row, int C) {
  const int lane = threadIdx.x % 32;
  const float m = warp_sum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) {
    const float d = ld(x[c]) - m;
    v += d * d;
  }
  const float var = warp_sum(v) / C;
  const float r = 1.f / sqrtf(var + 1e-5f);
  for (int c = lane; c < C; c += 32) o[c] = st<T>((ld(x[c]) - m) * r * ld(w[c]) + ld(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// blockDim.x = 32 * warps; row = blockIdx.x * warps + warp.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w,
                                         const T* b, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += ld(x[c]);
  layernorm_row(out + size_t(row) * C, mean, rstd, x, w, b, s, row, C);
}

// res = a + b (stored), out = layernorm(res). Each lane rereads only the res elements it wrote
// itself, so no synchronisation is needed between the add and the statistics.
template <typename T>
__global__ void residual_layernorm_forward_kernel(T* res, T* out, float* mean, float* rstd,
                                                  const T* a, const T* bb, const T* w, const T* b,
                                                  int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = size_t(row) * C;
  T* x = res + off;
  float s = 0;
  for (int c = lane; c < C; c += 32) {
    const T r = st<T>(ld(a[off + c]) + ld(bb[off + c]));
    x[c] = r;
    s += ld(r);
  }
  layernorm_row(out + off, mean, rstd, x, w, b, s, row, C);
}

// The same two kernels with the block's rows and the weight and bias staged in shared memory
// (dynamic_smem: w, b, then one row of C per warp, all in T): each row is read from global
// memory once, the weight and bias once per block, where the kernels above read the row three
// times and the weight and bias once per row. The arithmetic is theirs, value for value (a
// staged element is the element itself), so they compute the same bits. The launcher takes
// them when (2 + warps) C elements of T fit the block's 48 KiB (layernorm_rows_in_smem).
template <typename T>
__device__ __forceinline__ void stage_weight_bias(T* sw, T* sb, const T* w, const T* b, int C) {
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    sw[c] = w[c];
    sb[c] = b[c];
  }
  __syncthreads();
}

template <typename T>
__global__ void layernorm_forward_smem_kernel(T* out, float* mean, float* rstd, const T* inp,
                                              const T* w, const T* b, int N, int C) {
  T* sw = dynamic_smem<T>();
  T* sb = sw + C;
  stage_weight_bias(sw, sb, w, b, C);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= N) return;
  T* x = sb + C + size_t(warp) * C;
  const T* g = inp + size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) {
    const T e = g[c];
    x[c] = e;
    s += ld(e);
  }
  layernorm_row(out + size_t(row) * C, mean, rstd, x, sw, sb, s, row, C);
}

template <typename T>
__global__ void residual_layernorm_forward_smem_kernel(T* res, T* out, float* mean, float* rstd,
                                                       const T* a, const T* bb, const T* w,
                                                       const T* b, int N, int C) {
  T* sw = dynamic_smem<T>();
  T* sb = sw + C;
  stage_weight_bias(sw, sb, w, b, C);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= N) return;
  T* x = sb + C + size_t(warp) * C;
  const size_t off = size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) {
    const T r = st<T>(ld(a[off + c]) + ld(bb[off + c]));
    res[off + c] = r;
    x[c] = r;
    s += ld(r);
  }
  layernorm_row(out + off, mean, rstd, x, sw, sb, s, row, C);
}

// dinp += ..., one warp per row.
template <typename T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                               const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float a = 0, bsum = 0;
  for (int c = lane; c < C; c += 32) {
    const float norm = (ld(inp[off + c]) - m) * s;
    const float dnorm = ld(w[c]) * ld(dout[off + c]);
    a += dnorm;
    bsum += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (ld(inp[off + c]) - m) * s;
    const float dnorm = ld(w[c]) * ld(dout[off + c]);
    dinp[off + c] = st<T>(ld(dinp[off + c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

// grid = (ceil(C / blockDim.x), chunks); partial[chunk][c] over the chunk's `rows` rows.
// pdw and pdb are (chunks, C) fp32.
template <typename T>
__global__ void layernorm_backward_partial_kernel(float* pdw, float* pdb, const T* dout,
                                                  const T* inp, const float* mean,
                                                  const float* rstd, int N, int C, int rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int chunk = blockIdx.y;
  const int r0 = chunk * rows, r1 = min(N, r0 + rows);
  float sw = 0, sb = 0;
  for (int r = r0; r < r1; r++) {
    const size_t i = size_t(r) * C + c;
    const float d = ld(dout[i]);
    sw += (ld(inp[i]) - mean[r]) * rstd[r] * d;
    sb += d;
  }
  pdw[size_t(chunk) * C + c] = sw;
  pdb[size_t(chunk) * C + c] = sb;
}

template <typename T>
__global__ void layernorm_backward_final_kernel(T* dw, T* db, const float* pdw, const float* pdb,
                                                int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0, sb = 0;
  for (int k = 0; k < chunks; k++) {
    sw += pdw[size_t(k) * C + c];
    sb += pdb[size_t(k) * C + c];
  }
  dw[c] = st<T>(ld(dw[c]) + sw);
  db[c] = st<T>(ld(db[c]) + sb);
}

}  // namespace tg::gpu
