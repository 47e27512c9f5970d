// memory_states.h: `train_gpt memory --states`: what each optimizer-state preset keeps.
#pragma once
#include <string>

#include "src/numerics/precision_mode.h"

namespace tg {

struct Config;

// Tables of the presets in `names` (comma-separated preset names, or "all"): each one's bytes
// per parameter of weights, master weights, gradients and Adam moments, and their totals at
// GPT-2 124M, 350M, 774M and 1.5B, in mode `mode`: one process, then per rank of ZeRO-1 over
// zero_ranks. A preset the mode cannot keep is listed below with the run's refusal.
// UsageError for an unknown name.
void print_state_presets(const Config& cfg, Mode mode, const std::string& names, int zero_ranks);

}  // namespace tg
