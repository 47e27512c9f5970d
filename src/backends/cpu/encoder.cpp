// encoder: out[b,t,:] = wte[token[b,t],:] + wpe[t,:].
// Backward scatters dout into the rows of dwte picked by the tokens and into dwpe. The
// threads split the channels, so repeated tokens never race and the sum order is fixed.
#include <omp.h>

#include "ops.h"

namespace tg::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                     int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T_; bt++) {
    const T* e = wte + size_t(tokens[bt]) * C;
    const T* p = wpe + size_t(bt % T_) * C;
    T* o = out + size_t(bt) * C;
    for (int c = 0; c < C; c++) o[c] = st<T>(ld(e[c]) + ld(p[c]));
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_,
                      int C) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int c0 = int(int64_t(C) * id / nt), c1 = int(int64_t(C) * (id + 1) / nt);
    for (int bt = 0; bt < B * T_; bt++) {
      const T* d = dout + size_t(bt) * C;
      T* e = dwte + size_t(tokens[bt]) * C;
      T* p = dwpe + size_t(bt % T_) * C;
      for (int c = c0; c < c1; c++) {
        e[c] = st<T>(ld(e[c]) + ld(d[c]));
        p[c] = st<T>(ld(p[c]) + ld(d[c]));
      }
    }
  }
}

#define TG_INSTANTIATE(T)                                                                  \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int); \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
