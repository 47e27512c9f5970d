// cost_model.h: the GPU cost model of one training step (docs/gpu.md, "The cost model"): the
// memory-bound kernels' traffic measured under the emulator (tests/cuda/traffic.h) against
// their minimum, scaled to GPT-2 124M, the GEMMs counted analytically, a predicted time per
// row at a GPU's bandwidth and peak. tests/cuda/cost_model_checked.cpp measures and checks;
// cost_report.cpp holds the analytic half and writes the tables.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/model/model.h"

namespace cost {

// The shapes of a bf16 training step (activations, weights and gradients 2 bytes; master
// weights and Adam moments fp32, the default state).
struct Dims {
  tg::GPTConfig cfg;
  int B, T;
  size_t BT() const { return size_t(B) * T; }
  int C() const { return cfg.n_embd; }
  int L() const { return cfg.n_layer; }
  int NH() const { return cfg.n_head; }
  int V() const { return cfg.vocab_size; }
  int Vp() const { return cfg.padded_vocab_size; }
};
// GPT-2 124M at B 8 x T 1024, the benchmark's shape (docs/gpu-results.md).
Dims gpt2_124m();

// `count` calls per step of one op at sizes (a, b), whose meaning is the op's (rows and
// columns, or elements).
struct Call {
  int count;
  size_t a, b;
};

// What a GPU does per second: for the H200, the bandwidth issue 44 takes as measured by a large
// copy (4.3 TB/s; the sheet says 4.8, and this project's GPU check has not measured it yet:
// the per-op profile will, in the same process) and its dense bf16 tensor-core peak
// (src/training/gpu_peak.h).
struct Device {
  const char* name;
  double bytes_per_s, flops_per_s;
};
inline constexpr Device kH200{"H200", 4.3e12, 989e12};

// A memory-bound op of the step, measured at the emulator's shape.
struct MemRow {
  std::string name, minimum;  // the op; what its minimum counts
  std::string measured_at;    // the emulator's B x T
  std::vector<std::string> kernels;
  double min_bytes = 0;  // at the emulator's call
  uint64_t requested = 0, unique = 0, sector_bytes = 0;
  uint64_t accesses = 0;  // warp-wide (traffic.h)
  double bytes_per_access() const { return accesses ? double(requested) / accesses : 0; }
  double ratio() const { return double(sector_bytes) / min_bytes; }
  double unique_ratio() const { return double(unique) / min_bytes; }
  // The step at GPT-2 124M: its calls, their launches, their minimum bytes summed.
  int calls = 0, launches = 0;
  double step_min = 0;
  double step_bytes() const { return ratio() * step_min; }  // traffic per minimum byte carries
};

// A GEMM (cuBLASLt) of the step, counted analytically.
struct GemmRow {
  std::string name;
  int count;                // per step
  double flops, min_bytes;  // per step: 2 M N K per batch entry; operands read and D written once
};
// The step's GEMMs (forward, backward, attention's batched ones, the lm_head), default paths.
std::vector<GemmRow> step_gemms(const Dims& d);
// The cells (t, u) of one head's T x T matrix that the attention's row-block GEMMs compute
// (src/backends/attention_blocks.h): u below the end of row t's block, the causal half and the
// masked part of the diagonal blocks.
double causal_block_cells(int T);
// The FLOPs of the masked blocks that those GEMMs skip in a step: tg::flops_per_token counts
// attention's six products over the full T x T, as MFU conventions do.
double attention_skipped_flops(const Dims& d);

// The launches of one step as counted in the emulated step (per kind of queued work, at
// n_layer 1 and 2, extrapolated to the model's layers as fixed + per-layer).
struct LaunchCount {
  std::string kind;
  uint64_t at_1, at_2;
  uint64_t at(int L) const { return at_1 + (at_2 - at_1) * uint64_t(L - 1); }
};

// The host's calls in one emulated step that cost it time without queueing work (waits for the
// device, descriptor creations), by name, with the loss-scale decision on the host and on the
// device (precision.loss_scale.on_device).
struct HostCount {
  std::string call;
  uint64_t host_decided, device_decided;
};

// cost_model.md and cost_model.csv in dir; returns the step's line (predicted time, launches).
std::string write_report(const std::string& dir, const Dims& emu, const std::vector<MemRow>& mem,
                         const std::vector<GemmRow>& gemms,
                         const std::vector<LaunchCount>& launches,
                         const std::vector<HostCount>& host, const Device& dev);

}  // namespace cost
