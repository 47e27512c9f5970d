// train.h: the training run: data, model, optimizer, evaluation, checkpoints, logs.
#pragma once
#include <nlohmann/json.hpp>

#include "src/config/config.h"

namespace tg {

// Trains as configured, writing config.json, metrics.jsonl, checkpoints, samples.txt and
// summary.json under train.out_dir; returns the summary.
nlohmann::json run_training(const Config& cfg);

}  // namespace tg
