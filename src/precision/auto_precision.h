// auto_precision.h: precision.mode=auto, the formats of the block linears chosen while
// training from each operand's measured sensitivity.
//
// A slot is one operand of one GEMM role of one block linear (layer x {qkv, attproj, fc,
// fcproj} x {forward, dgrad, wgrad} x {a, b}; src/numerics/recipe.h names the operands: forward
// input x weight, dgrad grad x weight, wgrad grad x input). Every slot holds one candidate
// format (precision.auto.candidates, narrowest first; each a recipe preset, see
// candidate_recipe). Every precision.auto.every steps (and at step 1) the first micro-batch's
// real operands are measured, before they are quantized and without changing the step:
//   per slot and candidate: SQNR of Q(operand) against the bf16 operand, the underflow
//     share (nonzero values that become zero) and the saturation share (values clipped);
//   per model operand (input, weight, output gradient of each linear): amax, and its drift
//     over the last precision.auto.window measurements (max / min amax);
//   per linear: its weight gradient's share of the squared global gradient norm, and the
//     amax of every input channel of its input: channels above precision.auto.outlier_k x
//     the median channel are outliers. With precision.auto.outliers=split they run in the
//     forward GEMM unquantized beside the rest (QuantRecipe::split_channels; a split channel
//     leaves the split once below k/2 x the median), and the forward operands' SQNR is that
//     of the quantized rest. With precision.auto.outliers=smooth every channel is smoothed
//     instead (src/precision/smoothing.h) and the forward operands' SQNR is that of the smoothed
//     operands X diag(1/s) and W diag(s) with the factors the step runs.
// The measurement runs where the operands live: the model hands each probe an operand view
// (src/numerics/operand_view.h, Backend::operand_view), which the CPU backend serves from a host
// copy and the CUDA backend by device reductions (src/backends/cuda/operand_stats.cu): per
// candidate a quantize-dequantize of the staged (transposed, smoothed, split) operand, a pass for
// the group amaxes and one that reduces the sums and counts above; per operand an amax pass and a
// channel amax pass; only those numbers reach the host. With several ranks the sums behind these
// are all-reduced, so every rank decides alike. The policy (choose_formats) then gives each slot
// the narrowest candidate whose SQNR is at least precision.auto.threshold_db (a narrower one than
// now needs hysteresis_db more), and with precision.auto.budget > 0 narrows the best-measured wide
// GEMMs until that share of the block linears' FLOPs runs with both operands in 8 bits or fewer.
// The chosen formats are data: each linear gets a recipe composed from its slots' candidates
// (compose_linear_recipe) in LinearQuantizers' per-linear table, which the quantizing code reads:
// the backends' block-scaled GEMM paths (Backend::matmul_*_scaled), each linear with its own
// recipe. Priors (precision.auto.priors): the first and last layers start in the widest candidate,
// the others in the widest 8-bit one. The formats and amax windows are saved in checkpoints.
#pragma once
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/model/model.h"
#include "src/numerics/recipe.h"

namespace tg {

class Comm;
class ChannelSmoothing;

struct AutoOptions {
  // narrowest first
  std::vector<Mode> candidates = {Mode::NVFP4, Mode::MXFP8, Mode::FP8, Mode::BF16};
  double threshold_db = 20, hysteresis_db = 3;
  double budget = 0;  // share of block-linear FLOPs in <= 8 bits to reach (0: none)
  bool priors = true;
  int every = 10, window = 8;
  double outlier_k = 8;        // an input channel above k x the median channel is an outlier
  bool split_outliers = true;  // outlier channels run unquantized in the forward GEMM
};

constexpr int kAutoLinears = 4;  // qkv, attproj, fc, fcproj (LinearQuantizers::Linear)
constexpr int kSlotsPerLinear = kGemmRoles * 2;
inline int auto_slot(int layer, int linear, int role, int b) {
  return ((layer * kAutoLinears + linear) * kGemmRoles + role) * 2 + b;
}
const char* auto_linear_name(int linear);  // qkv attproj fc fcproj
const char* auto_role_name(int role);      // forward dgrad wgrad
// The model operand (LinearOperand) a slot quantizes, and whether the GEMM takes it
// transposed (its reduction dimension then runs along the operand's columns of the other
// orientation: W^T in dgrad, grad^T and input^T in wgrad).
int auto_slot_operand(int role, int b);
bool auto_slot_transposed(int role, int b);
const char* auto_operand_name(int operand);  // input weight grad

struct AutoCandidate {
  std::string name;
  QuantRecipe recipe;
  bool low_bit = false;  // its operands are 8 bits or fewer
};
// The candidates of precision.auto.candidates, with the block-scaled presets' options o.
std::vector<AutoCandidate> auto_candidates(const AutoOptions& a, const RecipeOptions& o);

// The recipe of one linear whose slots (role-major, a then b) hold candidates f[0..5]. A
// Hadamard transform stays only where both operands of the GEMM ask for the same one.
QuantRecipe compose_linear_recipe(const std::vector<AutoCandidate>& c, const int* f);

// The policy, a pure function of the statistics. sqnr_db[slot * n_candidates + c];
// gemm_flops[slot / 2] the FLOPs of that (layer, linear, role); current: each slot's
// candidate now. Returns the new candidates; *changes (when given) gets one line per slot
// that changes, e.g. "mxfp8 -> bf16, SQNR 14.2 dB < 18 dB" (auto_slot_name says where).
struct AutoPolicy {
  double threshold_db = 20, hysteresis_db = 3, budget = 0;
};
struct AutoChange {
  int slot = 0, from = 0, to = 0;
  std::string why;
};
std::vector<int> choose_formats(const std::vector<int>& current, const std::vector<double>& sqnr_db,
                                const std::vector<bool>& low_bit,
                                const std::vector<double>& gemm_flops, const AutoPolicy& p,
                                const std::vector<std::string>& names,
                                std::vector<AutoChange>* changes);
// Share of the FLOPs whose GEMMs have both operands in a low-bit candidate.
double low_bit_flop_share(const std::vector<int>& formats, const std::vector<bool>& low_bit,
                          const std::vector<double>& gemm_flops);
// e.g. "layer 3 fc forward input"
std::string auto_slot_name(int slot);
// (transposed(), the backward GEMMs' operands on the host: src/backends/cpu/host_operand_view.h.)
// SQNR in dB of a measured error (inf when nothing was lost, NaN for non-finite operands).
double sqnr_db(const QuantError& e);

class AutoPrecision : public LinearProbe {
 public:
  AutoPrecision(const AutoOptions& o, std::vector<AutoCandidate> c, const GPTConfig& m);
  bool due(int64_t step) const { return step == 1 || step % opt_.every == 0; }
  // Starts a measurement (step: 1-based; seed: of its stochastic rounding and rotations).
  void begin(int64_t step, uint64_t seed);
  using LinearProbe::take;
  void take(int layer, int linear, int operand, OperandView& x) override;
  // The smoothing whose factors the forward GEMMs run (null: none); measured with them.
  void set_smoothing(const ChannelSmoothing* s) { smooth_ = s; }
  // Squared norm of each linear's weight gradient (layer-major) and of all gradients.
  void take_grad_norms(const std::vector<double>& linear_sq, double total_sq);
  // Sums the measurement over the ranks (max for amaxes).
  void reduce(Comm& comm);
  // Runs the policy on the measurement; returns what changed (also in the next record()).
  std::vector<AutoChange> decide();
  // The metrics.jsonl line of the last measurement (kind "auto").
  nlohmann::json record() const;
  std::string describe(const AutoChange& c) const;

  QuantRecipe linear_recipe(int layer, int linear) const;
  const std::vector<int>& formats() const { return fmt_; }
  const std::vector<AutoCandidate>& candidates() const { return cand_; }
  double flop_share() const;
  // The per-layer map for the run summary: one line per layer, a column per slot.
  std::string map_text() const;
  nlohmann::json map_json() const;
  // The outlier channels split out of linear `linear` of `layer` now.
  const std::vector<int>& split_channels(int layer, int linear) const {
    return split_[size_t(layer) * kAutoLinears + linear];
  }

  nlohmann::json to_json() const;
  // Error naming the state file `path` when j does not fit this run.
  void from_json(const nlohmann::json& j, const std::string& path);

 private:
  int tensor_index(int layer, int linear, int operand) const {
    return (layer * kAutoLinears + linear) * kLinearOperands + operand;
  }
  AutoOptions opt_;
  std::vector<AutoCandidate> cand_;
  int n_layer_;
  std::vector<double> gemm_flops_;
  std::vector<int> fmt_;
  int64_t step_ = 0;
  uint64_t seed_ = 0;
  std::vector<QuantError> err_;  // slot * candidates
  std::vector<float> amax_;      // tensor_index
  std::vector<std::deque<float>> amax_window_;
  std::vector<double> grad_sq_;  // per (layer, linear)
  double grad_total_sq_ = 0;
  std::vector<AutoChange> last_changes_;
  std::vector<int> in_channels_;               // per linear kind
  std::vector<std::vector<float>> chan_amax_;  // per (layer, linear): of each input channel
  std::vector<std::vector<int>> outliers_;     // per (layer, linear): flagged this measurement
  std::vector<double> outlier_ratio_;          // per (layer, linear): largest amax / median
  std::vector<std::vector<int>> split_;        // per (layer, linear): split out now
  const ChannelSmoothing* smooth_ = nullptr;
  void find_outliers();
};

}  // namespace tg
