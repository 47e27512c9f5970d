// matmul.cu: GEMMs through cuBLASLt (fp32 accumulation, bias in the epilogue), with a plain
// cuBLAS fallback, and the deterministic bias gradient (kernels/matmul.cuh).
//
// Everything is written row-major: D(M,N) = op(A) op(B). cuBLAS is column-major, and a
// row-major matrix is its own transpose read column-major, so the call computes
// D^T = op(B)^T op(A)^T: the operands swap places, keep their transpose flags, and M and N
// swap. fp32 GEMMs use CUBLAS_COMPUTE_32F (true fp32, no TF32), 16-bit ones the tensor cores
// with fp32 accumulation: the numerics of the CPU reference's widened sgemm.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/matmul.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: throw Error(strf("cuda backend: no GEMM in %s", dtype_name(t)));
  }
}

// Largest power of two (<= 256) that divides the address: what cuBLASLt may assume.
uint32_t alignment(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

// cuBLASLt, column-major: D(m,n) = opA(A) opB(B) + beta D (+ bias(m)). Returns false when
// cuBLASLt offers no algorithm (nothing is enqueued then).
// With gelu_aux (column-major m x n, leading dimension ldd, D's type), the epilogue is
// GELU_AUX_BIAS: aux = AB + bias (the pre-activation), D = gelu(aux) in fp32 before the
// rounding.
bool lt_gemm(Ctx& c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
             cudaDataType_t ab, const void* A, int lda, const void* B, int ldb, cudaDataType_t dt,
             void* D, int ldd, float beta, const void* bias, void* gelu_aux = nullptr) {
  // cuBLASLt takes no alignment hint for the bias vector: leave odd ones to the fallback.
  if (bias && alignment(bias) < 16) return false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  TG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (gelu_aux) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int32_t bias_type = int32_t(dt);
    int64_t aux_ld = ldd;
    TG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    TG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof bias_type));
    TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                   &gelu_aux, sizeof gelu_aux));
    TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &aux_ld, sizeof aux_ld));
  } else if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    int32_t bias_type = int32_t(dt);
    TG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    TG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof bias_type));
  }
  // Stored shapes (column-major): A is m x k, or k x m when transposed; B is k x n or n x k.
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, ta == CUBLAS_OP_N ? m : k,
                                             ta == CUBLAS_OP_N ? k : m, lda));
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, tb == CUBLAS_OP_N ? k : n,
                                             tb == CUBLAS_OP_N ? n : k, ldb));
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd));
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = c.lt_workspace_bytes;
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // Split-K partial sums only in fp32 (the compute type): the in-place and output-type
  // schemes would round partial sums to a 16-bit D, a rounding the CPU reference never does.
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  const uint32_t al_a = alignment(A), al_b = alignment(B), al_d = alignment(D);
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(c.lt, op, la, lb, ld, ld, pref, 1, &result, &found);
  bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (ok) {
    const float alpha = 1.f;
    // A refusal at launch (nothing was enqueued) also falls back.
    ok = cublasLtMatmul(c.lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &result.algo,
                        c.lt_workspace, c.lt_workspace_bytes, c.stream) == CUBLAS_STATUS_SUCCESS;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  return ok;
}

}  // namespace

void gemm(Ctx& c, bool trans_a, bool trans_b, int M, int N, int K, DType ab, const void* A, int lda,
          const void* B, int ldb, DType dt, void* D, int ldd, float beta, const void* bias) {
  const cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Column-major: D^T(N, M) = op(B)^T op(A)^T.
  if (!c.opt.gemm_fallback && lt_gemm(c, opb, opa, N, M, K, cuda_type(ab), B, ldb, A, lda,
                                      cuda_type(dt), D, ldd, beta, bias))
    return;
  // Fallback: fp32 products into scratch, then beta * D + acc + bias rounded once.
  if (ldd != N) throw Error("cuda backend: GEMM fallback needs a contiguous output");
  float* acc = static_cast<float*>(c.scratch(kScratchAcc, size_t(M) * N * sizeof(float)));
  const float one = 1.f, zero = 0.f;
  TG_CUBLAS_CHECK(cublasGemmEx(c.blas, opb, opa, N, M, K, &one, B, cuda_type(ab), ldb, A,
                               cuda_type(ab), lda, &zero, acc, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  const size_t n = size_t(M) * N;
  dispatch("gemm", dt, [&](auto tag) {
    using E = decltype(tag);
    matmul_epilogue_kernel<E, E><<<c.grid(n, 256), 256, 0, c.stream>>>(
        static_cast<E*>(D), acc, static_cast<const E*>(bias), beta, M, N);
    TG_LAUNCH_CHECK();
  });
}

bool gemm_bias_gelu(Ctx& c, int M, int N, int K, DType t, const void* A, const void* B,
                    const void* bias, void* pre, void* out) {
  // cuBLASLt wants the aux leading dimension a multiple of 8 and aligned vectors.
  if (c.opt.gemm_fallback || !c.opt.gelu_epilogue || N % 8 || alignment(bias) < 16 ||
      alignment(pre) < 16 || alignment(out) < 16)
    return false;
  // Row-major out(M,N) = A(M,K) B(N,K)^T + bias: column-major out^T = B A^T.
  return lt_gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, cuda_type(t), B, K, A, K, cuda_type(t), out,
                 N, 0.f, bias, pre);
}

void bias_backward(Ctx& c, DType t, void* dbias, const void* dout, int N, int OC) {
  const int rows = bias_rows_per_chunk(N), chunks = (N + rows - 1) / rows;
  float* partial = static_cast<float*>(c.scratch(kScratchPartialA, size_t(chunks) * OC * 4));
  dispatch("bias_backward", t, [&](auto tag) {
    using E = decltype(tag);
    dim3 grid(unsigned((OC + 255) / 256), unsigned(chunks));
    bias_backward_partial_kernel<E>
        <<<grid, 256, 0, c.stream>>>(partial, static_cast<const E*>(dout), N, OC, rows);
    TG_LAUNCH_CHECK();
    bias_backward_final_kernel<E><<<unsigned((OC + 255) / 256), 256, 0, c.stream>>>(
        static_cast<E*>(dbias), partial, chunks, OC);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
