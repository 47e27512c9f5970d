// layernorm.cuh: LayerNorm over rows of C, optionally fused with the residual add before it.
//   forward:  out = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + 1e-5), biased variance;
//             mean and rstd (fp32) are kept for the backward pass.
//   fused:    res = a + b (rounded to T and stored), then the forward above on res: the
//             residual stream is read once instead of written and read back.
//   backward: dnorm = dout * w
//             dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
//             dw += sum_rows dout * norm,  db += sum_rows dout
// One warp per row (mean and variance in two passes, as the CPU reference). The backward runs
// in one pass over its inputs (layernorm_backward_fused_kernel: a block per chunk of rows, each
// row staged in shared memory, dinp written and the chunk's dw/db sums taken from the staged
// rows), then layernorm_backward_final_kernel adds the fp32 partials in chunk order and rounds
// once into dw/db. Every sum has a fixed order (rows ascending in a chunk, chunks ascending), so
// the results do not depend on scheduling. Rows too wide to stage take the dinp and partial
// kernels instead, which read dout and inp again; they sum in the same order, to the same bits.
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

// The fused backward's row: one warp stages dout and inp of `row` (sd, sx) while summing
// dnorm and dnorm * norm, then writes dinp from the staged copy. Each lane rereads only the
// elements it staged itself, so the row needs no synchronisation; ms = {mean, rstd} of the row.
template <typename T>
__device__ __forceinline__ void layernorm_backward_row(T* dinp, T* sd, T* sx, const float* ms,
                                                       const T* dout, const T* inp, const T* sw,
                                                       int row, int C) {
  const int lane = threadIdx.x % 32;
  const size_t off = size_t(row) * C;
  const float m = ms[0], s = ms[1];
  float a = 0, bsum = 0;
  for (int c = lane; c < C; c += 32) {
    const T d = dout[off + c], x = inp[off + c];
    sd[c] = d;
    sx[c] = x;
    const float norm = (ld(x) - m) * s;
    const float dnorm = ld(sw[c]) * ld(d);
    a += dnorm;
    bsum += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (ld(sx[c]) - m) * s;
    const float dnorm = ld(sw[c]) * ld(sd[c]);
    dinp[off + c] = st<T>(ld(dinp[off + c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

// grid = chunks of `rows` rows, blockDim.x = 32 * warps; pdw and pdb are (chunks, C) fp32.
// dynamic_smem (the launcher's backward_smem): the chunk's dw and db sums (C fp32 each), mean and
// rstd of the round's rows (2 fp32 per warp), the weight (C of T), a row of dout and of inp per
// warp (2 C of T each). Each round a warp per row writes dinp; then each thread adds its
// channels over the round's staged rows in row order: the partial kernel's sums, bit for bit,
// with dout and inp read once.
template <typename T>
__global__ void layernorm_backward_fused_kernel(T* dinp, float* pdw, float* pdb, const T* dout,
                                                const T* inp, const T* w, const float* mean,
                                                const float* rstd, int N, int C, int rows) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
  float* aw = dynamic_smem<float>();
  float* ab = aw + C;
  float* stat = ab + C;
  T* sw = reinterpret_cast<T*>(stat + 2 * warps);
  T* sd = sw + C + size_t(warp) * 2 * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    sw[c] = w[c];
    aw[c] = 0;
    ab[c] = 0;
  }
  const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
  for (int base = r0; base < r1; base += warps) {
    const int n = min(warps, r1 - base);
    // the round's mean and rstd in one coalesced access, not a sector per row
    if (int(threadIdx.x) < n) {
      stat[2 * threadIdx.x] = mean[base + threadIdx.x];
      stat[2 * threadIdx.x + 1] = rstd[base + threadIdx.x];
    }
    __syncthreads();
    if (warp < n) {
      layernorm_backward_row(dinp, sd, sd + C, stat + 2 * warp, dout, inp, sw, base + warp, C);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float fw = aw[c], fb = ab[c];
      for (int k = 0; k < n; k++) {
        const T* rd = sw + C + size_t(k) * 2 * C;
        const float d = ld(rd[c]);
        fw += (ld(rd[C + c]) - stat[2 * k]) * stat[2 * k + 1] * d;
        fb += d;
      }
      aw[c] = fw;
      ab[c] = fb;
    }
    __syncthreads();  // the next round overwrites the staged rows and stat
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    pdw[size_t(blockIdx.x) * C + c] = aw[c];
    pdb[size_t(blockIdx.x) * C + c] = ab[c];
  }
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
