// flash_attention.cuh: tiled, flash-style causal self-attention for training (opt-in,
// cuda.attention=flash; src/backends/cuda/attention.cu launches it). Same math as
// src/backends/cpu/attention.cpp, without the (B, NH, T, T) probabilities: the forward keeps the
// per-row logsumexp lse = m + log(l) (fp32, (B, NH, T)) and the backward recomputes
// p = exp(s - lse) from q, k and lse.
//
// Tiles of kTile = 32 rows (= the warp size), 4 warps per block, each warp owning 8 rows of the
// block's tile; tiles go through shared memory in fp32 (widened once on load), every sum is
// fp32 and each output is rounded once on store. Head sizes hs = 32 KJ, KJ = 1..4 (lane owns
// dimensions lane + 32 j of a row's accumulator). Any T: rows and keys past T load as zeros
// and are masked.
//   forward:  block (query tile, h, b): Q tile in shared; for each K/V tile up to the
//             diagonal, lane = key: s = scale q.k (u <= t), online softmax (running max m and
//             sum l, accumulator rescaled by exp(m_old - m_new)), p broadcast by shuffles into
//             acc += p v.  out = acc / l,  lse = m + log l.
//   delta:    D_t = sum_i dout_t,i out_t,i (one warp per row; out as stored).
//   dk/dv:    block (key tile, h, b): K/V tile in shared; for each Q/dO tile from the
//             diagonal on, lane = query: p = exp(scale q.k - lse_t), dp = dout_t . v,
//             ds = p (dp - D_t) scale;  dv_u += sum_t p dout_t,  dk_u += sum_t ds q_t.
//   dq:       block (query tile, h, b): for each K/V tile up to the diagonal, lane = key:
//             the same p and ds;  dq_t += sum_u ds k_u.
// Deterministic: every accumulator belongs to one lane and is summed in a fixed order; no
// atomics. The shared-memory bytes of each kernel are flash_*_smem(hs) (above 48 KiB for the
// larger heads: the launcher raises the kernel's limit).
#pragma once
#include "common.cuh"

namespace tg::gpu::flash {

constexpr int kTile = 32;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = kTile / kWarps;  // rows of a tile per warp

inline size_t forward_smem(int hs) { return size_t(kTile) * (3 * hs + 1) * sizeof(float); }
inline size_t dkv_smem(int hs) {
  return (size_t(kTile) * (4 * hs + 2) + 2 * kTile) * sizeof(float);
}
inline size_t dq_smem(int hs) { return size_t(kTile) * (4 * hs + 2) * sizeof(float); }

// dst[r * stride + d] = src row (t0 + r), columns [col, col + hs) of a row-major (T, ld)
// matrix, zeros past T.
template <typename T>
__device__ __forceinline__ void load_tile(float* dst, int stride, const T* src, size_t src_ld,
                                          int t0, int T_, int hs) {
  for (int i = threadIdx.x; i < kTile * hs; i += blockDim.x) {
    const int r = i / hs, d = i % hs, t = t0 + r;
    dst[r * stride + d] = t < T_ ? ld(src[size_t(t) * src_ld + d]) : 0.f;
  }
}

// The block's dynamic shared memory as consecutive float arrays of lengths len[0..N).
template <int N>
struct SmemArrays {
  float* p[N];
};
template <int N>
__device__ __forceinline__ SmemArrays<N> smem_arrays(const int (&len)[N]) {
  SmemArrays<N> a;
  float* next = dynamic_smem<float>();
#pragma unroll
  for (int i = 0; i < N; i++) {
    a.p[i] = next;
    next += len[i];
  }
  return a;
}

template <typename T, int KJ>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(T* out, float* lse, const T* qkv, int T_, int NH, float scale) {
  constexpr int hs = 32 * KJ, KS = hs + 1;  // K rows padded: lane = key reads a column
  const SmemArrays<3> sm = smem_arrays<3>({kTile * hs, kTile * KS, kTile * hs});
  float *Qs = sm.p[0], *Ks = sm.p[1], *Vs = sm.p[2];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q0 = blockIdx.x * kTile, h = blockIdx.y, b = blockIdx.z, C = NH * hs;
  const size_t ld3 = 3 * size_t(C);
  const T* base = qkv + size_t(b) * T_ * ld3 + size_t(h) * hs;
  load_tile(Qs, hs, base, ld3, q0, T_, hs);
  float m[kRows], l[kRows], acc[kRows][KJ];
#pragma unroll
  for (int r = 0; r < kRows; r++) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int j = 0; j < KJ; j++) acc[r][j] = 0.f;
  }
  const int last = min(q0 + kTile, T_) - 1;  // the block's last query
  for (int k0 = 0; k0 <= last; k0 += kTile) {
    __syncthreads();  // the previous K/V tile is consumed (and Qs written)
    load_tile(Ks, KS, base + C, ld3, k0, T_, hs);
    load_tile(Vs, hs, base + 2 * C, ld3, k0, T_, hs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRows; rr++) {
      const int r = warp * kRows + rr, t = q0 + r;
      if (t >= T_ || k0 > t) continue;  // uniform over the warp
      const float* q = Qs + r * hs;
      const float* k = Ks + lane * KS;
      float dot = 0.f;
#pragma unroll 8
      for (int d = 0; d < hs; d++) dot += q[d] * k[d];
      const float s = k0 + lane <= t ? dot * scale : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(s));  // finite: key k0 <= t is in the tile
      const float corr = expf(m[rr] - m_new), p = expf(s - m_new);
      l[rr] = l[rr] * corr + warp_sum(p);
#pragma unroll
      for (int j = 0; j < KJ; j++) acc[rr][j] *= corr;
      const int n = min(kTile, t - k0 + 1);
      for (int u = 0; u < n; u++) {
        const float pu = __shfl_sync(0xffffffffu, p, u);
#pragma unroll
        for (int j = 0; j < KJ; j++) acc[rr][j] += pu * Vs[u * hs + lane + 32 * j];
      }
      m[rr] = m_new;
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRows; rr++) {
    const int t = q0 + warp * kRows + rr;
    if (t >= T_) continue;
    const float inv = 1.f / l[rr];
    T* o = out + (size_t(b) * T_ + t) * C + size_t(h) * hs;
#pragma unroll
    for (int j = 0; j < KJ; j++) o[lane + 32 * j] = st<T>(acc[rr][j] * inv);
    if (lane == 0) lse[(size_t(b) * NH + h) * T_ + t] = m[rr] + logf(l[rr]);
  }
}

// D[(b, h, t)] = dout_t . out_t over the head's hs dimensions; one warp per row.
template <typename T>
__global__ void delta_kernel(float* D, const T* out, const T* dout, int B, int T_, int NH, int hs) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= B * NH * T_) return;
  const int t = row % T_, h = (row / T_) % NH, b = row / (T_ * NH);
  const size_t off = (size_t(b) * T_ + t) * NH * hs + size_t(h) * hs;
  float s = 0.f;
  for (int d = lane; d < hs; d += 32) s += ld(dout[off + d]) * ld(out[off + d]);
  s = warp_sum(s);
  if (lane == 0) D[row] = s;
}

template <typename T, int KJ>
__global__ void __launch_bounds__(kThreads)
    backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                        int T_, int NH, float scale) {
  constexpr int hs = 32 * KJ, KS = hs + 1;  // Q, dO rows padded: lane = query
  const SmemArrays<6> sm =
      smem_arrays<6>({kTile * hs, kTile * hs, kTile * KS, kTile * KS, kTile, kTile});
  float *Ks = sm.p[0], *Vs = sm.p[1], *Qs = sm.p[2], *Gs = sm.p[3], *Ls = sm.p[4], *Ds = sm.p[5];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int u0 = blockIdx.x * kTile, h = blockIdx.y, b = blockIdx.z, C = NH * hs;
  const size_t ld3 = 3 * size_t(C), bh = size_t(b) * NH + h;
  const T* base = qkv + size_t(b) * T_ * ld3 + size_t(h) * hs;
  const T* gbase = dout + size_t(b) * T_ * C + size_t(h) * hs;
  load_tile(Ks, hs, base + C, ld3, u0, T_, hs);
  load_tile(Vs, hs, base + 2 * C, ld3, u0, T_, hs);
  float dk[kRows][KJ], dv[kRows][KJ];
#pragma unroll
  for (int r = 0; r < kRows; r++)
#pragma unroll
    for (int j = 0; j < KJ; j++) dk[r][j] = dv[r][j] = 0.f;
  for (int q0 = u0; q0 < T_; q0 += kTile) {
    __syncthreads();
    load_tile(Qs, KS, base, ld3, q0, T_, hs);
    load_tile(Gs, KS, gbase, size_t(C), q0, T_, hs);
    if (threadIdx.x < kTile) {
      const int t = q0 + threadIdx.x;
      Ls[threadIdx.x] = t < T_ ? lse[bh * T_ + t] : 0.f;
      Ds[threadIdx.x] = t < T_ ? D[bh * T_ + t] : 0.f;
    }
    __syncthreads();
    const int t = q0 + lane;
#pragma unroll
    for (int rr = 0; rr < kRows; rr++) {
      const int r = warp * kRows + rr, u = u0 + r;
      if (u >= T_) continue;  // uniform over the warp
      const float* k = Ks + r * hs;
      const float* v = Vs + r * hs;
      const float* q = Qs + lane * KS;
      const float* g = Gs + lane * KS;
      float sd = 0.f, dp = 0.f;
#pragma unroll 8
      for (int d = 0; d < hs; d++) {
        sd += q[d] * k[d];
        dp += g[d] * v[d];
      }
      const float p = u <= t && t < T_ ? expf(sd * scale - Ls[lane]) : 0.f;
      const float ds = p * (dp - Ds[lane]) * scale;
      for (int i = 0; i < kTile; i++) {
        const float pi = __shfl_sync(0xffffffffu, p, i);
        const float dsi = __shfl_sync(0xffffffffu, ds, i);
#pragma unroll
        for (int j = 0; j < KJ; j++) {
          dv[rr][j] += pi * Gs[i * KS + lane + 32 * j];
          dk[rr][j] += dsi * Qs[i * KS + lane + 32 * j];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRows; rr++) {
    const int u = u0 + warp * kRows + rr;
    if (u >= T_) continue;
    T* d = dqkv + (size_t(b) * T_ + u) * ld3 + size_t(h) * hs;
#pragma unroll
    for (int j = 0; j < KJ; j++) {
      d[C + lane + 32 * j] = st<T>(dk[rr][j]);
      d[2 * C + lane + 32 * j] = st<T>(dv[rr][j]);
    }
  }
}

template <typename T, int KJ>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                       int T_, int NH, float scale) {
  constexpr int hs = 32 * KJ, KS = hs + 1;  // K, V rows padded: lane = key
  const SmemArrays<4> sm = smem_arrays<4>({kTile * hs, kTile * hs, kTile * KS, kTile * KS});
  float *Qs = sm.p[0], *Gs = sm.p[1], *Ks = sm.p[2], *Vs = sm.p[3];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q0 = blockIdx.x * kTile, h = blockIdx.y, b = blockIdx.z, C = NH * hs;
  const size_t ld3 = 3 * size_t(C), bh = size_t(b) * NH + h;
  const T* base = qkv + size_t(b) * T_ * ld3 + size_t(h) * hs;
  load_tile(Qs, hs, base, ld3, q0, T_, hs);
  load_tile(Gs, hs, dout + size_t(b) * T_ * C + size_t(h) * hs, size_t(C), q0, T_, hs);
  float dq[kRows][KJ], L[kRows], Dr[kRows];
#pragma unroll
  for (int rr = 0; rr < kRows; rr++) {
    const int t = q0 + warp * kRows + rr;
    L[rr] = t < T_ ? lse[bh * T_ + t] : 0.f;
    Dr[rr] = t < T_ ? D[bh * T_ + t] : 0.f;
#pragma unroll
    for (int j = 0; j < KJ; j++) dq[rr][j] = 0.f;
  }
  const int last = min(q0 + kTile, T_) - 1;
  for (int k0 = 0; k0 <= last; k0 += kTile) {
    __syncthreads();
    load_tile(Ks, KS, base + C, ld3, k0, T_, hs);
    load_tile(Vs, KS, base + 2 * C, ld3, k0, T_, hs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRows; rr++) {
      const int r = warp * kRows + rr, t = q0 + r;
      if (t >= T_ || k0 > t) continue;  // uniform over the warp
      const float* q = Qs + r * hs;
      const float* g = Gs + r * hs;
      const float* k = Ks + lane * KS;
      const float* v = Vs + lane * KS;
      float sd = 0.f, dp = 0.f;
#pragma unroll 8
      for (int d = 0; d < hs; d++) {
        sd += q[d] * k[d];
        dp += g[d] * v[d];
      }
      const float p = k0 + lane <= t ? expf(sd * scale - L[rr]) : 0.f;
      const float ds = p * (dp - Dr[rr]) * scale;
      const int n = min(kTile, t - k0 + 1);
      for (int u = 0; u < n; u++) {
        const float dsu = __shfl_sync(0xffffffffu, ds, u);
#pragma unroll
        for (int j = 0; j < KJ; j++) dq[rr][j] += dsu * Ks[u * KS + lane + 32 * j];
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRows; rr++) {
    const int t = q0 + warp * kRows + rr;
    if (t >= T_) continue;
    T* d = dqkv + (size_t(b) * T_ + t) * ld3 + size_t(h) * hs;
#pragma unroll
    for (int j = 0; j < KJ; j++) d[lane + 32 * j] = st<T>(dq[rr][j]);
  }
}

}  // namespace tg::gpu::flash
