// memory_check.cpp: the plan against the machine (see memory_check.h).
#include "memory_check.h"

#include "src/base/common.h"
#include "src/precision/precision.h"

namespace tg {

std::string shrink_advice(const Config& cfg, const std::string& name, const MemoryPlan& p) {
  const std::string acts = strf(
      "data.batch_size (now %d) or data.seq_len (now %d): activations take %s of %s's %s "
      "(data.total_batch_tokens keeps the tokens per step by accumulating micro-batches)",
      cfg.data.batch_size, cfg.data.seq_len, fmt_bytes(double(p.activations)).c_str(), name.c_str(),
      fmt_bytes(double(p.total())).c_str());
  const std::string model = strf(
      "the model (model.n_layer, model.n_embd): weights, gradients and optimizer take %s; or "
      "shard the optimizer over ranks (train.zero_stage=1; --zero_ranks N plans it)",
      fmt_bytes(double(p.weights + p.master + p.grads + p.optimizer)).c_str());
  return p.activations * 2 >= p.total() ? "shrink " + acts + "; or " + model
                                        : "shrink " + model + "; or " + acts;
}

std::string memory_refusal(const Config& cfg, const MemoryPlan& p, int local_ranks,
                           const HostMemory& host) {
  const double need = double(p.total()) * local_ranks;
  if (host.available == 0 || need <= double(host.available)) return "";
  const std::string procs =
      local_ranks > 1 ? strf(" for its %d processes on this machine (%d x %s)", local_ranks,
                             local_ranks, fmt_bytes(double(p.total())).c_str())
                      : "";
  return strf(
      "this run plans %s of memory%s and this machine has %s available (MemAvailable in "
      "/proc/meminfo, of %s): it would be killed for memory part way through allocating. To "
      "fit, %s; or a lower precision.mode (16-bit weights and activations). `train_gpt memory` "
      "with the same options shows the plan; --train.memory_check=false skips this check",
      fmt_bytes(need).c_str(), procs.c_str(), fmt_bytes(double(host.available)).c_str(),
      fmt_bytes(double(host.total)).c_str(),
      shrink_advice(cfg, mode_name(precision_spec(cfg).mode), p).c_str());
}

std::string gpu_memory_refusal(const Config& cfg, const MemoryPlan& p, size_t planned,
                               size_t free, size_t total, const std::string& device) {
  const double need = double(planned) * 1.02 + 256.0 * 1048576.0;
  if (free == 0 || need <= double(free)) return "";
  return strf(
      "this run plans %s of GPU memory (with 2%% and 256 MiB for the allocator, %s) and %s has "
      "%s free of %s: it would fail for memory part way through allocating. To fit, %s; or a "
      "lower precision.mode. `train_gpt memory` with the same options shows the GPU plan; "
      "--train.memory_check=false skips this check",
      fmt_bytes(double(planned)).c_str(), fmt_bytes(need).c_str(), device.c_str(),
      fmt_bytes(double(free)).c_str(), fmt_bytes(double(total)).c_str(),
      shrink_advice(cfg, mode_name(precision_spec(cfg).mode), p).c_str());
}

}  // namespace tg
