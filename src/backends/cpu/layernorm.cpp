// layernorm: out = (x - mean) * rstd * w + b over each row of C, rstd = 1/sqrt(var + 1e-5),
// with the biased variance (as PyTorch). mean and rstd are kept in the accumulation type for
// the backward pass:
//   dnorm = dout * w
//   dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
//   dw += sum_rows dout * norm,  db += sum_rows dout
// dw and db are reduced per thread over a fixed block of rows and then added in thread
// order, so the result does not depend on timing. The two sums of products over a row are
// written as the fused multiply-adds they are: left to g++, an AVX-512 build vectorises them
// as in-order sums of rounded products and an AVX2 build fuses them, so the same source
// rounded differently on the two (the fp16 regression fixture, tests/test_regression.cpp).
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops.h"
#include "parallel.h"

namespace tg::cpu {

template <typename T>
void layernorm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* w, const T* b,
                       int N, int C) {
  using A = acc_t<T>;
  const A eps = A(1e-5);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    A m = 0;
    for (int c = 0; c < C; c++) m += ld(x[c]);
    m /= C;
    A var = 0;
    for (int c = 0; c < C; c++) var += (ld(x[c]) - m) * (ld(x[c]) - m);
    var /= C;
    A s = A(1) / std::sqrt(var + eps);
    T* o = out + size_t(n) * C;
    for (int c = 0; c < C; c++) o[c] = st<T>((ld(x[c]) - m) * s * ld(w[c]) + ld(b[c]));
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const acc_t<T>* mean, const acc_t<T>* rstd, int N, int C) {
  using A = acc_t<T>;
  const int nthreads = num_parts();
  std::vector<A> partial(size_t(nthreads) * 2 * C, A(0));
  for_each_part([&](int id, int nt) {
    int n0 = int(int64_t(N) * id / nt), n1 = int(int64_t(N) * (id + 1) / nt);
    A* pdw = partial.data() + size_t(id) * 2 * C;
    A* pdb = pdw + C;
    for (int n = n0; n < n1; n++) {
      const T* x = inp + size_t(n) * C;
      const T* d = dout + size_t(n) * C;
      T* di = dinp + size_t(n) * C;
      A m = mean[n], s = rstd[n];
      A dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int c = 0; c < C; c++) {
        A norm = (ld(x[c]) - m) * s;
        A dnorm = ld(w[c]) * ld(d[c]);
        dnorm_mean += dnorm;
        dnorm_norm_mean = std::fma(dnorm, norm, dnorm_norm_mean);
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      for (int c = 0; c < C; c++) {
        A norm = (ld(x[c]) - m) * s;
        A dnorm = ld(w[c]) * ld(d[c]);
        pdb[c] += ld(d[c]);
        pdw[c] += norm * ld(d[c]);
        di[c] = st<T>(ld(di[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
      }
    }
  });
  for (int c = 0; c < C; c++) {
    A sw = 0, sb = 0;
    for (int t = 0; t < nthreads; t++) {
      sw += partial[size_t(t) * 2 * C + c];
      sb += partial[size_t(t) * 2 * C + C + c];
    }
    dw[c] = st<T>(ld(dw[c]) + sw);
    db[c] = st<T>(ld(db[c]) + sb);
  }
}

#define TG_INSTANTIATE(T)                                                                         \
  template void layernorm_forward<T>(T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*, int, \
                                     int);                                                        \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const acc_t<T>*,  \
                                      const acc_t<T>*, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
