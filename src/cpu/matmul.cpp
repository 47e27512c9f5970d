// matmul: out(N,OC) = inp(N,C) W(OC,C)^T + bias, through BLAS (sgemm / dgemm; gemm.h).
// Backward: dinp = dout W (overwrites), dW += dout^T inp, dbias += column sums of dout.
// Each GEMM is split by output rows across the OpenMP threads, every thread calling
// single-threaded BLAS on its block: one thread pool for everything, instead of OpenMP
// and OpenBLAS threads spinning against each other (measured: ~40% of a step on 2 cores).
// The bias sums run over a fixed split of rows per part, added in part order. The row
// blocks are parts (parallel.h), so the bits do not depend on how many threads run them.
#include <vector>

#include "gemm.h"
#include "ops.h"
#include "parallel.h"

namespace tg::cpu {

namespace {
constexpr bool CblasNoTrans = false, CblasTrans = true;
}  // namespace

// Rows [r0, r1) of the M output rows that thread `id` of `nt` owns.
inline void thread_rows(int M, int id, int nt, int* r0, int* r1) {
  *r0 = int(int64_t(M) * id / nt);
  *r1 = int(int64_t(M) * (id + 1) / nt);
}

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  for_each_part([&](int id, int nt) {
    int n0, n1;
    thread_rows(N, id, nt, &n0, &n1);
    if (n1 > n0)
      gemm(CblasNoTrans, CblasTrans, n1 - n0, OC, C, inp + size_t(n0) * C, C, w, C, T(0),
           out + size_t(n0) * OC, OC);
  });
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      T* o = out + size_t(n) * OC;
      for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
  }
}

template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC) {
  for_each_part([&](int id, int nt) {
    int r0, r1;
    thread_rows(N, id, nt, &r0, &r1);
    if (dinp && r1 > r0)
      gemm(CblasNoTrans, CblasNoTrans, r1 - r0, C, OC, dout + size_t(r0) * OC, OC, w, C, T(0),
           dinp + size_t(r0) * C, C);
    thread_rows(OC, id, nt, &r0, &r1);
    if (r1 > r0)
      gemm(CblasTrans, CblasNoTrans, r1 - r0, C, N, dout + r0, OC, inp, C, T(1),
           dw + size_t(r0) * C, C);
  });
  if (dbias) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void bias_backward(T* dbias, const T* dout, int N, int OC) {
  const int nthreads = num_parts();
  std::vector<T> partial(size_t(nthreads) * OC, T(0));
  for_each_part([&](int id, int nt) {
    int n0 = int(int64_t(N) * id / nt), n1 = int(int64_t(N) * (id + 1) / nt);
    T* p = partial.data() + size_t(id) * OC;
    for (int n = n0; n < n1; n++) {
      const T* d = dout + size_t(n) * OC;
      for (int j = 0; j < OC; j++) p[j] += d[j];
    }
  });
  for (int t = 0; t < nthreads; t++)
    for (int j = 0; j < OC; j++) dbias[j] += partial[size_t(t) * OC + j];
}

#define TG_INSTANTIATE(T)                                                                    \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);          \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int); \
  template void bias_backward<T>(T*, const T*, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
