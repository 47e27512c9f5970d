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
// What a checkpoint holds besides the tensors is a RunState (src/run_state.h); the Trainer
// fills one to save and applies one after verifying it to resume.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "auto_precision.h"
#include "backend.h"
#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "fileio.h"
#include "fp8.h"
#include "loss_scaler.h"
#include "model.h"
#include "quant_telemetry.h"
#include "run_state.h"
#include "smoothing.h"
#include "thread_tuner.h"
#include "tokenizer.h"

namespace tg {

class Comm;

// What one step did.
struct StepResult {
  int64_t step = 0;  // 1-based number of the step just done
  double loss = 0, lr = 0, norm = 0, scale = 1, seconds = 0;
  bool skipped = false;
  int threads = 0;  // CPU threads that ran it (GPU runs: the host's)
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

  int64_t current_step() const { return step_; }
  bool has_val() const { return val_loader_ != nullptr; }
  void log_step(const StepResult& r);
  void log_val(int64_t step, double val_loss);

 private:
  void setup_precision();
  void print_start() const;
  void resume_or_claim();
  void load_checkpoint_state(const std::string& dir);
  ResumeRequirements resume_requirements() const;
  RunState run_state() const;
  void record_numerics(int64_t step, double scale);
  // Each linear's recipe: auto's chosen formats (or the mode's recipe) with the smoothing
  // factors of now; set where either changes.
  void apply_linear_recipes();
  // precision.mode=auto: a measurement's end.
  void auto_grad_norms();
  void auto_decide();
  // Channel smoothing: new factors from this step's measurement.
  void smooth_update();

  Config cfg_;
  double t_start_;
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
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<Fp8State> fp8_;
  std::unique_ptr<AutoPrecision> auto_;       // precision.mode=auto
  std::unique_ptr<ChannelSmoothing> smooth_;  // precision.recipe.smooth, auto.outliers=smooth
  // The block-scaled modes' per-operand quantization statistics (precision.telemetry_every).
  std::unique_ptr<QuantTelemetry> quant_telemetry_;
  ProbeFanout probes_;  // of the step being measured
  bool smooth_logged_ = false;
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
  int32_t first_token_ = 0;
  std::map<std::string, TensorStats> numerics_totals_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<double> recent_losses_;
  double last_loss_ = NAN, run_train_seconds_ = 0;
  int64_t run_tokens_ = 0;
};

}  // namespace tg
