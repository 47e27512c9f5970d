// matmul_fp8.cuh: the FP8 block linears on the GPU (precision.mode = fp8) through cuBLASLt.
//
//   forward  out(N,OC)  = inp(N,C) . W(OC,C)^T + bias     E4M3 x E4M3, fast accumulation
//   dgrad    dinp(N,C)  = dout(N,OC) . W(OC,C)             E5M2 x E4M3
//   wgrad    dW(OC,C)  += dout(N,OC)^T . inp(N,C)          E5M2 x E4M3, beta = 1
//   dbias    dbias(OC) += sum_rows dout                    from the unquantized bf16 dout
//
// fp32 accumulation, bf16 outputs, per-tensor scales (kernels/fp8_cast.cuh). The semantics are
// the CPU emulation's (CpuBackend::matmul_forward_fp8 / matmul_backward_fp8): each operand is
// quantized q = sat(x * s), the product of the dequantized operands is accumulated in fp32 and
// rounded once to bf16 (plus bias, before the rounding). cuBLASLt computes
// D = descale_A * descale_B * sum_k(qA * qB) (+ bias) (+ beta * C): the same value up to the
// order of the fp32 operations.
//
// cuBLASLt is column-major; a row-major (R, K) matrix is a column-major (K, R) one. FP8 GEMMs
// on Hopper accept only the "TN" layout (A transposed, B not), i.e. both operands must be
// stored with the reduction dimension K contiguous. Hence the operands:
//
//   GEMM     m   n   k    A (stored K x M, op T)         B (stored K x N, op N)   D (ld)
//   forward  OC  N   C    W      (OC,C) E4M3, lda C      inp  (N,C)  E4M3, ldb C  out  (OC)
//   dgrad    C   N   OC   W^T    (C,OC) E4M3, lda OC     dout (N,OC) E5M2, ldb OC dinp (C)
//   wgrad    C   OC  N    inp^T  (C,N)  E4M3, lda N      dout^T (OC,N) E5M2, ldb N  dW (C)
//
// so the backward needs the transposed copies W^T, inp^T and dout^T (fp8_cast_transpose
// writes dout and dout^T in one pass). Requirements of cuBLASLt's FP8 kernels (cuBLAS docs,
// cublasLtMatmul, "FP8"): TN layout, compute type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F,
// pointers and leading dimensions 16-byte aligned (FP8: ld multiple of 16 elements). We ask
// N, C and OC to be multiples of 16 and every pointer 16-byte aligned, and check that up front
// (Fp8ShapeError names the GEMM and the shape); fp8_shape_ok() lets a backend decide first.
//
// GPUs without FP8 tensor cores (compute capability < 8.9, e.g. A100) take the fallback:
// each operand is quantized to its fp8 *value* stored in bf16 (fp8_qdq_bf16 with no descale:
// exact), and a bf16 cuBLASLt GEMM multiplies by alpha = descale_A * descale_B read from the
// device (CUBLASLT_POINTER_MODE_DEVICE): the same products and the same scaling as the FP8
// path, no transposed copies needed. fp8_path_for_device() says which path runs (the backend
// prints fp8_path_name() at start); Fp8GemmContext::path can force the fallback (tests do).
//
// Non-finite operands: the CPU turns a whole operand into NaN when its amax is non-finite;
// here every GEMM output is overwritten with NaN (fp8_poison_if_nonfinite) when an operand's
// amax is non-finite, which is the CPU's result (every product involves a NaN).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/fp8_cast.cuh"
#include "src/backend.h"

namespace tg::cuda {

// ---- path selection ----

enum class Fp8Path {
  kFp8,           // cuBLASLt FP8 tensor-core GEMMs (compute capability >= 8.9)
  kBf16Fallback,  // fp8 values in bf16, bf16 GEMMs with the descales as alpha
};

inline const char* fp8_path_name(Fp8Path p) {
  return p == Fp8Path::kFp8 ? "fp8 tensor cores (cuBLASLt E4M3/E5M2 GEMMs)"
                            : "fp8 emulated: quantized values in bf16, bf16 GEMMs (no FP8 "
                              "tensor cores below compute capability 8.9)";
}

// The path for a device: FP8 GEMMs from compute capability 8.9 (Ada, Hopper and later).
inline Fp8Path fp8_path_for_device(int device) {
  int major = 0, minor = 0;
  fp8_check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                 "cudaDeviceGetAttribute(major)");
  fp8_check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                 "cudaDeviceGetAttribute(minor)");
  return major * 10 + minor >= 89 ? Fp8Path::kFp8 : Fp8Path::kBf16Fallback;
}

// Everything the GEMMs need from the backend; not an owner.
struct Fp8GemmContext {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // cuBLASLt workspace (32 MiB is plenty), 256-byte aligned
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  Fp8Path path = Fp8Path::kFp8;
  bool fast_accum_forward = true;    // CUBLASLT_MATMUL_DESC_FAST_ACCUM in the forward GEMM
  bool fast_accum_backward = false;  // ... and in dgrad/wgrad (off: gradients keep precision)
};

struct Fp8ShapeError : Error {
  using Error::Error;
};

inline void fp8_check_lt(cublasStatus_t s, const char* what, const char* gemm) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fp8_fail(std::string("cuBLASLt error ") + std::to_string(int(s)) + " in " + what + " (" + gemm +
             ")");
}

// Why an FP8 GEMM of this shape cannot run (empty: it can).
inline std::string fp8_shape_problem(int N, int C, int OC) {
  char buf[256];
  if (N <= 0 || C <= 0 || OC <= 0) {
    snprintf(buf, sizeof buf, "N=%d, C=%d, OC=%d must be positive", N, C, OC);
    return buf;
  }
  const char* names[3] = {"N", "C", "OC"};
  const int v[3] = {N, C, OC};
  for (int i = 0; i < 3; i++)
    if (v[i] % 16) {
      snprintf(buf, sizeof buf,
               "%s=%d is not a multiple of 16 (cuBLASLt FP8 GEMMs need 16-byte aligned "
               "leading dimensions, and the backward's transposed copies have N as theirs)",
               names[i], v[i]);
      return buf;
    }
  return "";
}
inline bool fp8_shape_ok(int N, int C, int OC) { return fp8_shape_problem(N, C, OC).empty(); }

namespace fp8_detail {

inline void check_shape(const char* gemm, int N, int C, int OC) {
  const std::string p = fp8_shape_problem(N, C, OC);
  if (!p.empty()) {
    char buf[512];
    snprintf(buf, sizeof buf, "fp8 %s GEMM with N=%d, C=%d, OC=%d: %s", gemm, N, C, OC, p.c_str());
    throw Fp8ShapeError(buf);
  }
}
inline void check_ptr(const char* gemm, const char* what, const void* p, int N, int C, int OC) {
  if (p != nullptr && !aligned(p, 16)) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "fp8 %s GEMM with N=%d, C=%d, OC=%d: %s pointer %p is not 16-byte aligned "
             "(cuBLASLt FP8 GEMMs need 16-byte aligned operands)",
             gemm, N, C, OC, what, p);
    throw Fp8ShapeError(buf);
  }
}

// Owns the cuBLASLt descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// One cuBLASLt GEMM, column-major: D(m,n) = alpha * scaleA * scaleB * op(A) op(B) [+ bias]
// + beta * D, D bf16 with leading dimension ldd.
struct LtGemm {
  const char* name = "";
  cudaDataType_t a_type = CUDA_R_16BF, b_type = CUDA_R_16BF;
  const void* A = nullptr;
  const void* B = nullptr;
  bool transa = true, transb = false;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  __nv_bfloat16* D = nullptr;
  const __nv_bfloat16* bias = nullptr;  // bias epilogue (length m) when not null
  const float* a_scale = nullptr;       // FP8: descale of A (device)
  const float* b_scale = nullptr;       // FP8: descale of B (device)
  bool fast_accum = false;              // FP8 only
  bool device_scalars = false;          // alpha/beta are device pointers
  const float* alpha = nullptr;
  const float* beta = nullptr;
};

template <typename T>
inline void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v,
                     const char* gemm) {
  fp8_check_lt(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v),
               "cublasLtMatmulDescSetAttribute", gemm);
}

// Largest power of two (at most 256) dividing the address.
inline uint32_t pointer_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al /= 2;
  return al;
}

// cuBLASLt's heuristic answer per GEMM configuration (the heuristic query costs tens of
// microseconds; a training step makes the same dozen GEMMs over and over). The key holds
// everything the descriptors and preferences say except the pointers themselves.
using AlgoKey = std::array<int64_t, 18>;
struct AlgoEntry {
  bool usable = false;
  cublasLtMatmulAlgo_t algo{};
};
inline std::map<AlgoKey, AlgoEntry>& algo_cache() {
  static std::map<AlgoKey, AlgoEntry> cache;
  return cache;
}
inline std::mutex& algo_cache_mutex() {
  static std::mutex mu;
  return mu;
}
// True when the key was seen; *algo is then its algorithm (when usable).
inline bool cached_algo(const AlgoKey& key, cublasLtMatmulAlgo_t* algo) {
  std::lock_guard<std::mutex> lock(algo_cache_mutex());
  const auto it = algo_cache().find(key);
  if (it == algo_cache().end()) return false;
  *algo = it->second.algo;
  return true;
}
inline bool algo_usable(const AlgoKey& key) {
  std::lock_guard<std::mutex> lock(algo_cache_mutex());
  return algo_cache().at(key).usable;
}
inline void store_algo(const AlgoKey& key, bool usable, const cublasLtMatmulAlgo_t& algo) {
  std::lock_guard<std::mutex> lock(algo_cache_mutex());
  algo_cache()[key] = AlgoEntry{usable, algo};
}

// Runs g; returns false (running nothing) when cuBLASLt has no algorithm for it.
inline bool lt_matmul(const Fp8GemmContext& ctx, const LtGemm& g) {
  LtDescs d;
  const char* nm = g.name;
  fp8_check_lt(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate", nm);
  const cublasOperation_t ta = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, nm);
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, nm);
  if (g.device_scalars) {
    const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, pm, nm);
  }
  const bool fp8 = g.a_type != CUDA_R_16BF;
  if (fp8) {
    const void* as = g.a_scale;
    const void* bs = g.b_scale;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, as, nm);
    set_attr(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, bs, nm);
    const int8_t fa = g.fast_accum ? 1 : 0;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fa, nm);
  }
  if (g.bias) {
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, ep, nm);
    const void* bp = g.bias;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp, nm);
    const int32_t bt = CUDA_R_16BF;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt, nm);
  }
  fp8_check_lt(
      cublasLtMatrixLayoutCreate(&d.a, g.a_type, g.transa ? g.k : g.m, g.transa ? g.m : g.k, g.lda),
      "cublasLtMatrixLayoutCreate(A)", nm);
  fp8_check_lt(
      cublasLtMatrixLayoutCreate(&d.b, g.b_type, g.transb ? g.n : g.k, g.transb ? g.k : g.n, g.ldb),
      "cublasLtMatrixLayoutCreate(B)", nm);
  fp8_check_lt(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_16BF, g.m, g.n, g.ldd),
               "cublasLtMatrixLayoutCreate(C/D)", nm);
  // The heuristic assumes 256-byte aligned pointers unless told otherwise; tell it what they
  // are (a weight or bias slice of a small model may be aligned to 16 bytes only).
  const uint32_t al_a = pointer_alignment(g.A), al_b = pointer_alignment(g.B),
                 al_d = pointer_alignment(g.D);
  const AlgoKey key = {reinterpret_cast<int64_t>(ctx.lt),
                       int64_t(g.a_type),
                       int64_t(g.b_type),
                       g.transa,
                       g.transb,
                       g.m,
                       g.n,
                       g.k,
                       g.lda,
                       g.ldb,
                       g.ldd,
                       g.bias != nullptr,
                       g.fast_accum && fp8,
                       g.device_scalars,
                       al_a,
                       al_b,
                       al_d,
                       int64_t(ctx.workspace_bytes)};
  cublasLtMatmulAlgo_t algo;
  if (!cached_algo(key, &algo)) {
    fp8_check_lt(cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate", nm);
    const uint64_t ws = ctx.workspace_bytes;
    fp8_check_lt(cublasLtMatmulPreferenceSetAttribute(
                     d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                 "cublasLtMatmulPreferenceSetAttribute", nm);
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t al_val[4] = {al_a, al_b, al_d, al_d};
    for (int i = 0; i < 4; i++)
      fp8_check_lt(
          cublasLtMatmulPreferenceSetAttribute(d.pref, al_attr[i], &al_val[i], sizeof al_val[i]),
          "cublasLtMatmulPreferenceSetAttribute(alignment)", nm);
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &res, &found);
    if (hs != CUBLAS_STATUS_NOT_SUPPORTED) fp8_check_lt(hs, "cublasLtMatmulAlgoGetHeuristic", nm);
    const bool ok = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    store_algo(key, ok, res.algo);
    if (!ok) return false;
    algo = res.algo;
  } else if (!algo_usable(key)) {
    return false;
  }
  fp8_check_lt(cublasLtMatmul(ctx.lt, d.op, g.alpha, g.A, d.a, g.B, d.b, g.beta, g.D, d.c, g.D, d.c,
                              &algo, ctx.workspace, ctx.workspace_bytes, ctx.stream),
               "cublasLtMatmul", nm);
  return true;
}

}  // namespace fp8_detail

// dbias(OC) += column sums of bf16 dout(N, OC) (unquantized; fp32 sums, one rounding).
inline void bias_backward_bf16(__nv_bfloat16* dbias, const __nv_bfloat16* dout, int N, int OC,
                               cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  fp8_detail::bias_backward_kernel<<<(OC + 31) / 32, 256, 0, stream>>>(
      reinterpret_cast<uint16_t*>(dbias), reinterpret_cast<const uint16_t*>(dout), N, OC);
  fp8_check_cuda(cudaGetLastError(), "bias_backward_bf16");
}

// ---- the three FP8 GEMMs (FP8 path), on quantized operands ----

// out(N,OC) = descale_inp * descale_w * qinp(N,C) . qw(OC,C)^T + bias(OC) (bias may be null).
// qinp, qw E4M3 row-major. Fast accumulation per ctx.fast_accum_forward.
inline void fp8_gemm_forward(const Fp8GemmContext& ctx, __nv_bfloat16* out, const uint8_t* qinp,
                             const uint8_t* qw, const __nv_bfloat16* bias, int N, int C, int OC,
                             const float* descale_inp, const float* descale_w) {
  using namespace fp8_detail;
  const char* nm = "forward";
  check_shape(nm, N, C, OC);
  check_ptr(nm, "out", out, N, C, OC);
  check_ptr(nm, "inp (E4M3)", qinp, N, C, OC);
  check_ptr(nm, "weight (E4M3)", qw, N, C, OC);
  check_ptr(nm, "bias", bias, N, C, OC);
  static const float one = 1.0f, zero = 0.0f;
  LtGemm g;
  g.name = nm;
  g.a_type = CUDA_R_8F_E4M3;
  g.b_type = CUDA_R_8F_E4M3;
  g.A = qw;
  g.B = qinp;
  g.transa = true;
  g.transb = false;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.lda = C;
  g.ldb = C;
  g.D = out;
  g.ldd = OC;
  g.bias = bias;
  g.a_scale = descale_w;
  g.b_scale = descale_inp;
  g.fast_accum = ctx.fast_accum_forward;
  g.alpha = &one;
  g.beta = &zero;
  if (lt_matmul(ctx, g)) return;
  if (bias) {  // no FP8 algorithm with the bias epilogue: bias rows first, then beta = 1
    fill_bias_rows_kernel<<<grid_for(size_t(N) * OC / 8 + 1), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<uint16_t*>(out), reinterpret_cast<const uint16_t*>(bias), N, OC);
    fp8_check_cuda(cudaGetLastError(), "fp8 forward (bias rows)");
    g.bias = nullptr;
    g.beta = &one;
    if (lt_matmul(ctx, g)) return;
  }
  fp8_fail("cuBLASLt has no FP8 algorithm for the forward GEMM (N=" + std::to_string(N) +
           ", C=" + std::to_string(C) + ", OC=" + std::to_string(OC) + ")");
}

// dinp(N,C) = descale_dout * descale_w * qdout(N,OC) . W, with W given transposed: qwT (C,OC)
// E4M3 row-major; qdout E5M2 row-major. Written (beta = 0).
inline void fp8_gemm_dgrad(const Fp8GemmContext& ctx, __nv_bfloat16* dinp, const uint8_t* qdout,
                           const uint8_t* qwT, int N, int C, int OC, const float* descale_dout,
                           const float* descale_w) {
  using namespace fp8_detail;
  const char* nm = "dgrad";
  check_shape(nm, N, C, OC);
  check_ptr(nm, "dinp", dinp, N, C, OC);
  check_ptr(nm, "dout (E5M2)", qdout, N, C, OC);
  check_ptr(nm, "weight^T (E4M3)", qwT, N, C, OC);
  static const float one = 1.0f, zero = 0.0f;
  LtGemm g;
  g.name = nm;
  g.a_type = CUDA_R_8F_E4M3;
  g.b_type = CUDA_R_8F_E5M2;
  g.A = qwT;
  g.B = qdout;
  g.m = C;
  g.n = N;
  g.k = OC;
  g.lda = OC;
  g.ldb = OC;
  g.D = dinp;
  g.ldd = C;
  g.a_scale = descale_w;
  g.b_scale = descale_dout;
  g.fast_accum = ctx.fast_accum_backward;
  g.alpha = &one;
  g.beta = &zero;
  if (!lt_matmul(ctx, g))
    fp8_fail("cuBLASLt has no FP8 algorithm for the dgrad GEMM (N=" + std::to_string(N) +
             ", C=" + std::to_string(C) + ", OC=" + std::to_string(OC) + ")");
}

// dW(OC,C) (+)= descale_dout * descale_inp * qdout(N,OC)^T . qinp(N,C), both given
// transposed: qdoutT (OC,N) E5M2, qinpT (C,N) E4M3, row-major. accumulate: beta = 1 (the
// Backend contract: parameter gradients add up over micro-batches).
inline void fp8_gemm_wgrad(const Fp8GemmContext& ctx, __nv_bfloat16* dw, const uint8_t* qdoutT,
                           const uint8_t* qinpT, int N, int C, int OC, const float* descale_dout,
                           const float* descale_inp, bool accumulate = true) {
  using namespace fp8_detail;
  const char* nm = "wgrad";
  check_shape(nm, N, C, OC);
  check_ptr(nm, "dweight", dw, N, C, OC);
  check_ptr(nm, "dout^T (E5M2)", qdoutT, N, C, OC);
  check_ptr(nm, "inp^T (E4M3)", qinpT, N, C, OC);
  static const float one = 1.0f, zero = 0.0f;
  LtGemm g;
  g.name = nm;
  g.a_type = CUDA_R_8F_E4M3;
  g.b_type = CUDA_R_8F_E5M2;
  g.A = qinpT;
  g.B = qdoutT;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.lda = N;
  g.ldb = N;
  g.D = dw;
  g.ldd = C;
  g.a_scale = descale_inp;
  g.b_scale = descale_dout;
  g.fast_accum = ctx.fast_accum_backward;
  g.alpha = &one;
  g.beta = accumulate ? &one : &zero;
  if (!lt_matmul(ctx, g))
    fp8_fail("cuBLASLt has no FP8 algorithm for the wgrad GEMM (N=" + std::to_string(N) +
             ", C=" + std::to_string(C) + ", OC=" + std::to_string(OC) + ")");
}

// ---- the fallback GEMMs: bf16 operands holding fp8 values, alpha/beta on the device ----

// out(N,OC) = *alpha * vinp(N,C) . vw(OC,C)^T + bias, beta from *zero / *one (device).
inline void fp8_fallback_forward(const Fp8GemmContext& ctx, __nv_bfloat16* out,
                                 const __nv_bfloat16* vinp, const __nv_bfloat16* vw,
                                 const __nv_bfloat16* bias, int N, int C, int OC,
                                 const float* alpha, const float* zero, const float* one) {
  using namespace fp8_detail;
  LtGemm g;
  g.name = "forward (bf16 fallback)";
  g.A = vw;
  g.B = vinp;
  g.transa = true;
  g.transb = false;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.lda = C;
  g.ldb = C;
  g.D = out;
  g.ldd = OC;
  g.bias = bias;
  g.device_scalars = true;
  g.alpha = alpha;
  g.beta = zero;
  if (lt_matmul(ctx, g)) return;
  if (bias) {
    fill_bias_rows_kernel<<<grid_for(size_t(N) * OC / 8 + 1), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<uint16_t*>(out), reinterpret_cast<const uint16_t*>(bias), N, OC);
    fp8_check_cuda(cudaGetLastError(), "fp8 fallback forward (bias rows)");
    g.bias = nullptr;
    g.beta = one;
    if (lt_matmul(ctx, g)) return;
  }
  fp8_fail("cuBLASLt has no bf16 algorithm for the fallback forward GEMM");
}

// dinp(N,C) = *alpha * vdout(N,OC) . vw(OC,C).
inline void fp8_fallback_dgrad(const Fp8GemmContext& ctx, __nv_bfloat16* dinp,
                               const __nv_bfloat16* vdout, const __nv_bfloat16* vw, int N, int C,
                               int OC, const float* alpha, const float* zero) {
  using namespace fp8_detail;
  LtGemm g;
  g.name = "dgrad (bf16 fallback)";
  g.A = vw;  // row-major (OC,C) = column-major C x OC = op(A), not transposed
  g.B = vdout;
  g.transa = false;
  g.transb = false;
  g.m = C;
  g.n = N;
  g.k = OC;
  g.lda = C;
  g.ldb = OC;
  g.D = dinp;
  g.ldd = C;
  g.device_scalars = true;
  g.alpha = alpha;
  g.beta = zero;
  if (!lt_matmul(ctx, g)) fp8_fail("cuBLASLt has no bf16 algorithm for the fallback dgrad GEMM");
}

// dW(OC,C) += *alpha * vdout(N,OC)^T . vinp(N,C) (beta from *beta: the device 1 or 0).
inline void fp8_fallback_wgrad(const Fp8GemmContext& ctx, __nv_bfloat16* dw,
                               const __nv_bfloat16* vdout, const __nv_bfloat16* vinp, int N, int C,
                               int OC, const float* alpha, const float* beta) {
  using namespace fp8_detail;
  LtGemm g;
  g.name = "wgrad (bf16 fallback)";
  g.A = vinp;   // row-major (N,C) = column-major C x N = op(A)
  g.B = vdout;  // row-major (N,OC) = column-major OC x N; op(B) = its transpose, N x OC
  g.transa = false;
  g.transb = true;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.lda = C;
  g.ldb = OC;
  g.D = dw;
  g.ldd = C;
  g.device_scalars = true;
  g.alpha = alpha;
  g.beta = beta;
  if (!lt_matmul(ctx, g)) fp8_fail("cuBLASLt has no bf16 algorithm for the fallback wgrad GEMM");
}

// ---- per-linear state and scratch (the plan) ----

// The shape of one linear: out(N,OC) = inp(N,C) W(OC,C)^T.
struct Fp8LinearShape {
  int N = 0, C = 0, OC = 0;
};

// Memory accounting. FP8 mode keeps everything bf16 mode keeps (bf16 activations, bf16
// weights and gradients, fp32 master weights and Adam state) and adds:
//   state    sizeof(Fp8LinearDevice) = 80 bytes per FP8 linear (4 per layer): negligible;
//   scratch  the quantized operands of the one linear being computed, shared by all linears
//            and sized for the largest one's backward. FP8 path, bytes (1 per element):
//              a  inp (N*C, forward) or inp^T (C*N, backward)
//              b  W (OC*C, forward) or W^T (C*OC, backward)
//              g  dout (N*OC), gT dout^T (OC*N)                       (backward only)
//            fallback path: a, b, g in bf16 (2 bytes per element), no gT.
//            Each call carves its own a, b, g, gT from the one buffer, so the size is the
//            maximum over the linears of their sum. For a GPT-2 block (qkv C -> 3C, attproj
//            C -> C, fc C -> 4C, fcproj 4C -> C) that is the fc backward:
//            N*C + 4C^2 + 2*N*4C = 9*N*C + 4*C^2 bytes (fallback: 2*(N*C + 4C^2 + 4*N*C)).
// Nothing of it lives across ops: the forward's copies are dead after its GEMM (the backward
// re-quantizes the bf16 inp and W with the forward's scales instead of keeping fp8 copies of
// every activation), so the scratch may alias any buffer that is dead while the block
// linears run. The natural one is the fp32 logits/dlogits buffer (N*Vp*4 bytes, about 200 KB
// per row for GPT-2's vocabulary against 9*C + 4*C^2/N bytes per row here): in the forward
// it is written only after the last block, and in the backward it is consumed by the lm_head
// backward before the first block backward. With that alias FP8 mode's peak is bf16's plus
// the state bytes, i.e. at bf16's, whenever fp8_plan_scratch_bytes() <= the logits buffer
// (a backend should check and allocate separately otherwise, e.g. for a toy vocabulary, and
// then reports the difference as FP8's extra memory).
inline size_t fp8_align256(size_t b) { return (b + 255) / 256 * 256; }

// Where one linear's operands lie in the scratch (byte offsets), and its total.
struct Fp8ScratchLayout {
  size_t a = 0, b = 0, g = 0, gT = 0, total = 0;
};
inline Fp8ScratchLayout fp8_scratch_layout(Fp8Path path, const Fp8LinearShape& s) {
  const size_t e = path == Fp8Path::kFp8 ? 1 : 2;
  const size_t N = size_t(s.N), C = size_t(s.C), OC = size_t(s.OC);
  Fp8ScratchLayout l;
  l.a = 0;
  l.b = l.a + fp8_align256(N * C * e);
  l.g = l.b + fp8_align256(OC * C * e);
  l.gT = l.g + fp8_align256(N * OC * e);
  l.total = l.gT + (path == Fp8Path::kFp8 ? fp8_align256(N * OC) : 0);
  return l;
}
// Scratch bytes for these linears (the largest backward).
inline size_t fp8_plan_scratch_bytes(Fp8Path path, const Fp8LinearShape* shapes, int n) {
  size_t m = 0;
  for (int i = 0; i < n; i++) m = std::max(m, fp8_scratch_layout(path, shapes[i]).total);
  return m;
}
inline size_t fp8_plan_state_bytes(int n_linears) {
  return size_t(n_linears) * sizeof(Fp8LinearDevice);
}

// Device buffers of the FP8 linears: per-linear state and the shared scratch.
struct Fp8Plan {
  Fp8Path path = Fp8Path::kFp8;
  int n_linears = 0;
  Fp8LinearDevice* dev = nullptr;  // n_linears entries (device)
  uint8_t* scratch = nullptr;      // scratch_bytes, 256-byte aligned
  size_t scratch_bytes = 0;
  void* owned_scratch = nullptr;  // cudaMalloc'ed here when no external scratch was given
  std::unordered_map<const void*, int> slots;  // see fp8_plan_slot
};

// The state index of the linear whose weight lives at `weight` (the Backend's FP8 calls do not
// say which layer and linear they are; each block linear has its own weight slice, so its
// device address names it). The first call for a weight takes the next free index; throws when
// more distinct weights arrive than the plan has linears.
inline int fp8_plan_slot(Fp8Plan& plan, const void* weight) {
  const auto it = plan.slots.find(weight);
  if (it != plan.slots.end()) return it->second;
  const int next = int(plan.slots.size());
  if (next >= plan.n_linears)
    fp8_fail("fp8: more distinct FP8 linears than the plan's " + std::to_string(plan.n_linears));
  plan.slots.emplace(weight, next);
  return next;
}

// Allocates the state of n_linears linears (index: fp8_plan_slot, or layer * 4 + linear; zero
// amaxes, scale 1, descale 1, alpha 1, constants 0 and 1) and, unless `external_scratch` is given
// (256-byte aligned, scratch_bytes long: e.g. the logits buffer, see above), a scratch of
// scratch_bytes (fp8_plan_scratch_bytes of all the linears' shapes). Synchronous (setup).
inline Fp8Plan fp8_plan_create(Fp8Path path, int n_linears, size_t scratch_bytes,
                               void* external_scratch = nullptr) {
  Fp8Plan p;
  p.path = path;
  p.n_linears = n_linears;
  p.scratch_bytes = scratch_bytes;
  if (external_scratch) {
    if (!fp8_detail::aligned(external_scratch, 256))
      fp8_fail("fp8_plan_create: the external scratch is not 256-byte aligned");
    p.scratch = static_cast<uint8_t*>(external_scratch);
  } else if (scratch_bytes) {
    fp8_check_cuda(cudaMalloc(&p.owned_scratch, scratch_bytes), "cudaMalloc(fp8 scratch)");
    p.scratch = static_cast<uint8_t*>(p.owned_scratch);
  }
  if (n_linears > 0) {
    fp8_check_cuda(cudaMalloc(reinterpret_cast<void**>(&p.dev), fp8_plan_state_bytes(n_linears)),
                   "cudaMalloc(fp8 state)");
    Fp8LinearDevice init{};
    for (auto& t : init.t) t = Fp8TensorScale{0.f, 1.f, 1.f, 0.f};
    for (float& a : init.alpha) a = 1.f;
    init.zero = 0.f;
    init.one = 1.f;
    std::vector<Fp8LinearDevice> h(size_t(n_linears), init);
    fp8_check_cuda(
        cudaMemcpy(p.dev, h.data(), fp8_plan_state_bytes(n_linears), cudaMemcpyHostToDevice),
        "fp8 state upload");
  }
  return p;
}

inline void fp8_plan_destroy(Fp8Plan& p) {
  if (p.dev) cudaFree(p.dev);
  if (p.owned_scratch) cudaFree(p.owned_scratch);
  p = Fp8Plan{};
}

namespace fp8_detail {

// Quantizes x (rows, cols) with quant (current: own amax; else quant.scale) into st. FP8 path:
// q (may be null) and qT (may be null) as fp8 codes; the amax of x goes to st->amax either
// way. Fallback: q receives the fp8 values in bf16 (qT unused).
inline void quantize(const Fp8GemmContext& ctx, uint8_t* q, uint8_t* qT, const __nv_bfloat16* x,
                     int rows, int cols, Fp8Format fmt, const Fp8Quant& quant, Fp8TensorScale* st) {
  const size_t n = size_t(rows) * size_t(cols);
  if (ctx.path == Fp8Path::kFp8) {
    if (quant.current)
      fp8_quantize_current(q, qT, x, rows, cols, fmt, quant.margin, st, ctx.stream);
    else
      fp8_quantize_delayed(q, qT, x, rows, cols, fmt, quant.scale, st, ctx.stream);
    return;
  }
  __nv_bfloat16* v = reinterpret_cast<__nv_bfloat16*>(q);
  if (quant.current) {
    fp8_amax(&st->amax, x, n, ctx.stream);
    fp8_compute_scale(st, fmt, quant.margin, ctx.stream);
    fp8_qdq_bf16(v, x, n, fmt, &st->scale, nullptr, nullptr, &st->amax, ctx.stream);
  } else {
    fp8_set_scale(st, quant.scale, ctx.stream);
    fp8_qdq_bf16(v, x, n, fmt, &st->scale, nullptr, &st->amax, nullptr, ctx.stream);
  }
}

// Re-quantizes x with a fixed scale (the forward's), keeping st->amax (the forward's amax,
// used for poisoning): FP8 path into qT (transposed), fallback into q as bf16 values.
inline void requantize(const Fp8GemmContext& ctx, uint8_t* q, uint8_t* qT, const __nv_bfloat16* x,
                       int rows, int cols, float scale, Fp8TensorScale* st) {
  fp8_set_scale(st, scale, ctx.stream);
  if (ctx.path == Fp8Path::kFp8)
    fp8_cast_transpose(nullptr, qT, x, rows, cols, Fp8Format::E4M3, &st->scale, nullptr, nullptr,
                       ctx.stream);
  else
    fp8_qdq_bf16(reinterpret_cast<__nv_bfloat16*>(q), x, size_t(rows) * size_t(cols),
                 Fp8Format::E4M3, &st->scale, nullptr, nullptr, nullptr, ctx.stream);
}

// This call's operand buffers in the plan's scratch.
struct Operands {
  uint8_t *a, *b, *g, *gT;
};
inline Operands check_plan(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin, int N, int C,
                           int OC, bool backward) {
  if (ctx.path != plan.path) fp8_fail("fp8: the plan was made for the other GEMM path");
  if (lin < 0 || lin >= plan.n_linears)
    fp8_fail("fp8: linear index " + std::to_string(lin) + " out of range (the plan has " +
             std::to_string(plan.n_linears) + ")");
  const Fp8ScratchLayout l = fp8_scratch_layout(plan.path, Fp8LinearShape{N, C, OC});
  const size_t need = backward ? l.total : l.g;
  if (need > plan.scratch_bytes || plan.scratch == nullptr)
    fp8_fail("fp8: linear N=" + std::to_string(N) + ", C=" + std::to_string(C) +
             ", OC=" + std::to_string(OC) + " needs " + std::to_string(need) +
             " scratch bytes, the plan has " + std::to_string(plan.scratch_bytes));
  return Operands{plan.scratch + l.a, plan.scratch + l.b, plan.scratch + l.g,
                  plan.path == Fp8Path::kFp8 ? plan.scratch + l.gT : nullptr};
}

}  // namespace fp8_detail

// ---- one linear, end to end (what matmul_forward_fp8 / matmul_backward_fp8 call) ----
//
// Forward of linear `lin` (its state slot: fp8_plan_slot(plan, w), or layer * 4 + linear):
// out(N,OC) = quant(inp) . quant(W)^T + bias. quant[0] (inp) and quant[1] (W) are Fp8State's
// (current recipe: scale from the tensor's own amax on the device; delayed: quant.scale from
// the history). Afterwards plan.dev[lin].t[kFp8Inp / kFp8Weight] hold each operand's amax,
// scale and descale (read them with fp8_forward_report). Asynchronous.
inline void fp8_linear_forward(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin,
                               __nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* w,
                               const __nv_bfloat16* bias, int N, int C, int OC,
                               const Fp8Quant quant[2]) {
  using namespace fp8_detail;
  if (ctx.path == Fp8Path::kFp8) check_shape("forward", N, C, OC);
  const Operands o = check_plan(ctx, plan, lin, N, C, OC, false);
  Fp8LinearDevice* d = plan.dev + lin;
  quantize(ctx, o.a, nullptr, inp, N, C, Fp8Format::E4M3, quant[0], &d->t[kFp8Inp]);
  quantize(ctx, o.b, nullptr, w, OC, C, Fp8Format::E4M3, quant[1], &d->t[kFp8Weight]);
  if (ctx.path == Fp8Path::kFp8) {
    fp8_gemm_forward(ctx, out, o.a, o.b, bias, N, C, OC, &d->t[kFp8Inp].descale,
                     &d->t[kFp8Weight].descale);
  } else {
    fallback_alpha_kernel<<<1, 32, 0, ctx.stream>>>(d, 0);
    fp8_check_cuda(cudaGetLastError(), "fp8 fallback alpha");
    fp8_fallback_forward(ctx, out, reinterpret_cast<const __nv_bfloat16*>(o.a),
                         reinterpret_cast<const __nv_bfloat16*>(o.b), bias, N, C, OC, &d->alpha[0],
                         &d->zero, &d->one);
  }
  fp8_poison_if_nonfinite(out, size_t(N) * OC, &d->t[kFp8Inp].amax, &d->t[kFp8Weight].amax,
                          ctx.stream);
}

// Backward of linear `lin`: dinp(N,C) = quant(dout) . quant(W) (written), dw(OC,C) +=
// quant(dout)^T . quant(inp), dbias(OC) += column sums of the unquantized dout (dbias may be
// null). dout is quantized to E5M2 with gq; inp and W to E4M3 with the forward's scales
// inp_scale / w_scale (Fp8State::forward_scale). dinp / dw become NaN when dout's amax, or
// the forward's amax of W / inp, is non-finite. Afterwards plan.dev[lin].t[kFp8Grad] holds
// dout's amax, scale, descale (fp8_backward_report). Asynchronous.
inline void fp8_linear_backward(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin,
                                __nv_bfloat16* dinp, __nv_bfloat16* dw, __nv_bfloat16* dbias,
                                const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                const __nv_bfloat16* w, int N, int C, int OC, const Fp8Quant& gq,
                                float inp_scale, float w_scale) {
  using namespace fp8_detail;
  if (ctx.path == Fp8Path::kFp8) check_shape("backward", N, C, OC);
  const Operands o = check_plan(ctx, plan, lin, N, C, OC, true);
  Fp8LinearDevice* d = plan.dev + lin;
  if (dbias) bias_backward_bf16(dbias, dout, N, OC, ctx.stream);
  quantize(ctx, o.g, o.gT, dout, N, OC, Fp8Format::E5M2, gq, &d->t[kFp8Grad]);
  requantize(ctx, o.b, o.b, w, OC, C, w_scale, &d->t[kFp8Weight]);
  requantize(ctx, o.a, o.a, inp, N, C, inp_scale, &d->t[kFp8Inp]);
  if (ctx.path == Fp8Path::kFp8) {
    fp8_gemm_dgrad(ctx, dinp, o.g, o.b, N, C, OC, &d->t[kFp8Grad].descale,
                   &d->t[kFp8Weight].descale);
    fp8_gemm_wgrad(ctx, dw, o.gT, o.a, N, C, OC, &d->t[kFp8Grad].descale, &d->t[kFp8Inp].descale,
                   true);
  } else {
    fallback_alpha_kernel<<<1, 32, 0, ctx.stream>>>(d, 1);
    fp8_check_cuda(cudaGetLastError(), "fp8 fallback alpha");
    const auto* vg = reinterpret_cast<const __nv_bfloat16*>(o.g);
    fp8_fallback_dgrad(ctx, dinp, vg, reinterpret_cast<const __nv_bfloat16*>(o.b), N, C, OC,
                       &d->alpha[1], &d->zero);
    fp8_fallback_wgrad(ctx, dw, vg, reinterpret_cast<const __nv_bfloat16*>(o.a), N, C, OC,
                       &d->alpha[2], &d->one);
  }
  fp8_poison_if_nonfinite(dinp, size_t(N) * C, &d->t[kFp8Grad].amax, &d->t[kFp8Weight].amax,
                          ctx.stream);
  fp8_poison_if_nonfinite(dw, size_t(OC) * C, &d->t[kFp8Grad].amax, &d->t[kFp8Inp].amax,
                          ctx.stream);
}

// The Fp8Report of the last forward / backward of linear `lin`: copies its device state to
// the host, which synchronizes `stream` (the Backend interface returns amaxes on the host).
inline Fp8LinearDevice fp8_read_state(const Fp8Plan& plan, int lin, cudaStream_t stream) {
  Fp8LinearDevice h{};
  fp8_check_cuda(cudaMemcpyAsync(&h, plan.dev + lin, sizeof h, cudaMemcpyDeviceToHost, stream),
                 "fp8 state download");
  fp8_check_cuda(cudaStreamSynchronize(stream), "fp8 state download (sync)");
  return h;
}
inline Fp8Report fp8_forward_report(const Fp8Plan& plan, int lin, cudaStream_t stream) {
  const Fp8LinearDevice h = fp8_read_state(plan, lin, stream);
  Fp8Report r;
  r.amax[0] = h.t[kFp8Inp].amax;
  r.scale[0] = h.t[kFp8Inp].scale;
  r.amax[1] = h.t[kFp8Weight].amax;
  r.scale[1] = h.t[kFp8Weight].scale;
  return r;
}
inline Fp8Report fp8_backward_report(const Fp8Plan& plan, int lin, cudaStream_t stream) {
  const Fp8LinearDevice h = fp8_read_state(plan, lin, stream);
  Fp8Report r;
  r.amax[0] = h.t[kFp8Grad].amax;
  r.scale[0] = h.t[kFp8Grad].scale;
  return r;
}

}  // namespace tg::cuda
