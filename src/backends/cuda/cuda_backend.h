// cuda_backend.h: the CUDA backend, for host code compiled by g++ as well as nvcc.
//
// Built only when nvcc is used (the Makefile then defines TG_CUDA for every file and links
// src/backends/cuda/*.cu); without it, none of this exists and make_backend() says that the binary
// was built without CUDA.
#pragma once
#include <memory>
#include <string>

#include "src/backends/backend.h"

namespace tg {

// Number of CUDA devices visible (0 when there is none, or no driver).
int cuda_device_count();
// The backend on GPU `device`: cudaMalloc'd memory, one stream, cuBLASLt.
std::unique_ptr<Backend> make_cuda_backend(int device = 0, const BackendOptions& options = {});
// The bytes a CUDA backend's scratch slot (src/backends/cuda/launch.h's ScratchSlot) was last grown
// to: the largest request so far (the allocation rounds it up to 64 bytes). Tests of the scratch
// plan (src/precision/scaled_scratch.h); 0 for any other backend.
size_t cuda_scratch_bytes(const Backend& b, int slot);

}  // namespace tg
