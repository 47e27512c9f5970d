// backend_factory.h: the backend a configuration asks for (train.device, cuda.*, cpu.*).
#pragma once
#include <memory>

#include "src/backends/backend.h"
#include "src/config/config.h"

namespace tg {

// Picks the backend for train.device and sets the CPU thread count and GEMM loops.
// On a machine with several GPUs, `local_rank` (this process's index on its machine) picks
// the GPU: local_rank % number of GPUs.
std::unique_ptr<Backend> make_backend(const Config& cfg, int local_rank = 0);
// The backend options of the cuda.* and precision.loss_scale.on_device keys.
BackendOptions backend_options(const Config& cfg);

}  // namespace tg
