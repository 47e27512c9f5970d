// runtime_emulation.cpp: the device calls of the CUDA runtime and the cuBLASLt handle calls
// that the CUDA backend (src/backends/cuda/backend.cu, matmul_fp8.cu) and the GPU tests
// (tests/cuda/test_*.cu) make, as host stand-ins, so that they run under the emulation
// (tests/cuda/cuda_emulation.h) as they run on a GPU: one emulated device (its memory,
// cudaMalloc and cudaFree, is device_memory_emulation.cpp's; an 80 GiB device to the
// properties), compute capability 9.0 (a test may ask for another: emu_test::device_major)
// and one multiprocessor (cuda_emulation.cpp's cudaDeviceGetAttribute says the same).
// Streams, events, copies, memsets and pinned host memory: stream_emulation.cpp.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>

#include "memory_check.h"

namespace {

constexpr size_t kDeviceBytes = size_t(80) << 30;

// Streams, events and library handles are opaque pointers nothing reads: a fresh allocation
// each, so that distinct handles compare unequal and a double destroy shows up under ASan.
template <typename H>
H new_handle() {
  return reinterpret_cast<H>(new int);
}
template <typename H>
void delete_handle(H h) {
  delete reinterpret_cast<int*>(h);
}

}  // namespace

namespace emu_test {
// What cudaMemGetInfo says is free (a test may set it; the emulated device holds 80 GiB).
size_t device_free_bytes = kDeviceBytes;
// The emulated device's compute capability major (9: sm_90). A test may set it before it
// starts a CudaBackend, which reads the properties once (e.g. 10 for the sm_100 native path).
int device_major = 9;
}  // namespace emu_test

extern "C" {

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = emu_test::device_free_bytes;
  *total = kDeviceBytes;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "emulated CUDA device (tests/cuda/cuda_emulation.h)");
  p->major = emu_test::device_major;
  p->minor = 0;
  p->multiProcessorCount = 1;
  p->totalGlobalMem = kDeviceBytes;
  p->sharedMemPerBlock = emu::kDefaultDynamicSmem;
  p->sharedMemPerBlockOptin = emu::kOptinDynamicSmem;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new_handle<cublasLtHandle_t>();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete_handle(h);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
