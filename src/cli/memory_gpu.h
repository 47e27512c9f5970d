// memory_gpu.h: `train_gpt memory`'s GPU part: what the CUDA backend holds beside the tensors of
// the plan (src/precision/cuda_scratch.h) and the whole per-process plan of a GPU run.
#pragma once
#include <vector>

#include "src/numerics/precision_mode.h"

namespace tg {

struct Config;
struct GPTConfig;

// One row per mode: cuBLASLt's workspace, attention's scratch for cfg's cuda.attention, the
// other slots, and the GPU total (planned_gpu_bytes) for one process.
void print_cuda_scratch(const Config& cfg, const GPTConfig& mc, const std::vector<Mode>& modes);

}  // namespace tg
