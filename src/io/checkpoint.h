// checkpoint.h: llm.c model files and our training-state checkpoints.
//
// Model file (llm.c): 256 int32 header ([0]=20240326, [1]=3 fp32 or 5 bf16, [2]=maxT,
// [3]=V, [4]=L, [5]=NH, [6]=C, [7]=Vp) followed by the parameters in GPT order.
//
// Checkpoint: a directory <out_dir>/ckpt_<step, 8 digits> holding
//   model.bin   the fp32 master weights as an llm.c version-3 model file
//   optim.bin   256 int32 header ([0]=20261129, [1]=1, [2..3]=parameter count as int64,
//               [10]=m's format, [11]=v's format: precision.state.*'s file codes,
//               src/numerics/state_format.h, 0 = fp32 as in files from before the formats;
//               [12]=the master weights' format, src/numerics/master_format.h, 0 = fp32;
//               with fp8 moments [13]=their block size, [14]=1 for e8m0 scales + 2 for
//               COAT's expansion)
//               then Adam m and v, each in its format's storage (fp32, or the bf16 / fp16
//               codes the optimizer keeps, src/numerics/moment_format.h; fp8: the codes, then
//               the blocks' meta, src/numerics/moment_block.h), then for
//               bf16-kahan master weights their bf16 compensation (model.bin then holds the
//               bf16 weights, which are the master's other half)
//   optim_rank<R>.bin  instead of optim.bin under ZeRO-1, one per rank, written by that
//               rank: header [0]=20261129, [1]=2, [2..3]=parameter count, [4..5]=first
//               parameter, [6..7]=count, [8]=rank, [9]=world size (int64s little-endian),
//               [10..12] the formats, then m and v (and the compensation) of that range. A checkpoint of either
//               kind resumes with or without sharding: each rank reads the range it owns
//               from the files.
//   state.json  step, run id, config, data-loader position, RNG states, counters, and
//               the size and FNV-1a checksum of each binary file (src/io/run_state.h);
//               an optimizer file's entry also names its range and its state's formats
//               ("adam_m", "adam_v", "master"; "moment_block", "moment_scale",
//               "moment_expand" with fp8 moments), so that every rank learns them from
//               state.json alone
//   manifest.json  written last: size and FNV-1a checksum of state.json (version 2)
// It is written under a temporary name, every file fsync'ed, then renamed: a directory
// named ckpt_* is always complete. This run's older ones beyond `keep` are removed
// afterwards (renamed .ckpt_<step>.pruning first, so that a kill part way leaves a name the
// next run's cleanup removes: checkpoint_cleanup.h); checkpoints of other runs, or that
// cannot be read, are never removed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model_file.h"
#include "src/model/model.h"
#include "src/numerics/master_format.h"
#include "src/numerics/state_format.h"

namespace tg {

constexpr int32_t kStateMagic = 20261129;
constexpr int kStateVersion = 2;  // state.json; 1 (no manifest) is still read

struct CheckpointData {
  nlohmann::json state;
  std::vector<float> params;  // all master weights
  // Adam moments of the requested range, widened to fp32 (exactly: every stored code is an
  // fp32 value), and the formats the checkpoint stores them in.
  std::vector<float> m, v;
  StateFormat m_format = StateFormat::FP32, v_format = StateFormat::FP32;
  MomentBlocking blocking;  // of fp8 moments
  // fp8 moments as stored, for a resume in the same formats (re-encoding decoded blocks
  // need not give back their scales): the codes of the range and the meta of its blocks;
  // empty for other formats, or when the range does not start on a block of the files.
  std::vector<uint8_t> m_codes, v_codes;
  std::vector<float> m_meta, v_meta;
  // The master weights' format; for bf16-kahan the compensation's bf16 codes of the range
  // (params then holds the bf16 weights).
  MasterFormat master = MasterFormat::FP32;
  std::vector<uint16_t> comp;
};

// Adam moments as the optimizer keeps them: `count` elements of m, then of v, each in its
// format's storage (the backend's bytes, written as they are).
// With bf16-kahan master weights, `count` bf16 codes of their compensation follow.
// fp8 moments (src/numerics/moment_block.h): each is stored as its `count` codes, zeros up to
// a multiple of 16 bytes, then the fp32 meta of its blocks (m_meta / v_meta).
struct MomentBytes {
  StateFormat m_format = StateFormat::FP32, v_format = StateFormat::FP32;
  const void* m = nullptr;
  const void* v = nullptr;
  MasterFormat master = MasterFormat::FP32;
  const void* comp = nullptr;
  MomentBlocking blocking{};
  const float* m_meta = nullptr;
  const float* v_meta = nullptr;
};

// Writes a checkpoint for `step`; returns its directory. The vector form holds fp32 moments.
std::string save_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                            const nlohmann::json& state, const std::vector<float>& params,
                            const MomentBytes& moments, int keep);
std::string save_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                            const nlohmann::json& state, const std::vector<float>& params,
                            const std::vector<float>& m, const std::vector<float>& v, int keep);

// A sharded save (ZeRO-1), in three phases: rank 0 prepares the temporary directory; every
// rank writes its optimizer file into it; rank 0 publishes with the files' records.
struct OptimFileRecord {
  uint64_t bytes = 0, fnv1a64 = 0;
  int64_t begin = 0, count = 0;
  int32_t rank = 0, world = 1;
  StateFormat m_format = StateFormat::FP32, v_format = StateFormat::FP32;
  MasterFormat master = MasterFormat::FP32;
  MomentBlocking blocking{};
};
std::string checkpoint_tmp_dir(const std::string& out_dir, int64_t step);
void prepare_checkpoint_dir(const std::string& out_dir, int64_t step);
OptimFileRecord write_optim_shard(const std::string& tmp_dir, int64_t total, int64_t begin,
                                  const MomentBytes& moments, int64_t count, int rank, int world);
OptimFileRecord write_optim_shard(const std::string& tmp_dir, int64_t total, int64_t begin,
                                  const float* m, const float* v, int64_t count, int rank,
                                  int world);
std::string publish_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                               const nlohmann::json& state, const std::vector<float>& params,
                               const std::vector<OptimFileRecord>& shards, int keep);

// The model.bin of a checkpoint directory, or of a run directory's latest checkpoint.
std::string checkpoint_model_file(const std::string& dir);
// Complete checkpoint directories in out_dir (ckpt_<step>), oldest first.
std::vector<std::string> list_checkpoints(const std::string& out_dir);
// The step in a checkpoint directory's name, or -1 when it is not ckpt_<digits>.
int64_t checkpoint_dir_step(const std::string& dir);
// A checkpoint's state.json, verified against manifest.json and checked for its format
// and version (its fields are checked by src/io/run_state.h).
nlohmann::json read_checkpoint_state(const std::string& dir);
// The model of a checkpoint directory, or of a run directory's latest checkpoint, verified as
// resume verifies it: state.json under its manifest, model.bin's size and checksum, every
// weight finite (`sample` and `export` read checkpoints through it).
ModelFile load_checkpoint_model(const std::string& dir);
// Loads and verifies a checkpoint (sizes, checksums, architecture against `cfg`), with the
// Adam moments of parameters [begin, begin + count) (count = SIZE_MAX: to the end).
CheckpointData load_checkpoint(const std::string& dir, const GPTConfig& cfg, size_t begin = 0,
                               size_t count = SIZE_MAX);

uint64_t fnv1a64(const void* data, size_t n);

}  // namespace tg
