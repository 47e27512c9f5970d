// layernorm: out = (x - mean) * rstd * w + b over each row of C, rstd = 1/sqrt(var + 1e-5),
// with the biased variance (as PyTorch). mean and rstd are saved for the backward pass:
//   dnorm = dout * w
//   dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
//   dw += sum_rows dout * norm,  db += sum_rows dout
// dw and db are reduced per thread over a fixed block of rows and then added in thread
// order, so the result does not depend on timing.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops.h"

namespace tg::cpu {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C) {
  const T eps = T(1e-5);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    T m = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    T var = 0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    T s = T(1) / std::sqrt(var + eps);
    T* o = out + size_t(n) * C;
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
  int nthreads = omp_get_max_threads();
  std::vector<T> partial(size_t(nthreads) * 2 * C, T(0));
#pragma omp parallel num_threads(nthreads)
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int n0 = int(int64_t(N) * id / nt), n1 = int(int64_t(N) * (id + 1) / nt);
    T* pdw = partial.data() + size_t(id) * 2 * C;
    T* pdb = pdw + C;
    for (int n = n0; n < n1; n++) {
      const T* x = inp + size_t(n) * C;
      const T* d = dout + size_t(n) * C;
      T* di = dinp + size_t(n) * C;
      T m = mean[n], s = rstd[n];
      T dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int c = 0; c < C; c++) {
        T norm = (x[c] - m) * s;
        T dnorm = w[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      for (int c = 0; c < C; c++) {
        T norm = (x[c] - m) * s;
        T dnorm = w[c] * d[c];
        pdb[c] += d[c];
        pdw[c] += norm * d[c];
        di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  for (int t = 0; t < nthreads; t++) {
    const T* pdw = partial.data() + size_t(t) * 2 * C;
    for (int c = 0; c < C; c++) {
      dw[c] += pdw[c];
      db[c] += pdw[C + c];
    }
  }
}

#define TG_INSTANTIATE(T)                                                                 \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int); \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, \
                                      const T*, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
