// cuda_emulation.cpp: host stand-ins for the CUDA runtime, cuBLAS and cuBLASLt calls that
// src/backends/cuda/*.cu's launchers make, for the emulated tests (tests/cuda/cuda_emulation.h;
// this binary does not link libcudart or cuBLAS). Device memory is device_memory_emulation.cpp's
// (its copies and memsets are noted there: memory_check.h), the device has one multiprocessor
// and compute capability 9.0. cuBLAS's GEMMs are fp32 loops in k order (what cuBLAS computes,
// up to the summation order) rounded once into C's type, queued on the handle's stream
// (cublasSetStream; stream_emulation.cpp runs it when it is waited for) with alpha and beta
// read at the call (the default host pointer mode). cuBLASLt is emulated the same way from its
// descriptors (tests/cuda/cublaslt_emulation.cpp), so the real wrapper
// (src/backends/cuda/cublaslt.cu) runs.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>

#include "memory_check.h"
#include "src/numerics/formats.h"

extern "C" {

cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrMultiProcessorCount ? 1 : 0;
  return cudaSuccess;
}
// Records a kernel's opt-in to more dynamic shared memory (emu::dynamic_smem_optin, checked at
// each launch); more than the device's opt-in limit fails, as on the GPU.
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute a, int v) {
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (v < 0 || size_t(v) > emu::kOptinDynamicSmem) return cudaErrorInvalidValue;
  emu::dynamic_smem_optin()[kernel] = size_t(v);
  return cudaSuccess;
}

const char* cublasGetStatusString(cublasStatus_t) { return "emulated cuBLAS error"; }

}  // extern "C"

namespace emu_blas {

float load(cudaDataType_t t, const void* p, size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16BF: return tg::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_8F_E4M3: return tg::e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case CUDA_R_8F_E5M2: return tg::e5m2_to_f32(static_cast<const uint8_t*>(p)[i]);
    default: return tg::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}
// Rounded as kernels/common.cuh's st<T> does (nearest even; fp16 NaN as 0x7FFF).
void store(cudaDataType_t t, void* p, size_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = v; break;
    case CUDA_R_16BF: static_cast<uint16_t*>(p)[i] = tg::f32_to_bf16(v); break;
    default: static_cast<uint16_t*>(p)[i] = v != v ? uint16_t(0x7fff) : tg::f32_to_f16(v);
  }
}
size_t elem_bytes(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2 ? 1 : 2;
}

}  // namespace emu_blas

namespace {

using emu_blas::load;
using emu_blas::store;

// A cuBLAS handle: the stream its GEMMs are queued on.
struct BlasHandle {
  cudaStream_t stream = nullptr;
};
BlasHandle* handle(cublasHandle_t h) { return reinterpret_cast<BlasHandle*>(h); }

// Column-major C(m,n) = alpha op(A) op(B) + beta C (C not read when beta is 0).
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
          const void* A, cudaDataType_t at, int lda, const void* B, cudaDataType_t bt, int ldb,
          float beta, void* C, cudaDataType_t ct, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float s = 0.f;
      for (int p = 0; p < k; p++) {
        const size_t ia = ta == CUBLAS_OP_N ? size_t(p) * lda + i : size_t(i) * lda + p;
        const size_t ib = tb == CUBLAS_OP_N ? size_t(j) * ldb + p : size_t(p) * ldb + j;
        s += load(at, A, ia) * load(bt, B, ib);
      }
      const size_t ic = size_t(j) * ldc + i;
      store(ct, C, ic, beta == 0.f ? alpha * s : alpha * s + beta * load(ct, C, ic));
    }
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new BlasHandle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete handle(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle(h)->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t,
                            cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  emu::enqueue(handle(h)->stream, "cublasGemmEx", {{A, 1}, {B, 1}, {C, 1}},
               [=] { gemm(ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc); });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType at,
                                          int lda, long long sa, const void* B, cudaDataType bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType ct, int ldc, long long sc, int count,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  emu::enqueue(handle(h)->stream, "cublasGemmStridedBatchedEx", {{A, 1}, {B, 1}, {C, 1}}, [=] {
    const auto* a = static_cast<const char*>(A);
    const auto* b = static_cast<const char*>(B);
    auto* c = static_cast<char*>(C);
    const size_t ea = emu_blas::elem_bytes(at), eb = emu_blas::elem_bytes(bt),
                 ec = emu_blas::elem_bytes(ct);
    for (int i = 0; i < count; i++)
      gemm(ta, tb, m, n, k, al, a + i * sa * ea, at, lda, b + i * sb * eb, bt, ldb, be,
           c + i * sc * ec, ct, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
