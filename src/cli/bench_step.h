// bench_step.h: what `train_gpt bench` and its per-op profile share: the models it times, its
// arguments, the config a mode runs in, and one training step on synthetic tokens, run by the
// precision runtime as the Trainer runs it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/config/config.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/numerics/loss_scaler.h"
#include "src/precision/precision_runtime.h"

namespace tg {

struct BenchCase {
  const char* name;
  int L, C, NH, V, maxT, B, T;
};

// What `train_gpt bench` was asked to time.
struct BenchArgs {
  Config cfg;  // cuda.* and cpu.gemm choose the paths that are timed
  int iters = 10, repeats = 5, gpt2_B = 8, gpt2_T = 1024;
  std::string device = "cpu", model = "small";
  std::vector<Mode> modes;
  Fp8Config fp8cfg;
  QuantOptions fp8opt;
  bool profile = false;              // the per-op profile instead of the step table
  std::string out = "runs/profile";  // where the profile's markdown and CSV go
};

// The run configuration the bench times a mode in: the command line's device and fp8 keys,
// every layer quantized (recipe.bf16_last = 0), no telemetry.
Config bench_config(const BenchArgs& a, Mode mode);

double median(std::vector<double> v);

// One model in one mode on a backend, stepping as the Trainer steps: forward, backward, the
// fused gradient check and AdamW (the trainer's apply_update) at lr 1e-4, on random tokens.
class BenchStep {
 public:
  BenchStep(Backend& be, const BenchCase& bc, const Config& cfg);
  // One step, queued on the backend (call be.synchronize() to wait for it).
  void run();
  const GPTConfig& model_config() const { return gcfg_; }

 private:
  Config cfg_;
  GPTConfig gcfg_;
  BenchCase bc_;
  LossScaler scaler_;  // none: the bench measures the step, not the scaler
  int64_t opt_step_ = 0;
  int step_ = 0;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<PrecisionRuntime> precision_;
  std::vector<int32_t> in_, tg_;
};

}  // namespace tg
