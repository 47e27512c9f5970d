// train.h: the training run: data, model, optimizer, evaluation, checkpoints, logs.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "precision.h"

namespace tg {

// Picks the backend for train.device and sets the CPU thread count.
// The backend cfg.train.device asks for; on a machine with several GPUs, `local_rank`
// (this process's index on its machine) picks the GPU: local_rank % number of GPUs.
std::unique_ptr<Backend> make_backend(const Config& cfg, int local_rank = 0);
// The backend options of the cuda.* and precision.loss_scale.on_device keys.
BackendOptions backend_options(const Config& cfg);
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
