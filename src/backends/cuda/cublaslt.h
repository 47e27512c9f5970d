// cublaslt.h: the one cuBLASLt wrapper every GEMM of the CUDA backend goes through (matmul.cu's
// GEMMs, the GELU epilogue, attention.cu's batched GEMMs, the quantized linears' native GEMMs of
// matmul_native.cu).
//
// A GEMM is described by an LtGemm (column-major, cuBLAS's convention); lt_matmul builds its
// descriptors and asks cuBLASLt's heuristic once per configuration (both cached under a key of
// everything the descriptors and preferences say except the pointers themselves: handle,
// types, transposes, shape, leading dimensions, epilogue, scaling, pointer alignments,
// workspace size; each call sets its own pointers on the cached descriptors) and runs it on
// the context's stream with the context's workspace.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tg::gpu {

// What every cuBLASLt call needs from the backend; not an owner.
struct LtContext {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // 256-byte aligned
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

enum class LtEpilogue { kNone, kBias, kGeluAuxBias };

// Column-major D(m,n) = alpha * [a_scale * b_scale *] op(A) op(B) [+ bias(m)] + beta * D
// (with scale modes: each element of op(A) and op(B) times its own block's scale).
// Stored shapes: A is m x k (k x m when transa), B is k x n (n x k when transb). alpha and
// beta point to floats on the host, or on the device with device_scalars. With batch > 1,
// `batch` such products, the i-th at A + i stride_a, B + i stride_b, D + i stride_d (strides
// in elements; CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET).
struct LtGemm {
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, d_type = CUDA_R_32F;
  bool transa = false, transb = false;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  const void* A = nullptr;
  const void* B = nullptr;
  void* D = nullptr;
  LtEpilogue epilogue = LtEpilogue::kNone;
  const void* bias = nullptr;  // kBias, kGeluAuxBias: length m, D's type
  void* gelu_aux = nullptr;    // kGeluAuxBias: the pre-activation, m x n with ld ldd
  // FP8 / FP4 operands: their descales (device). Per-tensor fp32 by default; with a scale mode
  // (CUBLASLT_MATMUL_DESC_A_SCALE_MODE / B_SCALE_MODE, cublasLtMatmulMatrixScale_t; 0 is the
  // per-tensor scalar) a scale tensor in that mode's layout (matmul_native.cu).
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  int32_t a_scale_mode = 0, b_scale_mode = 0;
  bool fast_accum = false;  // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM
  bool device_scalars = false;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_d = 0;
};

// The GEMM D(m,n) = op(A) op(B); epilogue, scaling and scalars left to fill in.
inline LtGemm lt_gemm_of(cudaDataType_t at, cudaDataType_t bt, cudaDataType_t dt, bool ta, bool tb,
                         int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                         void* D, int ldd) {
  LtGemm g;
  g.a_type = at;
  g.b_type = bt;
  g.d_type = dt;
  g.transa = ta;
  g.transb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldd = ldd;
  g.A = A;
  g.B = B;
  g.D = D;
  return g;
}

// Runs g; returns false, enqueuing nothing, when cuBLASLt has no algorithm for it or refuses
// each one the heuristic offered at launch (the caller falls back; lt_last_refusal says
// which). Descriptor errors throw.
bool lt_matmul(const LtContext& c, const LtGemm& g);

// Why the calling thread's last lt_matmul returned false, for error messages.
const std::string& lt_last_refusal();

// The GEMMs the calling thread ran since the last call, "; "-separated, then forgotten: lt_matmul
// adds its algorithm ("lt algo 66 tile 20 [f8]": cuBLASLt's algorithm and tile ids, and the
// operands' type), and the cuBLAS fallbacks name themselves through lt_log (the per-op
// profile's algorithm column, src/backends/profiling_backend.h).
std::string lt_take_log();
void lt_log(const char* what);

// Largest power of two (at most 256) dividing the address: what cuBLASLt may assume.
inline uint32_t pointer_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

}  // namespace tg::gpu
