// cublaslt_emulation.cpp: host stand-ins for the cuBLASLt calls of src/backends/cuda/cublaslt.cu,
// for the emulated tests (see cuda_emulation.cpp). The descriptors are read as cuBLASLt documents
// them (cublasLt.h; cuBLAS docs, cublasLtMatmul):
//
//   D = epilogue(alpha * a_scale * b_scale * op(A) op(B) + beta * C [+ bias])   column-major,
//   GELU_AUX_BIAS: aux = alpha ... + bias (rounded to D's type), D = gelu(aux in fp32),
//
// for each of the layouts' batch entries; the products are fp32 sums in k order, rounded once
// into D's type. cublasLtMatmul checks its arguments and reads the descriptors (and, in the
// host pointer mode, alpha and beta) at the call, and queues the GEMM on its stream
// (stream_emulation.cpp runs it when the stream is waited for; scales and device-mode scalars
// are read then). Attributes the wrapper does not set are refused (CUBLAS_STATUS_NOT_SUPPORTED),
// so a new one shows up here first. Like the real library, FP8 operands want the TN layout
// (the heuristic finds no algorithm otherwise), and the heuristic checks that the layouts
// agree on m, n and k.
//
// Block scale modes (CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE): each element of op(A) (op(B)) is
// decoded from its code (FP8 bytes, or CUDA_R_4F_E2M1 nibble pairs, the even element in the
// low nibble) times its block's scale, read from the scale tensor as the cuBLAS documentation
// lays it out (written here from the documentation, independently of the kernels that write
// them, kernels/quantize_blocks.cuh), with "rows" the operand's outer dimension (m for A, n
// for B) and its blocks along k:
//   OUTER_VEC_32F   s[row]                   VEC128_32F  s[(k / 128) * rows + row]
//   BLK128x128_32F  s[(row / 128) * roundup(ceil(K / 128), 4) + k / 128]
//   VEC32_UE8M0, VEC16_UE4M3 (block b = k / 32 or k / 16, nb = ceil(K / block)): 128 x 4
//     tiles of 512 bytes, s[((row / 128) ceil(nb / 4) + b / 4) 512 + (row % 32) 16 +
//     ((row / 32) % 4) 4 + b % 4], E8M0 2^(code - 127), UE4M3 the E4M3 value of code & 0x7f
// and the sum runs in fp64 (the hardware's order is not ours to know; the tests allow for
// it). The heuristic offers an algorithm for the pairs cuBLASLt documents (32F modes with each
// other, both but two 128x128 tiles; UE8M0 with UE8M0; UE4M3 with UE4M3 on FP4) in TN form.
// Test hooks: emu_test::lt_refuse_block_scaled (the heuristic finds nothing for a scale mode,
// and a launch with one fails, as a cached algorithm the library refuses would)
// and emu_test::lt_ignore_block_scales (block scales read as 1: a wrong answer, for the
// native path's self-check to catch), emu_test::lt_refuse_fp8_epilogue (no FP8 algorithm with
// an epilogue: the FP8 linears' bias-rows fallback runs).
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/numerics/formats.h"

namespace emu_blas {
float load(cudaDataType_t t, const void* p, size_t i);
void store(cudaDataType_t t, void* p, size_t i, float v);
size_t elem_bytes(cudaDataType_t t);
}  // namespace emu_blas

namespace emu {
void note_host_call(const char* name);  // stream_emulation.cpp (traffic.h)
}  // namespace emu

namespace emu_test {
int lt_matmul_calls = 0;
int emu_lt_matmul_calls() { return lt_matmul_calls; }
bool lt_refuse_block_scaled = false;
bool lt_ignore_block_scales = false;
bool lt_refuse_fp8_epilogue = false;
// Every FP8 GEMM refused (the heuristic finds nothing, a launch fails): the H200 of
// docs/gpu-results.md, which refused every per-tensor FP8 GEMM.
bool lt_refuse_fp8 = false;
int lt_block_scaled_calls = 0;
}  // namespace emu_test

namespace {

struct EmuMatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtPointerMode_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  int8_t fast_accum = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

struct EmuLayout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

EmuMatmulDesc* desc(cublasLtMatmulDesc_t d) { return reinterpret_cast<EmuMatmulDesc*>(d); }
EmuLayout* layout(cublasLtMatrixLayout_t l) { return reinterpret_cast<EmuLayout*>(l); }

template <typename T>
cublasStatus_t take(T* dst, const void* buf, size_t n) {
  if (n != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(dst, buf, n);
  return CUBLAS_STATUS_SUCCESS;
}

bool is_fp8(cudaDataType_t t) {
  return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2 || t == CUDA_R_4F_E2M1;
}

// Element i of a matrix of type t (packed FP4 too).
float load_elem(cudaDataType_t t, const void* p, size_t i) {
  if (t != CUDA_R_4F_E2M1) return emu_blas::load(t, p, i);
  const uint8_t b = static_cast<const uint8_t*>(p)[i / 2];
  return tg::e2m1_to_f32(uint8_t(i % 2 ? b >> 4 : b & 0xf));
}

bool block_mode(int32_t m) { return m != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F; }
bool mode_32f(int32_t m) {
  return m == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F ||
         m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
         m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

// The scale of element (row, k) of an operand of outer dimension `rows` and inner K (header).
float block_scale(int32_t mode, const void* s, uint64_t rows, uint64_t K, uint64_t row,
                  uint64_t k) {
  const float* f = static_cast<const float*>(s);
  const uint8_t* b = static_cast<const uint8_t*>(s);
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return f[row];
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return f[(k / 128) * rows + row];
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
      return f[(row / 128) * (((K + 127) / 128 + 3) / 4 * 4) + k / 128];
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0:
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3: {
      const bool mx = mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
      const uint64_t blk = mx ? 32 : 16, nb = (K + blk - 1) / blk, bi = k / blk;
      const uint64_t off = ((row / 128) * ((nb + 3) / 4) + bi / 4) * 512 + (row % 32) * 16 +
                           ((row / 32) % 4) * 4 + bi % 4;
      return mx ? tg::e8m0_to_f32(b[off]) : tg::e4m3_to_f32(uint8_t(b[off] & 0x7f));
    }
    default: return NAN;
  }
}

// The GEMM's m, n, k from D, A and the transposes; false when B disagrees.
bool shape_of(const EmuMatmulDesc& op, const EmuLayout& a, const EmuLayout& b, const EmuLayout& d,
              uint64_t* m, uint64_t* n, uint64_t* k) {
  *m = d.rows;
  *n = d.cols;
  const bool ta = op.transa == CUBLAS_OP_T, tb = op.transb == CUBLAS_OP_T;
  *k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != *m) return false;
  return (tb ? b.cols : b.rows) == *k && (tb ? b.rows : b.cols) == *n;
}

// alpha and beta: host or "device" pointer alike (device memory is host memory here).
float scalar(const void* p) { return *static_cast<const float*>(p); }

float gelu(float x) {
  const float s = std::sqrt(2.0f / float(M_PI));
  return 0.5f * x * (1.0f + std::tanh(s * (x + 0.044715f * x * x * x)));
}

// The GEMM with block scale modes (the sum in fp64), when the queued matmul runs.
void block_scaled_matmul(const EmuMatmulDesc& op, const EmuLayout& a, const EmuLayout& b,
                         const EmuLayout& c, const EmuLayout& d, const void* A, const void* B,
                         const void* C, void* D, uint64_t m, uint64_t n, uint64_t k, float alpha,
                         float beta, bool ones) {
  const bool blk_a = block_mode(op.a_scale_mode), blk_b = block_mode(op.b_scale_mode);
  float scale = 1.0f;
  if (op.a_scale && !blk_a) scale *= *static_cast<const float*>(op.a_scale);
  if (op.b_scale && !blk_b) scale *= *static_cast<const float*>(op.b_scale);
  const bool ta = op.transa == CUBLAS_OP_T, tb = op.transb == CUBLAS_OP_T;
  const bool bias = op.epilogue == CUBLASLT_EPILOGUE_BIAS;
  const cudaDataType_t bias_type = op.bias_type < 0 ? d.type : cudaDataType_t(op.bias_type);
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      double s = 0;
      for (uint64_t p = 0; p < k; p++) {
        const size_t ia = ta ? i * a.ld + p : p * a.ld + i;
        const size_t ib = tb ? p * b.ld + j : j * b.ld + p;
        const double sa = blk_a && !ones ? block_scale(op.a_scale_mode, op.a_scale, m, k, i, p) : 1;
        const double sb = blk_b && !ones ? block_scale(op.b_scale_mode, op.b_scale, n, k, j, p) : 1;
        s += double(load_elem(a.type, A, ia)) * sa * (double(load_elem(b.type, B, ib)) * sb);
      }
      float v = alpha * (scale * float(s));
      if (beta != 0.f) v += beta * emu_blas::load(c.type, C, j * c.ld + i);
      if (bias) v += emu_blas::load(bias_type, op.bias, i);
      emu_blas::store(d.type, D, j * d.ld + i, v);
    }
}

// The GEMM with scalar scales, for each batch entry, when the queued matmul runs.
void plain_matmul(const EmuMatmulDesc& op, const EmuLayout& a, const EmuLayout& b,
                  const EmuLayout& c, const EmuLayout& d, const void* A, const void* B,
                  const void* C, void* D, uint64_t m, uint64_t n, uint64_t k, float alpha,
                  float beta) {
  float scale = 1.0f;
  if (op.a_scale) scale *= *static_cast<const float*>(op.a_scale);
  if (op.b_scale) scale *= *static_cast<const float*>(op.b_scale);
  const bool ta = op.transa == CUBLAS_OP_T, tb = op.transb == CUBLAS_OP_T;
  const bool gelu_aux = op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool bias = op.epilogue == CUBLASLT_EPILOGUE_BIAS || gelu_aux;
  const cudaDataType_t bias_type = op.bias_type < 0 ? d.type : cudaDataType_t(op.bias_type);
  for (int32_t e = 0; e < d.batch; e++) {
    const auto* pa = static_cast<const char*>(A) + e * a.stride * emu_blas::elem_bytes(a.type);
    const auto* pb = static_cast<const char*>(B) + e * b.stride * emu_blas::elem_bytes(b.type);
    const auto* pc = static_cast<const char*>(C) + e * c.stride * emu_blas::elem_bytes(c.type);
    auto* pd = static_cast<char*>(D) + e * d.stride * emu_blas::elem_bytes(d.type);
    for (uint64_t j = 0; j < n; j++)
      for (uint64_t i = 0; i < m; i++) {
        float s = 0.f;
        for (uint64_t p = 0; p < k; p++) {
          const size_t ia = ta ? i * a.ld + p : p * a.ld + i;
          const size_t ib = tb ? p * b.ld + j : j * b.ld + p;
          s += emu_blas::load(a.type, pa, ia) * emu_blas::load(b.type, pb, ib);
        }
        float v = alpha * (scale * s);
        if (beta != 0.f) v += beta * emu_blas::load(c.type, pc, j * c.ld + i);
        if (bias) v += emu_blas::load(bias_type, op.bias, i);
        if (gelu_aux) {
          emu_blas::store(d.type, op.aux, j * op.aux_ld + i, v);
          v = gelu(v);
        }
        emu_blas::store(d.type, pd, j * d.ld + i, v);
      }
  }
}

}  // namespace

namespace emu_test {
float emu_block_scale(int32_t mode, const void* s, uint64_t rows, uint64_t K, uint64_t row,
                      uint64_t k) {
  return block_scale(mode, s, rows, K, row, k);
}
}  // namespace emu_test

extern "C" {

size_t cublasLtGetVersion() { return CUBLAS_VERSION; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  emu::note_host_call("cublasLtMatmulDescCreate");
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  auto* e = new EmuMatmulDesc;
  e->compute = compute;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(e);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete desc(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t n) {
  EmuMatmulDesc& o = *desc(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(&o.transa, buf, n);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(&o.transb, buf, n);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return take(&o.pointer_mode, buf, n);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return take(&o.a_scale, buf, n);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return take(&o.b_scale, buf, n);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return take(&o.fast_accum, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&o.epilogue, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&o.bias, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return take(&o.bias_type, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(&o.aux, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(&o.aux_ld, buf, n);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: return take(&o.a_scale_mode, buf, n);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: return take(&o.b_scale_mode, buf, n);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  emu::note_host_call("cublasLtMatrixLayoutCreate");
  if (ld < int64_t(rows)) return CUBLAS_STATUS_INVALID_VALUE;  // column-major: ld >= rows
  auto* e = new EmuLayout;
  e->type = type;
  e->rows = rows;
  e->cols = cols;
  e->ld = ld;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(e);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete layout(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t n) {
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return take(&layout(l)->batch, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return take(&layout(l)->stride, buf, n);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// Preferences only narrow the heuristic's choice; the emulation has one algorithm.
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  emu::note_host_call("cublasLtMatmulPreferenceCreate");
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new int);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<int*>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void*, size_t) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* found) {
  *found = 0;
  uint64_t m, n, k;
  if (requested < 1 || !shape_of(*desc(op), *layout(a), *layout(b), *layout(d), &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (layout(c)->rows != m || layout(c)->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  const bool fp8 = is_fp8(layout(a)->type) || is_fp8(layout(b)->type);
  if (fp8 && !(desc(op)->transa == CUBLAS_OP_T && desc(op)->transb == CUBLAS_OP_N))
    return CUBLAS_STATUS_SUCCESS;  // FP8 kernels are TN only: no algorithm
  if (fp8 && emu_test::lt_refuse_fp8_epilogue && desc(op)->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_SUCCESS;
  if (fp8 && emu_test::lt_refuse_fp8) return CUBLAS_STATUS_SUCCESS;
  const int32_t ma = desc(op)->a_scale_mode, mb = desc(op)->b_scale_mode;
  if (block_mode(ma) || block_mode(mb)) {
    const bool fp4 = layout(a)->type == CUDA_R_4F_E2M1 && layout(b)->type == CUDA_R_4F_E2M1;
    const bool pair = (mode_32f(ma) && mode_32f(mb) &&
                       (ma == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) ==
                           (mb == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) &&
                       !(ma == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
                         mb == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)) ||
                      (ma == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 &&
                       mb == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) ||
                      (ma == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 &&
                       mb == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 && fp4);
    if (!fp8 || !pair || emu_test::lt_refuse_block_scaled) return CUBLAS_STATUS_SUCCESS;
  }
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// The emulated algorithms have no split-K: their reduction scheme is NONE (zeroed algo).
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t*,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, size_t size, size_t* written) {
  // One algorithm: id 0, tile CUBLASLT_MATMUL_TILE_UNDEFINED, no split-k reduction.
  if (size < sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t value = 0;
  if (attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)
    value = CUBLASLT_REDUCTION_SCHEME_NONE;
  else if (attr == CUBLASLT_ALGO_CONFIG_ID)
    value = 0;
  else if (attr == CUBLASLT_ALGO_CONFIG_TILE_ID)
    value = CUBLASLT_MATMUL_TILE_UNDEFINED;
  else
    return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memcpy(buf, &value, sizeof value);
  if (written) *written = sizeof value;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lt, cublasLtMatmulDesc_t opd, const void* alpha_p,
                              const void* A, cublasLtMatrixLayout_t ad, const void* B,
                              cublasLtMatrixLayout_t bd, const void* beta_p, const void* C,
                              cublasLtMatrixLayout_t cd, void* D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  if (!lt) return CUBLAS_STATUS_NOT_INITIALIZED;
  // The descriptors as they are at the call (the caller may change or destroy them after it).
  const EmuMatmulDesc op = *desc(opd);
  const EmuLayout a = *layout(ad), b = *layout(bd), c = *layout(cd), d = *layout(dd);
  uint64_t m, n, k;
  if (!shape_of(op, a, b, d, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool blk_a = block_mode(op.a_scale_mode), blk_b = block_mode(op.b_scale_mode);
  if ((blk_a && !op.a_scale) || (blk_b && !op.b_scale)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias =
      op.epilogue == CUBLASLT_EPILOGUE_BIAS || op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu_aux = op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (op.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !bias) return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((bias && !op.bias) || (gelu_aux && (!op.aux || op.aux_ld < int64_t(m))))
    return CUBLAS_STATUS_INVALID_VALUE;
  // (refused at launch too: the wrapper caches the heuristic's earlier answers)
  if ((blk_a || blk_b) && (d.batch != 1 || gelu_aux || emu_test::lt_refuse_block_scaled))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (emu_test::lt_refuse_fp8 && (is_fp8(a.type) || is_fp8(b.type)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  emu_test::lt_matmul_calls++;
  if (blk_a || blk_b) emu_test::lt_block_scaled_calls++;
  // Host pointer mode: alpha and beta are read at the call; device mode: when the GEMM runs.
  const bool host_scalars = op.pointer_mode == CUBLASLT_POINTER_MODE_HOST;
  const float alpha_h = host_scalars ? scalar(alpha_p) : 0.f;
  const float beta_h = host_scalars ? scalar(beta_p) : 0.f;
  const bool ones = emu_test::lt_ignore_block_scales;
  std::vector<emu::Use> uses = {{A, 1}, {B, 1}, {C, 1}, {D, 1}};
  for (const void* p : {op.bias, static_cast<const void*>(op.aux), op.a_scale, op.b_scale})
    if (p) uses.push_back({p, 1});
  if (!host_scalars) uses.insert(uses.end(), {{alpha_p, 1}, {beta_p, 1}});
  emu::enqueue(stream, "cublasLtMatmul", std::move(uses), [=] {
    const float alpha = host_scalars ? alpha_h : scalar(alpha_p);
    const float beta = host_scalars ? beta_h : scalar(beta_p);
    if (blk_a || blk_b)
      block_scaled_matmul(op, a, b, c, d, A, B, C, D, m, n, k, alpha, beta, ones);
    else
      plain_matmul(op, a, b, c, d, A, B, C, D, m, n, k, alpha, beta);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
