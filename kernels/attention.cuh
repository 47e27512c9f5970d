// attention.cuh: causal multi-head self-attention around cuBLAS batched GEMMs
// (src/backends/cuda/attention.cu runs the GEMMs). qkv(B,T,3C) = [q | k | v], head size hs = C/NH,
// scale = 1/sqrt(hs):
//   forward:  q,k,v -> (B,NH,T,hs) (permute);  S = scale q k^T (GEMM, stored in T);
//             att = causal softmax(S) rows (zeros above the diagonal, stored in T);
//             y = att v (GEMM);  out(B,T,C) <- y (unpermute)
//   backward: dy <- dout (permute);  dP = dy v^T (GEMM, stored in T);  dv = att^T dy (GEMM);
//             dS = att * (dP - sum_u att dP) * scale (softmax backward, stored in T);
//             dq = dS k, dk = dS^T q (GEMMs);  dqkv <- dq, dk, dv (unpermute)
// S and dP are the GEMMs' fp32 sums rounded once to T (bf16, fp16 or fp32), as the CPU twin
// rounds them. The GEMMs run per row block (src/backends/attention_blocks.h) over the columns
// up to the block's end only, so S and dP hold values only there; the softmax kernels read
// u <= t. att is written in full, its zeros included: the GEMMs read them inside the diagonal
// blocks and the quantization telemetry reads the whole tensor. dS is written up to the end of
// the row's block, what dq and dk read; the rest of it is never read.
// The softmax kernels give one warp to each row (b, h, t). The `_smem`
// kernels (the launcher's choice wherever a warp's row fits the block's shared memory: T up to
// 12288 in bf16) stage the row in shared memory and read each score, dP and att value from
// global memory once; the others read the row twice (backward) or three times (forward). Both
// compute the same values in the same order: att and dS are bit-identical between them.
// Attention without the T x T probabilities is cuDNN's (cuda.attention=cudnn,
// src/backends/cuda/attention_cudnn.cu); this path stays the reference.
#pragma once
#include "amax.cuh"
#include "common.cuh"

namespace tg::gpu {

// Where element i of a (B,NH,T,hs) tensor lies in a (B,T,rows,NH,hs) one: rows = 3 for qkv
// (then + C, + 2C reach k and v), 1 for (B,T,C).
__device__ __forceinline__ size_t head_to_row_index(size_t i, int T_, int NH, int hs, int rows) {
  const int d = int(i % hs);
  const int t = int((i / hs) % T_);
  const int h = int((i / (size_t(hs) * T_)) % NH);
  const int b = int(i / (size_t(hs) * T_ * NH));
  return (size_t(b) * T_ + t) * rows * NH * hs + size_t(h) * hs + d;
}

// The permutes move runs of V elements (common.cuh's Run) a thread: V a 16-byte pack's count
// where hs is a whole number of packs and the tensors are aligned (a run then stays inside one
// head's row on both sides), else 1; i counts runs, i * V is the first element's index in
// (B,NH,T,hs). Copies, so the values are the same either way.

// q, k, v (B,NH,T,hs) from qkv (B,T,3,NH,hs).
template <typename T, int V>
__global__ void attention_permute_kernel(T* q, T* k, T* v, const T* qkv, int B, int T_, int NH,
                                         int hs) {
  const size_t n = size_t(B) * NH * T_ * hs / V;
  const int C = NH * hs;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t e = i * V, src = head_to_row_index(e, T_, NH, hs, 3);
    store_run<V>(q + e, load_run<V>(qkv + src));
    store_run<V>(k + e, load_run<V>(qkv + src + C));
    store_run<V>(v + e, load_run<V>(qkv + src + 2 * C));
  }
}

// out (B,T,NH,hs) = y (B,NH,T,hs); amax (device, when given): the max of |out|'s bits, for the
// attention projection's quantizer (kernels/amax.cuh).
template <typename T, int V>
__global__ void attention_unpermute_kernel(T* out, const T* y, int B, int T_, int NH, int hs,
                                           unsigned* amax) {
  const size_t n = size_t(B) * NH * T_ * hs / V;
  __shared__ unsigned wmax[32];
  unsigned m = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const Run<T, V> r = load_run<V>(y + i * V);
    store_run<V>(out + head_to_row_index(i * V, T_, NH, hs, 1), r);
    for (int k = 0; k < V; k++) m = max_bits(m, abs_bits(r.v[k]));
  }
  if (amax) block_amax(m, amax, wmax);  // (block-uniform)
}

// y (B,NH,T,hs) = out (B,T,NH,hs): the inverse of the unpermute (for dout).
template <typename T, int V>
__global__ void attention_permute_one_kernel(T* y, const T* out, int B, int T_, int NH, int hs) {
  const size_t n = size_t(B) * NH * T_ * hs / V;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    store_run<V>(y + i * V, load_run<V>(out + head_to_row_index(i * V, T_, NH, hs, 1)));
  }
}

// dqkv (B,T,3,NH,hs) from dq, dk, dv (B,NH,T,hs): the inverse of the permute.
template <typename T, int V>
__global__ void attention_unpermute_qkv_kernel(T* dqkv, const T* dq, const T* dk, const T* dv,
                                               int B, int T_, int NH, int hs) {
  const size_t n = size_t(B) * NH * T_ * hs / V;
  const int C = NH * hs;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t e = i * V, dst = head_to_row_index(e, T_, NH, hs, 3);
    store_run<V>(dqkv + dst, load_run<V>(dq + e));
    store_run<V>(dqkv + dst + C, load_run<V>(dk + e));
    store_run<V>(dqkv + dst + 2 * C, load_run<V>(dv + e));
  }
}

// The softmax kernels read and write their rows in runs of V elements a lane (common.cuh's Run):
// run r covers columns [r V, r V + V), lane l takes runs l, l + 32, ..., and its sums take the
// elements in that order. V is a 16-byte pack's count where T is a whole number of packs and
// the tensors are aligned (rows then start aligned), else 1 (columns lane, lane + 32, ...). A
// run that holds column t also holds up to V - 1 columns past it: the row block's end, a
// multiple of 16 (src/backends/attention_blocks.h), is past them, so the GEMMs wrote them; they
// are read and left out of every sum. The staged and plain kernels of one V compute the same
// bits.

// att row (bh, t) = softmax over u <= t of S (already scaled), zeros for u > t.
// rows = B*NH*T; one warp per row.
template <typename T, int V>
__global__ void attention_softmax_forward_kernel(T* att, const T* S, int rows, int T_) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int t = row % T_;
  const T* s = S + size_t(row) * T_;
  T* a = att + size_t(row) * T_;
  float m = -INFINITY;
  for (int u0 = lane * V; u0 <= t; u0 += 32 * V) {
    const Run<T, V> x = load_run<V>(s + u0);
    for (int j = 0; j < V && u0 + j <= t; j++) m = fmaxf(m, ld(x.v[j]));
  }
  m = warp_max(m);
  float sum = 0;
  for (int u0 = lane * V; u0 <= t; u0 += 32 * V) {
    const Run<T, V> x = load_run<V>(s + u0);
    for (int j = 0; j < V && u0 + j <= t; j++) sum += expf(ld(x.v[j]) - m);
  }
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
  for (int u0 = lane * V; u0 < T_; u0 += 32 * V) {
    Run<T, V> out;
    if (u0 <= t) {
      const Run<T, V> x = load_run<V>(s + u0);
      for (int j = 0; j < V; j++) out.v[j] = st<T>(u0 + j <= t ? expf(ld(x.v[j]) - m) * inv : 0.f);
    } else {
      for (int j = 0; j < V; j++) out.v[j] = st<T>(0.f);
    }
    store_run<V>(a + u0, out);
  }
}

// attention_softmax_forward_kernel's att, each score read from global memory once: the warp's
// lanes copy their scores, widened to fp32, into the warp's T floats of dynamic shared memory as
// they take the max, replace each by exp(s - m) as they sum them (each lane in the order of the
// three-pass kernel's sum), and write the probabilities from there. A lane reads back only what
// it staged itself, so no barrier is needed. Shared memory: T floats a warp.
template <typename T, int V>
__global__ void attention_softmax_forward_smem_kernel(T* att, const T* S, int rows, int T_) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= rows) return;
  const int t = row % T_;
  const T* s = S + size_t(row) * T_;
  float* e = dynamic_smem<float>() + size_t(warp) * T_;
  float m = -INFINITY;
  for (int u0 = lane * V; u0 <= t; u0 += 32 * V) {
    const Run<T, V> x = load_run<V>(s + u0);
    for (int j = 0; j < V && u0 + j <= t; j++) {
      e[u0 + j] = ld(x.v[j]);
      m = fmaxf(m, e[u0 + j]);
    }
  }
  m = warp_max(m);
  float sum = 0;
  for (int u0 = lane * V; u0 <= t; u0 += 32 * V)
    for (int j = 0; j < V && u0 + j <= t; j++) {
      const float x = expf(e[u0 + j] - m);
      e[u0 + j] = x;
      sum += x;
    }
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
  T* a = att + size_t(row) * T_;
  for (int u0 = lane * V; u0 < T_; u0 += 32 * V) {
    Run<T, V> out;
    for (int j = 0; j < V; j++) out.v[j] = st<T>(u0 + j <= t ? e[u0 + j] * inv : 0.f);
    store_run<V>(a + u0, out);
  }
}

// The end of row t's columns that the GEMMs after the softmax backward read: the end of its row
// block of `block` rows (src/backends/attention_blocks.h).
__device__ __forceinline__ int attention_block_end(int t, int T_, int block) {
  return min(T_, (t / block + 1) * block);
}

// dS row = att * (dP - sum_u att dP) * scale for u <= t, zeros for t < u < the end of the
// row's block (nothing after it is read).
template <typename T, int V>
__global__ void attention_softmax_backward_kernel(T* dS, const T* dP, const T* att, int rows,
                                                  int T_, int block, float scale) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int t = row % T_, end = attention_block_end(t, T_, block);
  const T* dp = dP + size_t(row) * T_;
  const T* a = att + size_t(row) * T_;
  T* ds = dS + size_t(row) * T_;
  float dot = 0;
  for (int u0 = lane * V; u0 <= t; u0 += 32 * V) {
    const Run<T, V> x = load_run<V>(a + u0), y = load_run<V>(dp + u0);
    for (int j = 0; j < V && u0 + j <= t; j++) dot += ld(x.v[j]) * ld(y.v[j]);
  }
  dot = warp_sum(dot);
  for (int u0 = lane * V; u0 < end; u0 += 32 * V) {
    Run<T, V> out;
    if (u0 <= t) {
      const Run<T, V> x = load_run<V>(a + u0), y = load_run<V>(dp + u0);
      for (int j = 0; j < V; j++)
        out.v[j] = st<T>(u0 + j <= t ? ld(x.v[j]) * (ld(y.v[j]) - dot) * scale : 0.f);
    } else {
      for (int j = 0; j < V; j++) out.v[j] = st<T>(0.f);
    }
    store_run<V>(ds + u0, out);
  }
}

// attention_softmax_backward_kernel's dS, each dP and att value read from global memory once:
// the warp's lanes copy their dP (T elements a warp) and att (T elements a warp, after every
// warp's dP) into dynamic shared memory as they sum the dot product (each lane in the
// three-pass kernel's order), then write dS from there. A lane reads back only what it staged
// itself: no barrier. Shared memory: 2 T sizeof(T) bytes a warp.
template <typename T, int V>
__global__ void attention_softmax_backward_smem_kernel(T* dS, const T* dP, const T* att, int rows,
                                                       int T_, int block, float scale) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int row = blockIdx.x * warps + warp;
  if (row >= rows) return;
  const int t = row % T_, end = attention_block_end(t, T_, block);
  const T* dp = dP + size_t(row) * T_;
  const T* a = att + size_t(row) * T_;
  T* sp = dynamic_smem<T>() + size_t(warp) * T_;
  T* sa = dynamic_smem<T>() + size_t(warps + warp) * T_;
  float dot = 0;
  for (int u0 = lane * V; u0 <= t; u0 += 32 * V) {
    const Run<T, V> x = load_run<V>(a + u0), y = load_run<V>(dp + u0);
    store_run<V>(sa + u0, x);
    store_run<V>(sp + u0, y);
    for (int j = 0; j < V && u0 + j <= t; j++) dot += ld(x.v[j]) * ld(y.v[j]);
  }
  dot = warp_sum(dot);
  T* ds = dS + size_t(row) * T_;
  for (int u0 = lane * V; u0 < end; u0 += 32 * V) {
    Run<T, V> out;
    for (int j = 0; j < V; j++)
      out.v[j] = st<T>(u0 + j <= t ? ld(sa[u0 + j]) * (ld(sp[u0 + j]) - dot) * scale : 0.f);
    store_run<V>(ds + u0, out);
  }
}

}  // namespace tg::gpu
