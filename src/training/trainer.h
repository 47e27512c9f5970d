// trainer.h: one training run, in the order the README describes a step.
//
//   Trainer t(cfg);        communicator, backend, data, model, precision (set-up)
//   t.start();             claim or resume the run directory (newest checkpoint that
//                          verifies), open the logs, evaluate once
//   while (!t.done()) {
//     t.step();            micro-batches forward + backward, gradients reduced over the
//                          ranks, one fused unscale / finiteness / norm pass, the loss-scale
//                          decision, AdamW (or a skipped step)
//     ...                  evaluate(), sample(), save() when they are due
//   }
//   t.finish();            final evaluation, checkpoint, sample, summary.json
//
// What a checkpoint holds besides the tensors is a RunState (src/io/run_state.h); the Trainer
// fills one to save. Resume is verify, vote, apply: each rank reads and checks its part of a
// checkpoint without changing anything or calling a collective, the ranks vote, and only a
// checkpoint every rank accepted is applied (on all of them, together).
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/precision/precision_runtime.h"
#include "progress.h"
#include "run_lock.h"
#include "src/io/run_state.h"
#include "src/backends/backend.h"
#include "src/base/cpu_load.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/data/data.h"
#include "src/data/prepare.h"
#include "src/data/tokenizer.h"
#include "src/io/checkpoint.h"
#include "src/model/model.h"
#include "src/precision/precision.h"
#include "src/numerics/loss_scaler.h"
#include "thread_tuner.h"

namespace tg {

class Comm;

// What one step did.
struct StepResult {
  int64_t step = 0;  // 1-based number of the step just done
  double loss = 0, lr = 0, norm = 0, scale = 1, seconds = 0;
  bool skipped = false;
  int threads = 0;  // CPU threads that ran it (GPU runs: the host's)
  uint64_t comm_bytes = 0;  // sent by this rank for the gradients and weights (GPT::take_comm_bytes)
  // The stop signal (signals.h) some rank had received when the step's gradients were summed,
  // the same on every rank; 0 for none.
  int stop_signal = 0;
};

// The update after the gradients are summed: fused unscale / finiteness / norm, the loss
// scaler's decision, clipping and AdamW. Returns whether the step was skipped and sets
// *norm (NaN when not finite); opt_step counts applied updates. Shared with the benchmark.
bool apply_update(GPT& model, LossScaler& scaler, const Config& cfg, double lr, double scale,
                  int64_t& opt_step, double* norm);

class Trainer {
 public:
  explicit Trainer(const Config& cfg);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void start();
  bool done() const { return step_ >= cfg_.train.steps; }
  StepResult step();
  double evaluate();  // mean val loss over every rank's rows of the val batches
  void sample();      // one sample to stdout and samples.txt (rank 0)
  void save();        // a checkpoint of the current step
  nlohmann::json finish();
  // train.stop_at_step reached before the last step: a checkpoint and a partial summary.
  nlohmann::json stop_early();
  // A stop signal reached every rank's step: a checkpoint and a partial summary, then
  // StoppedBySignal (src/training/signals.h).
  [[noreturn]] void stop_on_signal(int sig);

  bool has_val() const { return val_loader_ != nullptr; }
  void log_step(const StepResult& r);
  void log_val(int64_t step, double val_loss);

 private:
  // Set-up, in this order: communicator, backend and model shape; data; model and precision.
  void setup_comm_and_backend();
  void settle_attention();    // the attention path, before anything is sized for it
  void check_memory() const;  // the memory plan against the machine (memory_check.h)
  void lock_out_dir();  // rank 0 takes train.out_dir's lock; every rank learns the outcome
  void setup_data();
  void setup_model();
  void print_start() const;
  void resume_or_claim();
  // A checkpoint's part for this rank, read and checked; nothing applied yet.
  struct VerifiedCheckpoint {
    std::string dir;
    CheckpointData data;
    RunState state;
  };
  VerifiedCheckpoint verify_checkpoint(const std::string& dir) const;
  bool all_ranks_accept(bool mine);  // the vote: a collective every rank calls
  void apply_checkpoint(VerifiedCheckpoint&& v);
  void upload_moment(CheckpointData& cd, bool second);
  ResumeRequirements resume_requirements() const;
  RunState run_state() const;
  void record_numerics(int64_t step, double scale);
  // The numerics totals over the run per tensor group, for summary.json.
  nlohmann::json numerics_summary() const;
  // A step's parts: the micro-batches (returns this rank's mean loss); the gradients summed
  // over the ranks (returns the mean loss over them); the loss scaler's decision and AdamW;
  // timing and bookkeeping.
  void forward_backward(const StepResult& r);
  // The step's loss from its micro-batches' queued losses (GPT::take_losses: a wait).
  double take_loss();
  void check_loss(double loss, const StepResult& r) const;
  double sum_gradients(double loss, StepResult& r);
  void update(StepResult& r);
  void end_step(StepResult& r, double loss, double t0);
  nlohmann::json write_partial_summary(const nlohmann::json& extra);
  // finish(): the run's final numbers, summary.json and the summary lines.
  struct FinalNumbers {
    double val_loss = NAN, val_bpb = NAN, train_loss = NAN, wall = 0, tokens_per_second = NAN,
           gap = NAN;
    double others_cpu_share = NAN;  // of the cores' time, by other processes (cpu_load.h)
  };
  FinalNumbers final_numbers(double final_val_loss) const;
  nlohmann::json summary_json(const FinalNumbers& f) const;
  void print_summary(const FinalNumbers& f) const;

  Config cfg_;
  PrecisionSpec spec_;  // cfg_'s precision.* keys, read once (src/precision/precision.h)
  double t_start_;
  RunDirLock out_dir_lock_;  // rank 0's, held for the whole run (src/training/run_lock.h)
  CpuTimes cpu_start_ = cpu_times_now();  // for the summary's share of the cores others took
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Comm> nccl_;
  Comm* cm_ = nullptr;
  int world_ = 1, rank_ = 0;
  GPTConfig mc_;
  ModelFile init_;
  nlohmann::json meta_;
  int B_ = 0, T_ = 0, grad_accum_ = 1;
  int64_t step_tokens_ = 0;
  double loss_floor_ = NAN, ln_vocab_ = NAN;
  TokensPerByte val_tpb_;  // the val split's tokens per byte, for bits per byte
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<GPT> model_;
  // Quantization state, auto precision, smoothing, quantization telemetry.
  std::unique_ptr<PrecisionRuntime> precision_;
  bool device_decision_ = false;
  std::unique_ptr<ThreadTuner> tuner_;  // CPU backend with train.adapt_threads
  double peak_flops_ = 0;

  // The run's state (what a checkpoint holds besides the tensors).
  std::string run_id_;
  int64_t step_ = 0, start_step_ = 0, opt_step_ = 0;
  Rng sample_rng_;
  LossScaler scaler_;
  RunCounters counters_;
  double initial_val_loss_ = NAN;
  std::string resumed_from_;
  nlohmann::json cfg_json_;

  // Logs and per-process bookkeeping.
  LineWriter metrics_, samples_;
  Tokenizer tokenizer_;
  TokenizerRecord tokenizer_record_;  // what checkpoints record (src/data/tokenizer.h)
  int32_t first_token_ = 0;
  std::map<std::string, TensorStats> numerics_totals_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<double> recent_losses_;
  double last_loss_ = NAN, run_train_seconds_ = 0;
  int64_t run_tokens_ = 0, run_steps_ = 0;  // this process's steps (a resumed run's since resuming)
  uint64_t run_comm_bytes_ = 0;
  EtaClock eta_;  // the progress line's time left
};

}  // namespace tg
