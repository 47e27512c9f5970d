// train.h: the training run: data, model, optimizer, evaluation, checkpoints, logs.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "backend.h"
#include "config.h"
#include "model.h"

namespace tg {

// Picks the backend for train.device and sets the CPU thread count.
// The backend cfg.train.device asks for; on a machine with several GPUs, `local_rank`
// (this process's index on its machine) picks the GPU: local_rank % number of GPUs.
std::unique_ptr<Backend> make_backend(const Config& cfg, int local_rank = 0);
// The backend options of the cuda.* and precision.loss_scale.on_device keys.
BackendOptions backend_options(const Config& cfg);
// The compute type of a precision mode (fp32 -> F32, bf16 -> BF16, fp16 -> F16).
DType mode_dtype(const std::string& mode);
// precision.loss_scale.kind with `auto` resolved (dynamic for fp16, none otherwise).
std::string loss_scale_kind(const Config& cfg);
// How the update numbered opt_step (1-based; 0 = the initial copy) rounds master weights
// into the compute copy.
Rounding weight_rounding(const Config& cfg, int opt_step);
class Comm;
// Sums the gradients over the ranks (fp32 on the wire; 16-bit ones rounded once after).
void all_reduce_gradients(Backend& be, Tensor grads, Comm& cm);
// Makes the first gradient element +inf (precision.inject_nonfinite_step).
void poison_gradient(Backend& be, Tensor grads);
// Model shape from the model.* keys (model.init_from is not read here).
GPTConfig model_config(const Config& cfg);

// Trains as configured, writing config.json, metrics.jsonl, checkpoints, samples.txt and
// summary.json under train.out_dir; returns the summary.
nlohmann::json run_training(const Config& cfg);

}  // namespace tg
