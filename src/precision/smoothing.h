// smoothing.h: SmoothQuant-style channel smoothing of the block linears' forward GEMM.
//
// The forward GEMM out = X W^T reduces over the C input channels, and its block scales run
// along C too, so one input channel far above the others (an outlier feature) sets the scale
// of every block it shares and flushes its neighbours. Smoothing moves part of each channel's
// range from the activation into the weight: X' = X diag(1/s), W' = W diag(s), so
// X' W'^T = X W^T in real arithmetic, with (Xiao et al., SmoothQuant, arXiv 2211.10438)
//   s_c = amax_x(c)^alpha / amax_w(c)^(1 - alpha)      (s_c = 1 where either amax is 0),
// which gives channel c of both operands the same range amax_x(c)^(1-alpha) amax_w(c)^alpha.
// In floating point the only change is the rounding of x / s and w s in fp32 (a few ulps of
// the product) before they are quantized.
//
// Only the forward GEMM is smoothed. The backward GEMMs reduce over other dimensions: dgrad
// (dX = dY W, over the OC output channels) takes the weight as W^T, whose rows are the input
// channels, and wgrad (dW = dY^T X, over the N tokens) takes X^T, whose rows are the input
// channels as well. There s_c would be one constant along each of those rows, i.e. along the
// reduction and so along every scale block: a block-scaled quantizer is (up to its scale's
// own rounding) invariant under it, and an outlier channel there already has its own blocks.
// It would also not cancel between the two operands but come out as a factor on the output
// (dX' = dX diag(s), dW' = dW diag(1/s)). So the backward GEMMs take the unsmoothed X and W,
// which is exactly the gradient of the smoothed forward with respect to the master weights:
// the master weights, the optimizer and the checkpoints never hold smoothed values.
//
// The factors come from the per-channel amaxes of the first micro-batch of step 1 and of
// every `every`-th step, maxed over the ranks, and hold until the next measurement; they
// are saved in checkpoints (to_json) so that a resumed run smooths alike.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/model/model.h"

namespace tg {

class Comm;

struct SmoothOptions {
  double alpha = 0.5;  // share of the activation's range moved into the weight
  int every = 10;      // steps between measurements (and at step 1)
};

// s_c for every channel from the per-channel amaxes of X and W (same length); 1 where either
// amax is zero or not finite, or the factor would not be a normal, finite float.
std::vector<float> smoothing_factors(const std::vector<float>& x_amax,
                                     const std::vector<float>& w_amax, double alpha);

class ChannelSmoothing : public LinearProbe {
 public:
  ChannelSmoothing(const SmoothOptions& o, const GPTConfig& m);
  bool due(int64_t step) const { return step == 1 || step % opt_.every == 0; }
  void begin(int64_t step);
  // Records the per-channel amax of a linear's input and weight (other operands: ignored).
  using LinearProbe::take;
  void take(int layer, int linear, int operand, OperandView& x) override;
  // New factors from the measurement, maxed over the ranks; every rank then takes rank 0's
  // factors (the same numbers, by construction: this only makes it certain).
  void update(Comm& comm);
  // The factors of linear `linear` of `layer` now (empty before the first update: none).
  const std::vector<float>& factors(int layer, int linear) const {
    return factors_[size_t(layer) * kLinears + size_t(linear)];
  }
  int64_t updated_at() const { return updated_at_; }
  // The metrics.jsonl line of the last update (kind "smooth").
  nlohmann::json record() const;
  nlohmann::json to_json() const;
  // Error naming the state file `path` when j does not fit this run.
  void from_json(const nlohmann::json& j, const std::string& path);

 private:
  static constexpr int kLinears = 4;  // qkv, attproj, fc, fcproj
  SmoothOptions opt_;
  int n_layer_;
  std::vector<int> in_channels_;             // per linear kind
  std::vector<std::vector<float>> x_amax_;   // per (layer, linear): of each input channel
  std::vector<std::vector<float>> w_amax_;   // per (layer, linear): of each weight column
  std::vector<std::vector<float>> factors_;  // per (layer, linear)
  int64_t step_ = 0, updated_at_ = 0;
};

}  // namespace tg
