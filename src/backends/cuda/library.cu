// library.cu: the CUDA library's one exported entry point (see src/backends/cuda_library.h).
#include "cuda_backend.h"
#include "src/backends/cuda_library.h"

extern "C" const tg::CudaLibrary* tg_cuda_library() {
#ifdef TG_NCCL
  static const tg::CudaLibrary lib{tg::kCudaLibraryAbi, &tg::cuda_device_count,
                                   &tg::make_cuda_backend, &tg::make_nccl_comm};
#else
  static const tg::CudaLibrary lib{tg::kCudaLibraryAbi, &tg::cuda_device_count,
                                   &tg::make_cuda_backend, nullptr};
#endif
  return &lib;
}
