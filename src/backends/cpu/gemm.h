// gemm.h: the one BLAS entry point of the CPU backend.
//
// C(M,N) = op(A)(M,K) op(B)(K,N) + beta C, row-major, single-threaded (callers split the
// work across OpenMP threads themselves). With OpenBLAS this is cblas_sgemm / cblas_dgemm;
// built with NO_BLAS=1 (TG_NO_BLAS) it is gemm.cpp's own blocked loop nest, so the CPU
// reference also runs where OpenBLAS is not installed (the GPU machine).
#pragma once

namespace tg::cpu {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);
// cpu.gemm: true selects the loop nest (rounding independent of the CPU), false OpenBLAS
// (ignored without it). Process-wide; make_backend sets it from the config.
void set_gemm_loops(bool loops);
bool have_blas();
// Threads BLAS itself may use (1 inside the OpenMP-split ops; a no-op without OpenBLAS).
void blas_set_threads(int n);
// "OpenBLAS" or "built-in loops", for the benchmark's header.
const char* blas_name();

}  // namespace tg::cpu
