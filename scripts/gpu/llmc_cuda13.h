// llmc_cuda13.h: force-included (nvcc -include, through llm.c's PFLAGS) when
// scripts/gpu/gpu_check_llmc.sh builds llm.c with CUDA 13, so that llm.c's sources stay as
// they are. CUDA 13 dropped the cudaMemAdvise overload that takes a device id
// (llmc/cuda_utils.cuh calls it with cudaCpuDeviceId, on its managed-memory fallback after
// an out-of-memory): this puts it back, mapping cudaCpuDeviceId to the host location and any
// other id to that device, as the CUDA 12 call meant.
#pragma once
#include <cuda_runtime.h>
#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void* ptr, size_t bytes, cudaMemoryAdvise advice,
                                        int device) {
  cudaMemLocation loc;
  loc.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  loc.id = device == cudaCpuDeviceId ? 0 : device;
  return cudaMemAdvise(ptr, bytes, advice, loc);
}
#endif
