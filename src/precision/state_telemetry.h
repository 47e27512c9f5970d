// state_telemetry.h: what the optimizer state's formats (precision.state.*) do to an update,
// measured around one AdamW step at the numerics-telemetry steps (precision.telemetry_every).
// Per parameter tensor (per layer for the stacked ones), over the elements whose summed
// gradient is not zero:
//   stagnation     the share whose stored master weight the update left as it was (bf16
//                  master weights lose updates below half a bf16 step to rounding; fp32 ones
//                  almost never do)
//   m_underflow,   the share whose stored moment is zero although the gradient was not
//   v_underflow    (a moment below its format's smallest value)
//   m_saturation,  the share whose stored moment is at its format's largest value or not
//   v_saturation   finite
// and over all of them update_ratio = rms(w_after - w_before) / rms(w_before). Under ZeRO-1
// each rank measures its shard of the master weights and moments and the sums are added over
// the ranks, so every sharding reports the same numbers.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "src/model/model.h"

namespace tg {

class Comm;

// The master weights of this rank's shard before the update.
struct StateProbe {
  std::vector<float> before;
};
StateProbe state_probe_before(GPT& model);
// After the update: {"<param>": {"stagnation": [per layer], "update_ratio": [...], ...}}, one
// value per layer for the stacked tensors and one for the others. Every rank must call it
// (comm: the sums over ZeRO-1's shards; nullptr alone).
nlohmann::json state_probe_after(GPT& model, const StateProbe& probe, Comm* comm);

}  // namespace tg
