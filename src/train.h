// train.h: the training run: data, model, optimizer, evaluation, checkpoints, logs.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "backend.h"
#include "config.h"
#include "model.h"

namespace tg {

// Picks the backend for train.device and sets the CPU thread count.
std::unique_ptr<Backend> make_backend(const Config& cfg);
// Model shape from the model.* keys (model.init_from is not read here).
GPTConfig model_config(const Config& cfg);

// Trains as configured, writing config.json, metrics.jsonl, checkpoints, samples.txt and
// summary.json under train.out_dir; returns the summary.
nlohmann::json run_training(const Config& cfg);

}  // namespace tg
