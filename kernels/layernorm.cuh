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
// Where a row is a whole number of 16-byte packs and the tensors are aligned, every row access
// is a 16-byte vector per lane (Run, V below); the lane's sums then take its elements in runs.
// Given an amax word, the forward kernels also take out's amax as they write it (one atomic a
// row's warp; kernels/amax.cuh): the amax of a per-tensor-scaled linear's input (ln1 feeds the
// qkv linear, ln2 the MLP's fc).
#pragma once
#include "amax.cuh"
#include "common.cuh"

namespace tg::gpu {

// Rows per chunk of the dw/db partial sums: 64, more when N is so large that the chunks
// would outgrow the grid's y dimension (at most kMaxChunks chunks).
constexpr int kMaxChunks = 4096;
inline int rows_per_chunk(int N) {
  return N <= 64 * kMaxChunks ? 64 : (N + kMaxChunks - 1) / kMaxChunks;
}

// A lane's elements of a row, in the order its sums take them: runs of V consecutive elements
// (common.cuh's Run) starting at lane * V, then 32 V further on. V is 1 (elements lane, lane +
// 32, ...) or a 16-byte pack's count (Pack16<T>::N), one vector access per run, where the
// launcher finds C a whole number of packs and the pointers aligned (can_pack16): a warp then
// moves 512 bytes per access instead of 64 (bf16), a quarter or an eighth of the memory
// instructions. Every kernel of a launch takes the same V, so the staged and the plain kernels
// sum the same elements in the same order, to the same bits.
__device__ __forceinline__ int run_start() { return int(threadIdx.x % 32); }

// Mean, rstd and out of one row x whose lane sums s the caller took (each lane reads back only
// the elements it summed itself, so a row staged by its own lanes needs no synchronisation);
// returns {mean, rstd} for the caller to store, and, when amax is given, takes the row's amax
// (every lane of the warp calls it).
template <int V, typename T>
__device__ __forceinline__ float2 layernorm_row(T* o, const T* x, const T* w, const T* b, float s,
                                                int C, unsigned* amax) {
  const float m = warp_sum(s) / C;
  float v = 0;
  for (int c = run_start() * V; c < C; c += 32 * V) {
    const Run<T, V> xr = load_run<V>(x + c);
    for (int j = 0; j < V; j++) {
      const float d = ld(xr.v[j]) - m;
      v += d * d;
    }
  }
  const float var = warp_sum(v) / C;
  const float r = 1.f / sqrtf(var + 1e-5f);
  unsigned mx = 0;
  for (int c = run_start() * V; c < C; c += 32 * V) {
    const Run<T, V> xr = load_run<V>(x + c), wr = load_run<V>(w + c), br = load_run<V>(b + c);
    Run<T, V> out;
    for (int j = 0; j < V; j++) {
      out.v[j] = st<T>((ld(xr.v[j]) - m) * r * ld(wr.v[j]) + ld(br.v[j]));
      mx = max_bits(mx, abs_bits(out.v[j]));
    }
    store_run<V>(o + c, out);
  }
  if (amax) warp_amax(mx, amax);
  return make_float2(m, r);
}

// The sum of a row's elements in the lane's order, each run copied to `copy` (a staged row) when
// it is not null, or, given a second row bb, res = round(x + bb) stored to `res` (and `copy`) and
// summed instead.
template <int V, typename T>
__device__ __forceinline__ float lane_sum(const T* x, const T* bb, T* res, T* copy, int C) {
  float s = 0;
  for (int c = run_start() * V; c < C; c += 32 * V) {
    Run<T, V> r = load_run<V>(x + c);
    if (bb) {
      const Run<T, V> br = load_run<V>(bb + c);
      for (int j = 0; j < V; j++) r.v[j] = st<T>(ld(r.v[j]) + ld(br.v[j]));
      store_run<V>(res + c, r);
    }
    if (copy) store_run<V>(copy + c, r);
    for (int j = 0; j < V; j++) s += ld(r.v[j]);
  }
  return s;
}

// blockDim.x = 32 * warps; row = blockIdx.x * warps + warp. With bb: res = a + bb (rounded to T
// and stored), out = layernorm(res); each lane rereads only the res elements it wrote itself,
// so no synchronisation is needed between the add and the statistics.
template <typename T, int V>
__device__ __forceinline__ void layernorm_rows(T* res, T* out, float* mean, float* rstd, const T* a,
                                               const T* bb, const T* w, const T* b, int N, int C,
                                               unsigned* amax) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = size_t(row) * C;
  const T* x = bb ? res + off : a + off;
  const float s =
      lane_sum<V, T>(a + off, bb ? bb + off : nullptr, bb ? res + off : nullptr, nullptr, C);
  const float2 ms = layernorm_row<V>(out + off, x, w, b, s, C, amax);
  if (threadIdx.x % 32 == 0) {
    mean[row] = ms.x;
    rstd[row] = ms.y;
  }
}
template <typename T, int V>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w,
                                         const T* b, int N, int C, unsigned* amax) {
  layernorm_rows<T, V>(nullptr, out, mean, rstd, inp, nullptr, w, b, N, C, amax);
}
template <typename T, int V>
__global__ void residual_layernorm_forward_kernel(T* res, T* out, float* mean, float* rstd,
                                                  const T* a, const T* bb, const T* w, const T* b,
                                                  int N, int C, unsigned* amax) {
  layernorm_rows<T, V>(res, out, mean, rstd, a, bb, w, b, N, C, amax);
}

// The same kernel with the block's rows and the weight and bias staged in shared memory
// (dynamic_smem: the rows' mean and rstd in kStatBytes, then w, b and one row of C per warp,
// all in T): each row is read from global memory once, the weight and bias once per block,
// where the kernel above reads the row three times and the weight and bias once per row, and
// the block's means and rstds leave in one access each, not a sector per row. The arithmetic is
// the plain kernel's, value for value (a staged element is the element itself), so they compute
// the same bits. The launcher takes it when a block's rows fit (layernorm.cu's staged_warps).
constexpr int kMaxStagedWarps = 16;
constexpr size_t kStatBytes = 2 * kMaxStagedWarps * sizeof(float);
template <typename T, int V>
__device__ __forceinline__ void layernorm_rows_staged(T* res, T* out, float* mean, float* rstd,
                                                      const T* a, const T* bb, const T* w,
                                                      const T* b, int N, int C, unsigned* amax) {
  float* stat = dynamic_smem<float>();
  T* sw = reinterpret_cast<T*>(dynamic_smem<unsigned char>() + kStatBytes);
  T* sb = sw + C;
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    store_run<V>(sw + c, load_run<V>(w + c));
    store_run<V>(sb + c, load_run<V>(b + c));
  }
  __syncthreads();
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, row0 = blockIdx.x * warps;
  const int rows = min(warps, N - row0);
  if (warp < rows) {
    T* x = sb + C + size_t(warp) * C;
    const size_t off = size_t(row0 + warp) * C;
    const float s =
        lane_sum<V, T>(a + off, bb ? bb + off : nullptr, bb ? res + off : nullptr, x, C);
    const float2 ms = layernorm_row<V>(out + off, x, sw, sb, s, C, amax);
    if (threadIdx.x % 32 == 0) {
      stat[warp] = ms.x;
      stat[kMaxStagedWarps + warp] = ms.y;
    }
  }
  __syncthreads();
  if (int(threadIdx.x) < rows) {
    mean[row0 + threadIdx.x] = stat[threadIdx.x];
    rstd[row0 + threadIdx.x] = stat[kMaxStagedWarps + threadIdx.x];
  }
}
template <typename T, int V>
__global__ void layernorm_forward_smem_kernel(T* out, float* mean, float* rstd, const T* inp,
                                              const T* w, const T* b, int N, int C,
                                              unsigned* amax) {
  layernorm_rows_staged<T, V>(nullptr, out, mean, rstd, inp, nullptr, w, b, N, C, amax);
}
template <typename T, int V>
__global__ void residual_layernorm_forward_smem_kernel(T* res, T* out, float* mean, float* rstd,
                                                       const T* a, const T* bb, const T* w,
                                                       const T* b, int N, int C, unsigned* amax) {
  layernorm_rows_staged<T, V>(res, out, mean, rstd, a, bb, w, b, N, C, amax);
}

// dinp += ... of one row whose dout and inp lie at d and x (global memory, or the row staged in
// shared memory by the lanes that read it back), the lane's sums first: dnorm and dnorm * norm
// over the lane's runs. With sd and sx (the fused kernel), each run of dout and inp read from
// global memory is also staged there for the dw/db sums.
template <int V, typename T>
__device__ __forceinline__ void layernorm_backward_row(T* dinp, const T* d, const T* x, T* sd,
                                                       T* sx, const T* w, float m, float s, int C) {
  float a = 0, bsum = 0;
  for (int c = run_start() * V; c < C; c += 32 * V) {
    const Run<T, V> dr = load_run<V>(d + c), xr = load_run<V>(x + c), wr = load_run<V>(w + c);
    if (sd) {
      store_run<V>(sd + c, dr);
      store_run<V>(sx + c, xr);
    }
    for (int j = 0; j < V; j++) {
      const float norm = (ld(xr.v[j]) - m) * s;
      const float dnorm = ld(wr.v[j]) * ld(dr.v[j]);
      a += dnorm;
      bsum += dnorm * norm;
    }
  }
  const float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
  if (sd) {  // read back what this lane staged
    d = sd;
    x = sx;
  }
  for (int c = run_start() * V; c < C; c += 32 * V) {
    const Run<T, V> dr = load_run<V>(d + c), xr = load_run<V>(x + c), wr = load_run<V>(w + c);
    Run<T, V> di = load_run<V>(dinp + c);
    for (int j = 0; j < V; j++) {
      const float norm = (ld(xr.v[j]) - m) * s;
      const float dnorm = ld(wr.v[j]) * ld(dr.v[j]);
      di.v[j] = st<T>(ld(di.v[j]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
    }
    store_run<V>(dinp + c, di);
  }
}

// dinp += ..., one warp per row.
template <typename T, int V>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                               const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = size_t(row) * C;
  layernorm_backward_row<V>(dinp + off, dout + off, inp + off, static_cast<T*>(nullptr),
                            static_cast<T*>(nullptr), w, mean[row], rstd[row], C);
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

// grid = chunks of `rows` rows, blockDim.x = 32 * warps; pdw and pdb are (chunks, C) fp32.
// dynamic_smem (the launcher's backward_smem): the chunk's dw and db sums (C fp32 each), mean and
// rstd of the round's rows (4 fp32 per warp, 2 used: what follows stays 16-byte aligned), the
// weight (C of T), a row of dout and of inp per warp (2 C of T each). Each round a warp per row
// writes dinp; then each thread adds its channels over the round's staged rows in row order:
// the partial kernel's sums, bit for bit, with dout and inp read once.
template <typename T, int V>
__global__ void layernorm_backward_fused_kernel(T* dinp, float* pdw, float* pdb, const T* dout,
                                                const T* inp, const T* w, const float* mean,
                                                const float* rstd, int N, int C, int rows) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
  float* aw = dynamic_smem<float>();
  float* ab = aw + C;
  float* stat = ab + C;
  T* sw = reinterpret_cast<T*>(stat + 4 * warps);
  T* sd = sw + C + size_t(warp) * 2 * C;
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V)
    store_run<V>(sw + c, load_run<V>(w + c));
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
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
      const size_t off = size_t(base + warp) * C;
      layernorm_backward_row<V>(dinp + off, dout + off, inp + off, sd, sd + C, sw, stat[2 * warp],
                                stat[2 * warp + 1], C);
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
