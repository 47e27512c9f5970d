// linear_quantizers.h: the quantizers of the block linears in every quantized precision.mode
// (fp8, the block-scaled MXFP4 / NVFP4 / ... recipes, auto): each linear's recipe, per-tensor
// scales and their amax histories, the micro-batch's random seed. (Named for what it holds:
// "state" is the run's, what a checkpoint saves; see docs/architecture.md, "Words".)
//
// The four linears of each block (qkv, attention projection, fc, fc projection) run as
// quantized matmuls (Backend::matmul_*_scaled). Per-tensor FP8 (precision.mode = fp8): input
// and weight in E4M3, the output gradient in E5M2, each tensor with its own scale
// s = (fmax / amax) / 2^margin.
// Recipes:
//   delayed  amax comes from a history of the last history_len amaxes of that tensor (the
//            current one is recorded after use); an empty history means scale 1
//   current  amax of the tensor being quantized
// Block-scaled recipes take current scales per block; LinearQuantizers then holds each linear's
// recipe (auto's choice, smoothing factors) and the micro-batch's random seed.
// Layers listed in keep_bf16 (negative indices count from the last) stay in bf16. Only
// training passes record amaxes, so evaluation does not move the scales. (Checkpoints keep the
// fp8 mode's delayed-scaling state in a section named after the mode, "fp8".)
#pragma once
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/numerics/recipe.h"

namespace tg {

// The precision.fp8.* keys; fp8_recipe() turns them into the recipe LinearQuantizers reads.
struct Fp8Config {
  ScaleSource recipe = ScaleSource::Delayed;
  int history_len = 16;
  int margin = 0;
  std::vector<int> keep_bf16;
};
QuantRecipe fp8_recipe(const Fp8Config& c);

class LinearQuantizers {
 public:
  enum Linear { QKV, ATTPROJ, FC, FCPROJ, kLinears };
  // In the order of TensorScaling's scales and Backend::take_amaxes.
  enum Operand { INP = kTensorInput, WEIGHT = kTensorWeight, GRAD = kTensorGrad, kOperands };

  // UsageError when the recipe asks for what the linears do not implement (yet): per-tensor
  // recipes take fp32 scales, nearest rounding, no transform, E4M3/E5M2 elements; block-scaled
  // ones current scales and quantized (not bf16) elements, Hadamard on both operands of a
  // GEMM or neither.
  LinearQuantizers(const QuantRecipe& recipe, int n_layer);
  LinearQuantizers(const Fp8Config& cfg, int n_layer)
      : LinearQuantizers(fp8_recipe(cfg), n_layer) {}
  bool layer_in_fp8(int layer) const { return fp8_layer_[layer]; }
  // Whether the linears are block-scaled rather than per-tensor scaled (with amax histories).
  bool block_scaled() const { return block_scaled_; }
  // The linear `linear` of `layer` in the current micro-batch: its entry of the per-linear
  // recipe table (every entry the constructor's recipe, unless set below); per-tensor recipes
  // add its slot and scales (a forward's delayed input and weight scales are kept for its
  // backward, which must quantize them alike, while the histories move in between).
  ScaledLinear scaled(int layer, int linear, bool backward);
  // What the op that writes this linear's input asks of the backend (Backend's InputAmax): the
  // linear's slot where it reads that input at a current per-tensor scale as it lies
  // (takes_input_amax), so that the op takes the input's amax as it writes it; else none.
  InputAmax input_amax(int layer, int linear) const;
  // Whether some layer's `linear` reads its weight at a current per-tensor scale as it lies
  // (takes_weight_amax), so that AdamW takes each one's weight amax as it writes the weights
  // (Backend's WeightAmax).
  bool weight_amax_wanted(int linear) const;
  // Block-scaled linears only: from now on this linear runs recipe r (precision.mode=auto's
  // per-layer choice). UsageError when r is not one the block-scaled linears implement.
  void set_linear_recipe(int layer, int linear, const QuantRecipe& r);
  const QuantRecipe& linear_recipe(int layer, int linear) const {
    return table_[size_t(layer) * kLinears + linear];
  }
  // Before each training micro-batch: the seed of its random bits (quant_seed).
  void set_rng_seed(uint64_t seed) { rng_seed_ = seed; }
  // The delayed scale of this operand now, from its history (1 for current scales).
  float scale(int layer, int linear, int operand) const;
  void record(int layer, int linear, int operand, float amax);
  // A training pass's amaxes (Backend::take_amaxes, kTensorOperands per slot = layer x
  // kLinears + linear) into the histories of the linears that ran quantized: the input's and
  // the weight's after a forward, the gradient's after a backward.
  void record_pass(const std::vector<float>& amax, bool backward);

  // Data parallelism: replaces the newest amax of every history by its maximum over the
  // ranks, so every rank derives the same delayed scales, the ones a single process with
  // all the rows would use. (The current recipe takes each rank's own amax.)
  void reduce_latest(class Comm& comm);

  nlohmann::json to_json() const;
  // Error naming the state file `path` when it does not fit this model or is damaged.
  void from_json(const nlohmann::json& j, const std::string& path);
  const QuantRecipe& recipe() const { return cfg_; }

 private:
  size_t index(int layer, int linear, int operand) const {
    return (size_t(layer) * kLinears + linear) * kOperands + operand;
  }
  // The recipe of one operand of the linears (INP, WEIGHT: forward; GRAD: input gradient).
  const OperandRecipe& operand_recipe(int operand) const;
  ScaledLinear forward_rule(int layer, int linear) const;
  QuantRecipe cfg_;
  bool block_scaled_ = false;
  uint64_t rng_seed_ = 0;
  int n_layer_;
  std::vector<bool> fp8_layer_;
  std::vector<std::deque<float>> history_;
  std::vector<float> fwd_scale_;    // per history: the delayed scale its last forward took
  std::vector<QuantRecipe> table_;  // per (layer, linear), block-scaled linears
};

}  // namespace tg
