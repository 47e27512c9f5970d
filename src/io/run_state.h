// run_state.h: everything a checkpoint holds besides the tensors (state.json), written and
// verified in one place.
//
// A checkpoint's state.json is read back only through run_state_from_json, which checks
// every field's type and range and the fields against each other and against the run that
// resumes (step <= train.steps, step == completed_steps, opt_step == step - skipped steps,
// loader position inside the shards, RNG state, loss-scale state): a damaged or edited
// state file is an error that names the file and the field, never a run that trains from
// step -2^31.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "src/base/rng.h"
#include "src/data/data.h"
#include "src/data/tokenizer.h"
#include "src/model/model.h"
#include "src/numerics/loss_scaler.h"
#include "src/numerics/precision_mode.h"

namespace tg {

struct RunCounters {
  int64_t tokens_seen = 0;
  double train_seconds = 0;
  int64_t skipped_steps = 0;
};

struct RunState {
  std::string run_id;    // names the run; pruning only removes checkpoints of this run
  int64_t step = 0;      // steps done (skipped steps included)
  int64_t opt_step = 0;  // optimizer updates applied (skipped steps do not count)
  LoaderPosition data;   // where the training loader continues
  int batch_size = 0, seq_len = 0, world_size = 1;
  Rng sample_rng;
  RunCounters counters;
  Mode mode = Mode::FP32;         // precision.mode it was trained in
  LossScaler loss_scale;          // kind and state (scale, good_steps, hysteresis_left)
  nlohmann::json fp8;             // LinearQuantizers::to_json(), or null
  nlohmann::json auto_precision;  // AutoPrecision::to_json() (precision.mode=auto), or null
  nlohmann::json smoothing;       // ChannelSmoothing::to_json() (smoothing on), or null
  double initial_val_loss = NAN;
  nlohmann::json config;      // the effective config of the run that wrote it
  TokenizerRecord tokenizer;  // the data's; unknown in checkpoints from before the record
  GPTConfig model;
  size_t num_params = 0;
};

nlohmann::json run_state_to_json(const RunState& s);
// x, or null where it is not finite (JSON has no NaN): for state.json and summary.json.
nlohmann::json json_or_null(double x);

// What the resuming run requires of a checkpoint's state.
struct ResumeRequirements {
  GPTConfig model;
  size_t num_params = 0;
  int batch_size = 0, seq_len = 0, world_size = 1;
  int64_t steps = 0;        // train.steps
  int64_t step_tokens = 0;  // tokens per optimizer step
  size_t train_shards = 0;
  int64_t train_tokens = 0;  // tokens in all training shards
};

// Parses and verifies a state.json already read as JSON; `path` names it in errors.
// Throws Error("checkpoint state PATH: field 'x.y' ...").
RunState run_state_from_json(const nlohmann::json& j, const std::string& path,
                             const ResumeRequirements& req);

// A fresh run's id: 16 hex digits from the clock, the process and the machine.
std::string new_run_id();

}  // namespace tg
