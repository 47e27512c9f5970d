// optim_file.h: the optimizer files of a checkpoint (optim_file.cpp), as checkpoint.cpp writes
// and reads them; write_optim_shard itself is declared with the checkpoint (checkpoint.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint.h"

namespace tg {

// The file's name in the checkpoint directory: optim_rank<R>.bin, or optim.bin for rank < 0.
std::string optim_file_name(int rank);
// The file's entry in state.json's "files": size, checksum, the parameter range, the formats.
nlohmann::json optim_file_state_entry(const OptimFileRecord& r);
// The Adam moments (and compensation) of parameters [begin, end) of n into cd, widened to fp32
// or kept as FP8 blocks where whole, from the files `files` (state.json's) lists in `dir`.
void load_moments(const std::string& dir, const nlohmann::json& files, size_t n, size_t begin,
                  size_t end, CheckpointData* cd);

}  // namespace tg
