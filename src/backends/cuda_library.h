// cuda_library.h: the CUDA backend as a library that train_gpt opens only when a run asks
// for a GPU.
//
// Built with nvcc, the CUDA backend (src/backends/cuda/*.cu with cudart and cuBLAS(Lt); libnccl is
// opened only for a multi-GPU job, src/backends/cuda/nccl_comm.cu) goes into libtrain_gpt_cuda.so
// beside the binary, and train_gpt itself links none of the CUDA libraries: a CPU run neither loads
// nor pays for them (their pages were most of a CPU run's resident memory). The library finds
// the host code it uses (tensors, errors, formats) in the executable, which exports its
// symbols (-rdynamic). A binary that links the CUDA objects itself (the test binary) uses them
// directly and opens nothing.
#pragma once
#include <memory>
#include <string>

#include "backend.h"
#include "src/comm/comm.h"

namespace tg {

// The library's entry points, handed over by tg_cuda_library(). `abi` guards against a
// library left from another build of the program.
struct CudaLibrary {
  int abi;
  int (*device_count)();
  std::unique_ptr<Backend> (*make_backend)(int device, const BackendOptions& options);
  // Null without NCCL.
  std::unique_ptr<Comm> (*make_nccl_comm)(Bootstrap& bootstrap, Backend& backend);
};
constexpr int kCudaLibraryAbi = 3;

// Whether this binary was built with the CUDA backend (nvcc was found).
bool cuda_built();
// Whether the NVIDIA driver shows a device (/dev/nvidia<N>, /proc/driver/nvidia/gpus/), read
// without loading anything: train.device=auto opens the library only then.
bool nvidia_device_present();
// The library, opened on the first call (or the linked-in objects); throws Error naming the
// file and the loader's message when it cannot be opened.
const CudaLibrary& cuda_library();
// Whether cuda_library() has been called successfully in this process.
bool cuda_library_loaded();
// Where train_gpt looks for the library: beside its own executable.
std::string cuda_library_path();

// Several GPUs' communicator over NCCL for the CUDA backend `backend`, from the library (an
// Error when built without NCCL's header, or when libnccl cannot be loaded).
std::unique_ptr<Comm> make_gpu_comm(Bootstrap& bootstrap, Backend& backend);

}  // namespace tg

// Defined by src/backends/cuda/library.cu, in the library or linked into the test binary.
extern "C" const tg::CudaLibrary* tg_cuda_library();
