// encoder.cuh: token + position embedding.
//   forward:  out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c]       (one rounding per store)
//   backward: dwte[tokens[b,t], :] += dout[b,t,:];  dwpe[t, :] += dout[b,t,:]
// The forward: a thread per (t, group of K channels) walks b, so that wpe is read once, not
// once per sequence, and a warp's token ids fall in one sector (K = 16-byte packs where the
// launcher found them aligned, 1 otherwise).
// The backward adds row by row in ascending (b,t) order and rounds after every add, exactly
// as the CPU reference does, so the 16-bit results match it bit for bit and every run gives
// the same bits (no atomics). dwpe: one thread per (t, c) walks b. dwte: the host groups the
// positions by token ("buckets", ascending within a bucket); one lane per (bucket, channel
// group) walks its bucket.
#pragma once
#include "common.cuh"

namespace tg::gpu {

// K elements of T at p: one 16-byte pack (K = Pack16<T>::N) or one element (K = 1).
template <typename T, int K>
struct ChannelGroup {
  T v[K];
};
template <typename T, int K>
__device__ __forceinline__ ChannelGroup<T, K> load_group(const T* p) {
  ChannelGroup<T, K> g;
  if constexpr (K == 1) {
    g.v[0] = *p;
  } else {
    static_assert(K == Pack16<T>::N);
    const Pack16<T> x = load16(p);
    for (int k = 0; k < K; k++) g.v[k] = x.v[k];
  }
  return g;
}
template <typename T, int K>
__device__ __forceinline__ void store_group(T* p, const ChannelGroup<T, K>& g) {
  if constexpr (K == 1) {
    *p = g.v[0];
  } else {
    Pack16<T> x;
    for (int k = 0; k < K; k++) x.v[k] = g.v[k];
    store16(p, x);
  }
}

// Grid-stride over the T_ C / K (t, channel group) pairs; C a multiple of K.
template <typename T, int K>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int B, int T_, int C) {
  const int groups = C / K;
  const size_t n = size_t(T_) * groups;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int t = int(i / groups), c = int(i % groups) * K;
    const ChannelGroup<T, K> p = load_group<T, K>(wpe + size_t(t) * C + c);
    for (int b = 0; b < B; b++) {
      const size_t bt = size_t(b) * T_ + t;
      const ChannelGroup<T, K> w = load_group<T, K>(wte + size_t(tokens[bt]) * C + c);
      ChannelGroup<T, K> o;
      for (int k = 0; k < K; k++) o.v[k] = st<T>(ld(w.v[k]) + ld(p.v[k]));
      store_group<T, K>(out + bt * C + c, o);
    }
  }
}

// grid.x covers T*C; thread (t, c) adds dout over b = 0..B-1 in order.
template <typename T>
__global__ void encoder_backward_wpe_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(T_) * C) return;
  const int t = int(i / C), c = int(i % C);
  T acc = dwpe[i];
  for (int b = 0; b < B; b++) acc = st<T>(ld(acc) + ld(dout[(size_t(b) * T_ + t) * C + c]));
  dwpe[i] = acc;
}

// Bucket k holds positions bucket_pos[bucket_start[k] .. bucket_start[k+1]) (ascending), all
// with token bucket_tok[k]. A warp per bucket, blockDim.x / 32 (at most 32) buckets per block:
// the block reads its buckets' token ids and starts together (a sector per 8 buckets, not a
// sector per warp and index), then the first kWtePositions of its buckets' positions, which
// lie together (a sector per 8 positions, not one per bucket of rare tokens' one or two); each
// warp takes its bucket's positions 32 at a time from there (past them, from global memory),
// handed round by shuffles. Lane l carries kWteGroups channel groups of K (C a multiple of K)
// at once, groups l, l + 32, ...: a common token's long bucket is one warp's chain of adds,
// and the loads of a position's groups (GPT-2's C 768 in bf16: 3) are in flight together.
inline constexpr int kWteGroups = 4, kWtePositions = 256;
template <typename T, int K>
__global__ void encoder_backward_wte_kernel(T* dwte, const T* dout, const int32_t* bucket_tok,
                                            const int32_t* bucket_start, const int32_t* bucket_pos,
                                            int nb, int C) {
  __shared__ int32_t s_tok[32], s_start[33], s_pos[kWtePositions];
  const int warps = int(blockDim.x / 32), lane = int(threadIdx.x % 32), w = int(threadIdx.x / 32);
  const int k0 = int(blockIdx.x) * warps, i = int(threadIdx.x);
  if (i < warps && k0 + i < nb) s_tok[i] = bucket_tok[k0 + i];
  if (i <= warps && k0 + i <= nb) s_start[i] = bucket_start[k0 + i];
  __syncthreads();
  const int base = s_start[0], staged = min(s_start[min(warps, nb - k0)] - base, kWtePositions);
  for (int j = i; j < staged; j += int(blockDim.x)) s_pos[j] = bucket_pos[base + j];
  __syncthreads();
  if (k0 + w >= nb) return;  // the whole warp: its shuffles below see no exited lane
  T* row = dwte + size_t(s_tok[w]) * C;
  const int begin = s_start[w], end = s_start[w + 1];
  // Every lane through every span of kWteGroups x 32 groups (the shuffles need the whole warp);
  // rows over such a span (C over 1024 in bf16) read the positions again per span.
  for (int c0 = 0; c0 < C; c0 += kWteGroups * 32 * K) {
    ChannelGroup<T, K> acc[kWteGroups]{};
    for (int g = 0; g < kWteGroups; g++) {
      const int c = c0 + (g * 32 + lane) * K;
      if (c < C) acc[g] = load_group<T, K>(row + c);
    }
    for (int j0 = begin; j0 < end; j0 += 32) {
      const int j = j0 + lane;
      const int32_t mine = j >= end ? 0 : j - base < staged ? s_pos[j - base] : bucket_pos[j];
      const int m = min(32, end - j0);
      for (int q = 0; q < m; q++) {
        const T* d = dout + size_t(__shfl_sync(0xffffffffu, mine, q)) * C;
#pragma unroll
        for (int g = 0; g < kWteGroups; g++) {
          const int c = c0 + (g * 32 + lane) * K;
          if (c >= C) continue;
          const ChannelGroup<T, K> x = load_group<T, K>(d + c);
          for (int k = 0; k < K; k++) acc[g].v[k] = st<T>(ld(acc[g].v[k]) + ld(x.v[k]));
        }
      }
    }
    for (int g = 0; g < kWteGroups; g++) {
      const int c = c0 + (g * 32 + lane) * K;
      if (c < C) store_group<T, K>(row + c, acc[g]);
    }
  }
}

}  // namespace tg::gpu
