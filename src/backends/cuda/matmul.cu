// matmul.cu: GEMMs through the cuBLASLt wrapper (cublaslt.h; fp32 accumulation, bias in the
// epilogue), with a plain cuBLAS fallback, and the deterministic bias gradient
// (kernels/matmul.cuh).
//
// Everything is written row-major: D(M,N) = op(A) op(B). cuBLAS is column-major, and a
// row-major matrix is its own transpose read column-major, so the call computes
// D^T = op(B)^T op(A)^T: the operands swap places, keep their transpose flags, and M and N
// swap. fp32 GEMMs use CUBLAS_COMPUTE_32F (true fp32, no TF32), 16-bit ones the tensor cores
// with fp32 accumulation: the numerics of the CPU reference's widened sgemm.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cublaslt.h"
#include "kernels/matmul.cuh"
#include "launch.h"
#include "scaled.h"

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

// Column-major D(m,n) = opA(A) opB(B) + beta D (+ bias(m)) through the cuBLASLt wrapper.
// Returns false when cuBLASLt offers no algorithm (nothing is enqueued then).
// With gelu_aux (column-major m x n, leading dimension ldd, D's type), the epilogue is
// GELU_AUX_BIAS: aux = AB + bias (the pre-activation), D = gelu(aux) in fp32 before the
// rounding.
bool lt_gemm(Ctx& c, bool ta, bool tb, int m, int n, int k, cudaDataType_t ab, const void* A,
             int lda, const void* B, int ldb, cudaDataType_t dt, void* D, int ldd, float beta,
             const void* bias, void* gelu_aux = nullptr) {
  static const float one = 1.f;
  LtGemm g = lt_gemm_of(ab, ab, dt, ta, tb, m, n, k, A, lda, B, ldb, D, ldd);
  g.bias = bias;
  g.gelu_aux = gelu_aux;
  g.epilogue = gelu_aux ? LtEpilogue::kGeluAuxBias : bias ? LtEpilogue::kBias : LtEpilogue::kNone;
  g.alpha = &one;
  g.beta = &beta;
  return lt_matmul(c.lt_context(), g);
}

}  // namespace

void gemm(Ctx& c, bool trans_a, bool trans_b, int M, int N, int K, DType ab, const void* A, int lda,
          const void* B, int ldb, DType dt, void* D, int ldd, float beta, const void* bias) {
  // Column-major: D^T(N, M) = op(B)^T op(A)^T.
  if (!c.opt.gemm_fallback && lt_gemm(c, trans_b, trans_a, N, M, K, cuda_type(ab), B, ldb, A, lda,
                                      cuda_type(dt), D, ldd, beta, bias))
    return;
  const cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Fallback: fp32 products into scratch, then beta * D + acc + bias rounded once.
  if (ldd != N) throw Error("cuda backend: GEMM fallback needs a contiguous output");
  float* acc = static_cast<float*>(c.scratch(kScratchAcc, size_t(M) * N * sizeof(float)));
  const float one = 1.f, zero = 0.f;
  lt_log("cublasGemmEx + epilogue kernel");
  TG_CUBLAS_CHECK(cublasGemmEx(c.blas, opb, opa, N, M, K, &one, B, cuda_type(ab), ldb, A,
                               cuda_type(ab), lda, &zero, acc, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  const size_t n = size_t(M) * N;
  dispatch("gemm", dt, [&](auto tag) {
    using E = decltype(tag);
    launch(matmul_epilogue_kernel<E, E>, c.grid(n, 256), 256, 0, c.stream, static_cast<E*>(D), acc,
           static_cast<const E*>(bias), beta, M, N);
    TG_LAUNCH_CHECK();
  });
}

bool gemm_bias_gelu(Ctx& c, int M, int N, int K, DType t, const void* A, const void* B,
                    const void* bias, void* pre, void* out) {
  // cuBLASLt wants the aux leading dimension a multiple of 8 and aligned vectors.
  if (c.opt.gemm_fallback || !c.opt.gelu_epilogue || N % 8 || pointer_alignment(bias) < 16 ||
      pointer_alignment(pre) < 16 || pointer_alignment(out) < 16)
    return false;
  // Row-major out(M,N) = A(M,K) B(N,K)^T + bias: column-major out^T = B A^T.
  return lt_gemm(c, true, false, N, M, K, cuda_type(t), B, K, A, K, cuda_type(t), out, N, 0.f, bias,
                 pre);
}

void bias_backward(Ctx& c, DType t, void* dbias, const void* dout, int N, int OC) {
  bias_backward(c, t, dbias, dout, N, OC, nullptr);
}

void bias_backward(Ctx& c, DType t, void* dbias, const void* dout, int N, int OC, unsigned* amax) {
  const int rows = bias_rows_per_chunk(N), chunks = (N + rows - 1) / rows;
  float* partial = static_cast<float*>(c.scratch(kScratchPartialA, size_t(chunks) * OC * 4));
  dispatch("bias_backward", t, [&](auto tag) {
    using E = decltype(tag);
    const auto partials = [&](auto run) {
      constexpr int V = decltype(run)::value;
      const dim3 grid(unsigned((OC / V + kBiasThreads - 1) / kBiasThreads), unsigned(chunks));
      launch(bias_backward_partial_kernel<E, V>, grid, kBiasThreads, 0, c.stream, partial,
             static_cast<const E*>(dout), N, OC, rows, amax);
    };
    with_run_width<E>(can_pack16<E>(size_t(OC), {dout}), partials);  // rows start aligned
    TG_LAUNCH_CHECK();
    launch(bias_backward_final_kernel<E>, unsigned((OC + 255) / 256), 256, 0, c.stream,
           static_cast<E*>(dbias), partial, chunks, OC);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
