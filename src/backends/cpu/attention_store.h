// attention_store.h: what attention.cpp and its reference loops (attention_reference.cpp) share
// outside the arithmetic that must round differently in each: storing one head's gradients,
// and rounding a score or dP where the GPU's cuBLAS path stores it.
#pragma once
#include <cstddef>

#include "storage.h"

namespace tg::cpu {

// x rounded to the storage type S and widened back: the materialised attention's scores and dP,
// which the CUDA backend's GEMMs write in the compute type (their fp32 sums rounded once). For S
// the accumulation type itself (fp32 and fp64 runs, the lse twin): x, unchanged.
template <typename S, typename A>
inline A round_as(A x) {
  return A(ld(st<S>(x)));
}

// One head's dq, dk, dv (widened, T x hs each) stored into dqkv(B,T,3C), rounded once.
template <typename T, typename A>
void store_head_grads(T* dqkv, int b, int h, int T_, int C, int hs, const A* dq, const A* dk,
                      const A* dv) {
  for (int t = 0; t < T_; t++) {
    T* d = dqkv + (size_t(b) * T_ + t) * 3 * C + h * hs;
    for (int i = 0; i < hs; i++) {
      d[i] = st<T>(dq[size_t(t) * hs + i]);
      d[C + i] = st<T>(dk[size_t(t) * hs + i]);
      d[2 * C + i] = st<T>(dv[size_t(t) * hs + i]);
    }
  }
}

}  // namespace tg::cpu
