// memory_check.h: a run refused before it allocates more than the machine has.
//
// `train` plans its memory with the planner `train_gpt memory` prints (plan_memory_of,
// src/precision/quant_memory.h) and, on the CPU backend, compares the plan times the run's
// processes on this machine with MemAvailable (/proc/meminfo). A run that cannot fit is refused
// before it allocates anything, with the plan's total, what is available and the keys that
// shrink it, rather than OOM-killed part way (where the kernel may first kill another process
// of a shared machine). The exit code is 2, as for a value out of range: the config asks for
// more than this machine holds. train.memory_check=false skips the check. GPU runs are not
// checked yet: the GPU's free memory needs a CUDA runtime query that the host code does not
// make (the backend library would have to export one).
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

}  // namespace tg
