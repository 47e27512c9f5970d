// cublaslt_probe.cu: which cuBLASLt GEMM configurations the heuristic has an algorithm for on
// this GPU, one line per (shape, operand and output types, reduction-scheme preference, fast
// accumulation, epilogue, alignment hints), with the returned algorithm's reduction scheme and
// split-K. A diagnostic for the lent GPU (no test): the descriptors are built as
// src/backends/cuda/cublaslt.cu builds them, so a configuration the project's GEMMs use and
// the heuristic refuses shows here with the setting that makes the difference.
//
//   nvcc -O2 -arch=sm_90 scripts/gpu/cublaslt_probe.cu -lcublasLt -o probe && ./probe [one]
//   (scripts/gpu/gpu_check.sh's probe stage runs it)
//   (one: only the FP8 forward GEMM of GPT-2 124M as train_gpt asks it, for CUBLASLT_LOG_LEVEL;
//    launches: only the FP8 launches, each offered algorithm, for scripts/gpu/gpu_check_fp8.sh)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#define CK(x)                                                                   \
  do {                                                                          \
    cublasStatus_t s_ = (x);                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                          \
      printf("error %d at %s:%d: %s\n", int(s_), __FILE__, __LINE__, #x);        \
      return -1;                                                                \
    }                                                                           \
  } while (0)

struct Types {
  const char* name;
  cudaDataType_t a, b, d;
};
struct Variant {
  int redmask;  // -1: not set
  int fast;     // fp8 only
  bool bias, align;
};

static void* g_buf;  // one large device buffer for every pointer (256-byte aligned)
static float* g_scale;

// Found algorithms for one configuration (-1: a descriptor call failed); the first one's
// reduction scheme and split-K in *scheme, *splitk.
static int query(cublasLtHandle_t lt, int m, int n, int k, const Types& t, const Variant& v,
                 int* scheme, int* splitk) {
  const bool fp8 = t.a == CUDA_R_8F_E4M3 || t.a == CUDA_R_8F_E5M2;
  cublasLtMatmulDesc_t op;
  CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N));
  if (fp8) {
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g_scale, sizeof g_scale));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g_scale, sizeof g_scale));
    const int8_t f = int8_t(v.fast);
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &f, sizeof f));
  }
  if (v.bias) {
    const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g_buf, sizeof g_buf));
    const int32_t bt = t.d == CUDA_R_32F && fp8 ? CUDA_R_16BF : t.d;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  cublasLtMatrixLayout_t a, b, d;
  CK(cublasLtMatrixLayoutCreate(&a, t.a, k, m, k));
  CK(cublasLtMatrixLayoutCreate(&b, t.b, k, n, k));
  CK(cublasLtMatrixLayoutCreate(&d, t.d, m, n, m));
  cublasLtMatmulPreference_t p;
  CK(cublasLtMatmulPreferenceCreate(&p));
  const uint64_t ws = 32u << 20;
  CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  if (v.redmask >= 0) {
    const uint32_t r = uint32_t(v.redmask);
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &r, sizeof r));
  }
  if (v.align) {
    const uint32_t al = 256;
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
  }
  cublasLtMatmulHeuristicResult_t res[8];
  memset(res, 0, sizeof res);
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, d, d, p, 8, res, &found);
  if (st != CUBLAS_STATUS_SUCCESS) found = -int(st);
  *scheme = *splitk = -1;
  if (found > 0) {
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&res[0].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme,
                                         sizeof *scheme, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&res[0].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splitk,
                                         sizeof *splitk, &w);
  }
  cublasLtMatmulPreferenceDestroy(p);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
  return found;
}

// Launches the FP8 forward GEMM (E4M3 x E4M3 -> bf16, bias epilogue, fast accumulation) with
// each algorithm the heuristic offers, the scale pointers at byte offset `off` from a 256-byte
// aligned address: the launch's status per algorithm ("ok" or the cuBLAS status). train_gpt's
// per-linear descales sit at 4-byte offsets inside a 16-byte aligned struct.
static void launch_fp8(cublasLtHandle_t lt, int m, int n, int k, int off, size_t ws_bytes,
                       cudaDataType_t ta, cudaDataType_t tb) {
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N);
  const float* sc = reinterpret_cast<const float*>(reinterpret_cast<char*>(g_scale) + off);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sc, sizeof sc);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sc, sizeof sc);
  const int8_t f = 1;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &f, sizeof f);
  const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
  char* base = static_cast<char*>(g_buf);
  void* bias = base + (48 << 20);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  const int32_t bt = CUDA_R_16BF;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatrixLayoutCreate(&a, ta, k, m, k);
  cublasLtMatrixLayoutCreate(&b, tb, k, n, k);
  cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, m, n, m);
  cublasLtMatmulPreference_t p;
  cublasLtMatmulPreferenceCreate(&p);
  const uint64_t ws = ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, d, d, p, 8, res, &found);
  void* A = base;
  void* B = base + (8 << 20);
  void* D = base + (16 << 20);
  void* work = base + (64 << 20);
  const float one = 1.f, zero = 0.f;
  printf("launch %d %d %d %s x %s, scale offset %d, workspace %zu: %d algorithms:", m, n, k,
         ta == CUDA_R_8F_E5M2 ? "e5m2" : "e4m3", tb == CUDA_R_8F_E5M2 ? "e5m2" : "e4m3", off,
         ws_bytes, found);
  for (int i = 0; i < found; i++) {
    const cublasStatus_t st = cublasLtMatmul(lt, op, &one, A, a, B, b, &zero, D, d, D, d,
                                             &res[i].algo, work, ws_bytes, nullptr);
    const cudaError_t ce = cudaDeviceSynchronize();
    printf(" %s", st == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess ? "ok" : "REFUSED");
    if (st != CUBLAS_STATUS_SUCCESS) printf("(status %d)", int(st));
    if (ce != cudaSuccess) printf("(%s)", cudaGetErrorString(ce));
  }
  printf("\n");
  cublasLtMatmulPreferenceDestroy(p);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    printf("cublaslt_probe: no CUDA device\n");
    return 1;
  }
  printf("cublaslt_probe: %s (sm_%d%d), cuBLASLt %zu, CUDA runtime %d\n", prop.name, prop.major,
         prop.minor, cublasLtGetVersion(), CUDART_VERSION);
  cudaMalloc(&g_buf, 128 << 20);
  cudaMalloc(&g_scale, 256);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const Types types[] = {{"e4m3 x e4m3 -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF},
                         {"e4m3 x e5m2 -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF},
                         {"e4m3 x e4m3 -> f32 ", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F},
                         {"bf16 x bf16 -> bf16", CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF},
                         {"bf16 x bf16 -> f32 ", CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F}};
  const int shapes[][3] = {{2304, 8192, 768}, {48, 32, 64}};
  const bool one = argc > 1 && strcmp(argv[1], "one") == 0;
  const bool launches = argc > 1 && strcmp(argv[1], "launches") == 0;
  if (!launches) printf("m n k | types | redmask fast bias align | found scheme splitk\n");
  for (const auto& s : shapes)
    for (const Types& t : types)
      for (int redmask : {-1, 2, 7})
        for (int fast : {0, 1})
          for (int bias : {0, 1})
            for (int align : {0, 1}) {
              const bool fp8 = t.a != CUDA_R_16BF;
              if ((!fp8 && fast) || launches) continue;
              if (one && !(s[0] == 2304 && fp8 && t.d == CUDA_R_16BF && t.b == CUDA_R_8F_E4M3 &&
                           redmask == 2 && fast && bias && align))
                continue;
              int scheme, splitk;
              const int f = query(lt, s[0], s[1], s[2], t, {redmask, fast, bias != 0, align != 0},
                                  &scheme, &splitk);
              printf("%d %d %d | %s | %2d %d %d %d | %d %d %d\n", s[0], s[1], s[2], t.name, redmask,
                     fast, bias, align, f, scheme, splitk);
            }
  // The forward's E4M3 x E4M3 and the backward's E5M2 gradient against an E4M3 operand.
  const cudaDataType_t pairs[][2] = {{CUDA_R_8F_E4M3, CUDA_R_8F_E4M3},
                                     {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2}};
  for (const auto& s : shapes)
    for (const auto& ab : pairs)
      for (int off : {0, 4, 16, 64})
        for (size_t ws : {size_t(32) << 20, (size_t(32) << 20) - (64 << 10)})
          launch_fp8(lt, s[0], s[1], s[2], off, ws, ab[0], ab[1]);
  cublasLtDestroy(lt);
  return 0;
}
