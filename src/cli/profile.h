// profile.h: `train_gpt bench --profile`, the per-op profile. Every op of a training step is
// timed on the backend itself (the CPU's clock; CUDA events on a GPU) through the profiling
// decorator (src/backends/profiling_backend.h), tagged with its layer and phase, and measured
// against its floor: max(minimum bytes / copy bandwidth, FLOPs / GEMM rate), both ceilings
// measured in the same process. A markdown table (the slowest ops, summed over layers) and a
// CSV (every op of every layer) per model and mode.
#pragma once
#include <string>
#include <vector>

#include "bench_step.h"
#include "src/backends/profiling_backend.h"

namespace tg {

// What the backend reached in this process: a large copy (bytes read + written per second)
// and a large GEMM in the mode's compute type (FLOPs per second).
struct Ceilings {
  double copy_bytes_per_s = 0, gemm_flops_per_s = 0;
  size_t copy_bytes = 0;  // the copy's size (fp32 elements x 4)
  int gemm_dim = 0;       // the GEMM's M = N = K
};

// One op of one layer and phase, per step (times the mean over the profiled steps).
struct ProfileRow {
  std::string op, shape, gemm;
  StepPhase phase = StepPhase::Other;
  OpKind kind = OpKind::Memory;
  int layer = -1;
  double calls = 0, ms = 0, flops = 0, bytes = 0;
};

struct ModeProfile {
  std::string model, mode, device;
  std::string gemm_paths;  // the CPU's GEMM paths ("" on a GPU: each row names its algorithm)
  int steps = 0;
  double plain_ms = 0;     // median step, unprofiled, host clock after a wait
  double profiled_ms = 0;  // mean step between its marks, profiled
  Ceilings ceilings;
  std::vector<ProfileRow> rows;  // every (op, shape, layer, phase), in first-call order
  double ops_ms() const;         // the rows' sum
};

Ceilings measure_ceilings(Backend& be, DType compute);
// warmup steps, then `iters` unprofiled and `iters` profiled steps of one model and mode,
// alternating.
ModeProfile profile_mode(Backend& be, const BenchCase& bc, const Config& cfg, int warmup,
                         int iters);
// The op's floor in ms (0 for transfers, which have no ceiling here).
double floor_ms(const ProfileRow& r, const Ceilings& c);
// The rows summed over layers (same op, phase and shape), slowest first.
std::vector<ProfileRow> rows_over_layers(const ModeProfile& p);
std::string profile_markdown(const ModeProfile& p, size_t top);
std::string profile_csv_header();
std::string profile_csv_rows(const ModeProfile& p);

// The command: every model and mode of `a`; writes a.out/profile.md and a.out/profile.csv.
int profile_models(const BenchArgs& a, const std::vector<BenchCase>& cases);

}  // namespace tg
