// checkpoint.h: llm.c model files and our training-state checkpoints.
//
// Model file (llm.c): 256 int32 header ([0]=20240326, [1]=3 fp32 or 5 bf16, [2]=maxT,
// [3]=V, [4]=L, [5]=NH, [6]=C, [7]=Vp) followed by the parameters in GPT order.
//
// Checkpoint: a directory <out_dir>/ckpt_<step, 8 digits> holding
//   model.bin   the fp32 master weights as an llm.c version-3 model file
//   optim.bin   256 int32 header ([0]=20261129, [1]=1, [2..3]=parameter count as int64)
//               then Adam m and v, fp32
//   state.json  step, config, data-loader position, RNG states, counters, and the size
//               and FNV-1a checksum of each binary file
// It is written under a temporary name, every file fsync'ed, then renamed: a directory
// named ckpt_* is always complete. Older ones beyond `keep` are removed afterwards.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model.h"

namespace tg {

constexpr int32_t kModelMagic = 20240326;
constexpr int32_t kStateMagic = 20261129;

void write_model_file(const std::string& path, const GPTConfig& cfg, const std::vector<float>& p);
struct ModelFile {
  GPTConfig cfg;
  std::vector<float> params;
};
ModelFile read_model_file(const std::string& path);

struct CheckpointData {
  nlohmann::json state;
  std::vector<float> params, m, v;
};

// Writes a checkpoint for `step`; returns its directory.
std::string save_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                            const nlohmann::json& state, const std::vector<float>& params,
                            const std::vector<float>& m, const std::vector<float>& v, int keep);
// Complete checkpoint directories in out_dir, oldest first.
std::vector<std::string> list_checkpoints(const std::string& out_dir);
// Loads and verifies a checkpoint (sizes, checksums, architecture against `cfg`).
CheckpointData load_checkpoint(const std::string& dir, const GPTConfig& cfg);

uint64_t fnv1a64(const void* data, size_t n);

}  // namespace tg
