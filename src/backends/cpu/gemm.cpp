// gemm: OpenBLAS, or a blocked loop nest (the only one in a TG_NO_BLAS build; selectable at
// run time as cpu.gemm=loops: its rounding does not depend on the CPU, OpenBLAS's does).
//
// The loop nest packs a block of op(B) (KB x NB) row-major, then for each row i of C adds
// op(A)(i,k) * packed row k into C's row, k ascending: the inner loop is an axpy over
// contiguous memory, which the compiler vectorises without reassociating any sum, and the
// packed block (128 x 256 floats = 128 KiB) stays in L2 while all M rows stream past it.
#include "gemm.h"

#include <algorithm>
#include <vector>

#ifndef TG_NO_BLAS
#include <cblas.h>
#endif

namespace tg::cpu {

namespace {
template <typename T>
void gemm_loops(bool ta, bool tb, int M, int N, int K, const T* A, int lda, const T* B, int ldb,
                T beta, T* C, int ldc) {
  constexpr int KB = 128, NB = 256;
  for (int i = 0; i < M; i++) {
    T* c = C + size_t(i) * ldc;
    if (beta == T(0))
      std::fill(c, c + N, T(0));
    else if (beta != T(1))
      for (int j = 0; j < N; j++) c[j] *= beta;
  }
  std::vector<T> pack(size_t(KB) * NB);
  for (int j0 = 0; j0 < N; j0 += NB) {
    const int nb = std::min(NB, N - j0);
    for (int k0 = 0; k0 < K; k0 += KB) {
      const int kb = std::min(KB, K - k0);
      // pack[k][j] = op(B)(k0 + k, j0 + j)
      for (int k = 0; k < kb; k++) {
        T* p = pack.data() + size_t(k) * nb;
        if (!tb) {
          const T* b = B + size_t(k0 + k) * ldb + j0;
          for (int j = 0; j < nb; j++) p[j] = b[j];
        } else {
          for (int j = 0; j < nb; j++) p[j] = B[size_t(j0 + j) * ldb + (k0 + k)];
        }
      }
      for (int i = 0; i < M; i++) {
        T* c = C + size_t(i) * ldc + j0;
        for (int k = 0; k < kb; k++) {
          const T a = ta ? A[size_t(k0 + k) * lda + i] : A[size_t(i) * lda + (k0 + k)];
          const T* p = pack.data() + size_t(k) * nb;
          for (int j = 0; j < nb; j++) c[j] += a * p[j];
        }
      }
    }
  }
}
}  // namespace

namespace {
bool g_use_loops =
#ifdef TG_NO_BLAS
    true;
#else
    false;
#endif
}  // namespace

bool have_blas() {
#ifdef TG_NO_BLAS
  return false;
#else
  return true;
#endif
}

void set_gemm_loops(bool loops) { g_use_loops = loops || !have_blas(); }

namespace {
#ifndef TG_NO_BLAS
void blas_gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
void blas_gemm(bool ta, bool tb, int M, int N, int K, const double* A, int lda, const double* B,
               int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0, A, lda, B, ldb, beta, C, ldc);
}
#endif

template <typename T>
void gemm_any(bool ta, bool tb, int M, int N, int K, const T* A, int lda, const T* B, int ldb,
              T beta, T* C, int ldc) {
#ifndef TG_NO_BLAS
  if (!g_use_loops) return blas_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
#endif
  gemm_loops(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  gemm_any(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
void gemm(bool ta, bool tb, int M, int N, int K, const double* A, int lda, const double* B, int ldb,
          double beta, double* C, int ldc) {
  gemm_any(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void blas_set_threads(int n) {
#ifndef TG_NO_BLAS
  openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

const char* blas_name() { return g_use_loops ? "built-in loops" : "OpenBLAS"; }

}  // namespace tg::cpu
