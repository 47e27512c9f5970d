// runtime_emulation.cpp: the device and device-memory calls of the CUDA runtime and the
// cuBLASLt handle calls that the CUDA backend (src/cuda/backend.cu, matmul_fp8.cu) and the GPU
// tests (tests/cuda/test_*.cu) make, as host stand-ins, so that they run under the emulation
// (tests/cuda/cuda_emulation.h) as they run on a GPU: one emulated device, "device" memory
// from the host heap (256-byte aligned, filled with 0xFF bytes as poison, counted against an
// 80 GiB device), compute capability 9.0 (a test may ask for another: emu_test::device_major)
// and one multiprocessor (cuda_emulation.cpp's cudaDeviceGetAttribute says the same).
// Streams, events, copies, memsets and pinned host memory: stream_emulation.cpp.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {

std::mutex g_mu;
std::map<void*, size_t>& allocations() {
  static std::map<void*, size_t> m;
  return m;
}
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
// The emulated device's compute capability major (9: sm_90). A test may set it before it
// starts a CudaBackend, which reads the properties once (e.g. 10 for the sm_100 native path).
int device_major = 9;
}  // namespace emu_test

extern "C" {

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
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256 + 256);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, n);
  std::lock_guard<std::mutex> lock(g_mu);
  allocations()[*p] = n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::unique_lock<std::mutex> lock(g_mu);
  auto it = allocations().find(p);
  if (it == allocations().end()) return cudaErrorInvalidValue;
  const size_t n = it->second;
  lock.unlock();
  emu::before_free(p, n, "cudaFree");  // no queued work may still use it (stream_emulation.cpp)
  lock.lock();
  allocations().erase(p);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::memset(a, 0, sizeof *a);
  std::lock_guard<std::mutex> lock(g_mu);
  auto& m = allocations();
  auto it = m.upper_bound(const_cast<void*>(p));
  const bool device = it != m.begin() && (--it, static_cast<const char*>(p) <
                                                    static_cast<char*>(it->first) + it->second);
  a->type = device                   ? cudaMemoryTypeDevice
            : emu::pinned_host(p, 1) ? cudaMemoryTypeHost
                                     : cudaMemoryTypeUnregistered;
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
