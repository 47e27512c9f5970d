// memory_check.h: a run refused before it allocates more than the machine has.
//
// `train` plans its memory with the planner `train_gpt memory` prints (plan_memory_of,
// src/precision/quant_memory.h) and, on the CPU backend, compares the plan times the run's
// processes on this machine with MemAvailable (/proc/meminfo). A run that cannot fit is refused
// before it allocates anything, with the plan's total, what is available and the keys that
// shrink it, rather than OOM-killed part way (where the kernel may first kill another process
// of a shared machine). The exit code is 2, as for a value out of range: the config asks for
// more than this machine holds. train.memory_check=false skips the check. On a GPU the plan is
// the GPU memory plan (planned_gpu_bytes: what `train_gpt memory` prints for the GPU, which
// matched the H200's measured peak to the MiB at 124M and 350M) against the device's free
// memory (cudaMemGetInfo, after the CUDA context took its share), with a margin for what the
// plan leaves out: the allocator's rounding and slack, 2% and 256 MiB.
#pragma once
#include <string>

#include "src/base/host_memory.h"
#include "src/config/config.h"
#include "src/model/model.h"

namespace tg {

// What makes plan p (of mode `name`) smaller, its largest part first: the activations (the
// micro-batch) or the model's tensors (its size, or ZeRO-1 over several ranks).
std::string shrink_advice(const Config& cfg, const std::string& name, const MemoryPlan& p);

// Why a run of cfg planning p per process, local_ranks of them on a machine with `host`, is
// refused; "" when it fits or the machine's memory is unknown.
std::string memory_refusal(const Config& cfg, const MemoryPlan& p, int local_ranks,
                           const HostMemory& host);

// The same for a GPU run planning `planned` bytes on device `device` (its name) with `free` of
// `total` bytes free; p is the run's host-side plan, for the advice.
std::string gpu_memory_refusal(const Config& cfg, const MemoryPlan& p, size_t planned,
                               size_t free, size_t total, const std::string& device);

}  // namespace tg
