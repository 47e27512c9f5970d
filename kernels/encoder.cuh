// encoder.cuh: token + position embedding.
//   forward:  out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c]       (one rounding per store)
//   backward: dwte[tokens[b,t], :] += dout[b,t,:];  dwpe[t, :] += dout[b,t,:]
// The backward adds row by row in ascending (b,t) order and rounds after every add, exactly
// as the CPU reference does, so the 16-bit results match it bit for bit and every run gives
// the same bits (no atomics). dwpe: one thread per (t, c) walks b. dwte: the host groups the
// positions by token ("buckets", ascending within a bucket); one thread per (bucket, c)
// walks its bucket.
#pragma once
#include "common.cuh"

namespace tg::gpu {

template <typename T>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int BT, int T_, int C) {
  const size_t n = size_t(BT) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int bt = int(i / C), c = int(i % C);
    const int t = bt % T_;
    out[i] = st<T>(ld(wte[size_t(tokens[bt]) * C + c]) + ld(wpe[size_t(t) * C + c]));
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

// grid = (buckets, ceil(C / blockDim.x)). Bucket k holds positions
// bucket_pos[bucket_start[k] .. bucket_start[k+1]) (ascending), all with token bucket_tok[k].
template <typename T>
__global__ void encoder_backward_wte_kernel(T* dwte, const T* dout, const int32_t* bucket_tok,
                                            const int32_t* bucket_start, const int32_t* bucket_pos,
                                            int C) {
  const int k = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  T* e = dwte + size_t(bucket_tok[k]) * C + c;
  T acc = *e;
  for (int j = bucket_start[k]; j < bucket_start[k + 1]; j++)
    acc = st<T>(ld(acc) + ld(dout[size_t(bucket_pos[j]) * C + c]));
  *e = acc;
}

}  // namespace tg::gpu
