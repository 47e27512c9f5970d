// precision_runtime.h: the run's quantization machinery in one place, and the points of a
// training step where it acts.
//
// What it owns (none of it in an unquantized mode: fp32, bf16, fp16):
//   LinearQuantizers  the block linears' scales, per-linear recipes, random seed
//                     (src/model/linear_quantizers.h)
//   AutoPrecision     precision.mode=auto: each linear's format (src/precision/auto_precision.h)
//   ChannelSmoothing  precision.recipe.smooth, auto.outliers=smooth (src/precision/smoothing.h)
//   QuantTelemetry    the block-scaled modes' per-operand statistics
//                     (src/precision/quant_telemetry.h)
// and what ties them together: each linear's recipe (auto's format with the smoothing
// factors of now), the probes that measure a step's operands, the backend's QuantOptions.
//
// The Trainer calls, for step n (1-based):
//   begin_step(n)                 which measurements this step takes
//   before_forward(micro)         per micro-batch: its random seed; the first one is measured
//   after_backward()              per micro-batch: measurement over
//   before_gradient_sum(comm)     auto's gradient norms; FP8 amax histories over the ranks
//   after_gradient_sum(comm, m)   auto's decision, telemetry and smoothing records into m
// and, for checkpoints, save() into a RunState; verify() then load() from one (verify
// throws without changing anything). The checkpoint fields keep their names (fp8,
// auto_precision, smoothing), so older checkpoints load.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "src/backends/backend.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/io/run_state.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/precision/auto_precision.h"
#include "src/precision/quant_telemetry.h"
#include "src/precision/smoothing.h"

namespace tg {

class Comm;

class PrecisionRuntime {
 public:
  // Builds what precision.* asks for and hands it to the backend and the model (nothing in
  // an unquantized mode). UsageError when the backend cannot run the mode. Any shape runs:
  // one a GPU's native GEMMs cannot take goes through the portable path.
  // cfg, be and model must outlive the runtime.
  PrecisionRuntime(const Config& cfg, Backend& be, GPT& model);
  PrecisionRuntime(const PrecisionRuntime&) = delete;
  PrecisionRuntime& operator=(const PrecisionRuntime&) = delete;

  // The block linears are quantized (per-tensor FP8 or block-scaled).
  bool quantized() const { return state_ != nullptr; }

  // ---- a training step ----
  void begin_step(int64_t step);
  void before_forward(int micro);
  void after_backward();
  void before_gradient_sum(Comm& comm);
  void after_gradient_sum(Comm& comm, LineWriter& metrics);

  // ---- checkpoints ----
  void save(RunState& s) const;
  // Error naming `path` when the state's precision fields do not fit this run.
  void verify(const RunState& s, const std::string& path) const;
  void load(const RunState& s, const std::string& path);

  // ---- logs ----
  void print_start() const;
  // The summary's "quant" and "auto" entries.
  void add_summary(nlohmann::json& summary) const;
  void print_summary() const;

 private:
  void make_smoothing_and_auto();
  // Each linear's recipe: auto's chosen formats (or the mode's recipe) with the smoothing
  // factors of now; set where either changes.
  void apply_linear_recipes();
  void auto_grad_norms();
  void auto_decide(Comm& comm, LineWriter& metrics);
  void smooth_update(Comm& comm, LineWriter& metrics);
  // Which of the checkpoint's precision fields apply to this run.
  bool takes_quantizers(const RunState& s) const;
  bool takes_auto(const RunState& s) const;
  bool takes_smoothing(const RunState& s) const;

  const Config& cfg_;
  Backend& be_;
  GPT& model_;
  GPTConfig mc_;
  std::unique_ptr<LinearQuantizers> state_;
  std::unique_ptr<AutoPrecision> auto_;       // precision.mode=auto
  std::unique_ptr<ChannelSmoothing> smooth_;  // precision.recipe.smooth, auto.outliers=smooth
  std::unique_ptr<QuantTelemetry> telemetry_;
  bool smooth_logged_ = false;

  // The step being run (1-based) and what it measures.
  int64_t step_ = 0;
  bool measure_auto_ = false, measure_smooth_ = false, measure_quant_ = false;
  ProbeFanout probes_;
};

}  // namespace tg
