#include "linear_quantizers.h"

#include <algorithm>
#include <cmath>

#include "src/base/common.h"
#include "src/comm/comm.h"
#include "src/numerics/formats.h"

namespace tg {

QuantRecipe fp8_recipe(const Fp8Config& c) {
  return fp8_tensor_recipe(c.recipe, c.history_len, c.margin, c.keep_bf16);
}

namespace {
void check_block_scaled(const QuantRecipe& r) {
  for (int g = 0; g < kGemmRoles; g++) {
    const GemmRecipe& gr = r.gemm[g];
    for (const OperandRecipe* o : {&gr.a, &gr.b}) {
      const int b = o->block;
      if (!is_low_bit(o->elem)) {  // left as it is (auto's wide operands)
        if (o->transform == Transform::None) continue;
        throw UsageError(
            strf("precision recipe %s: a bf16 operand takes no transform", r.name.c_str()));
      }
      if (o->source != ScaleSource::Current ||
          ((o->granularity == Granularity::Block || o->granularity == Granularity::Tile) &&
           b < 1) ||
          (o->scale == ScaleFormat::E8M0 && o->granularity == Granularity::Tensor))
        throw UsageError(
            strf("precision recipe %s: operands scaled other than per-tensor in "
                 "fp32 (block-scaled) take bf16 or E4M3/E5M2/E2M1 elements, current "
                 "scales and a block size",
                 r.name.c_str()));
    }
    const int ta = gr.a.transform == Transform::Hadamard ? gr.a.transform_size : 0;
    const int tb = gr.b.transform == Transform::Hadamard ? gr.b.transform_size : 0;
    if (ta != tb || (ta & (ta - 1)))
      throw UsageError(
          strf("precision recipe %s: a Hadamard transform must rotate both "
               "operands of a GEMM alike (a power of two points)",
               r.name.c_str()));
  }
}

void check_supported(const QuantRecipe& r) {
  for (int g = 0; g < kGemmRoles; g++)
    for (const OperandRecipe* o : {&r.gemm[g].a, &r.gemm[g].b}) {
      const bool fp8 = is_operand_format(o->elem) && elem_bits(o->elem) == 8;
      if (!fp8 || o->granularity != Granularity::Tensor || o->scale != ScaleFormat::FP32 ||
          o->rounding != RoundMode::Nearest || o->transform != Transform::None ||
          o->source != r.gemm[kForward].a.source)
        throw UsageError(
            strf("precision recipe %s: the FP8 linears take per-tensor fp32-scaled "
                 "E4M3/E5M2 operands with nearest rounding and one scale source",
                 r.name.c_str()));
    }
  // The backward GEMMs reuse the forward's quantized input and weight.
  if (r.gemm[kInputGrad].b.elem != r.gemm[kForward].b.elem ||
      r.gemm[kWeightGrad].b.elem != r.gemm[kForward].a.elem ||
      r.gemm[kWeightGrad].a.elem != r.gemm[kInputGrad].a.elem)
    throw UsageError(
        strf("precision recipe %s: the backward GEMMs must reuse the forward's "
             "operand formats",
             r.name.c_str()));
}
}  // namespace

const OperandRecipe& LinearQuantizers::operand_recipe(int operand) const {
  if (operand == INP) return cfg_.gemm[kForward].a;
  if (operand == WEIGHT) return cfg_.gemm[kForward].b;
  return cfg_.gemm[kInputGrad].a;
}

LinearQuantizers::LinearQuantizers(const QuantRecipe& cfg, int n_layer)
    : cfg_(cfg),
      n_layer_(n_layer),
      fp8_layer_(n_layer, true),
      history_(size_t(n_layer) * kLinears * kOperands),
      fwd_scale_(size_t(n_layer) * kLinears * kOperands, 1.0f),
      table_(size_t(n_layer) * kLinears, cfg) {
  block_scaled_ = !is_per_tensor(cfg_);
  if (block_scaled_)
    check_block_scaled(cfg_);
  else
    check_supported(cfg_);
  for (int l : cfg.keep_bf16) {
    int idx = l < 0 ? n_layer + l : l;
    if (idx < 0 || idx >= n_layer)
      throw UsageError(
          strf("config key 'precision.fp8.keep_bf16': layer %d does not exist (the "
               "model has %d)",
               l, n_layer));
    fp8_layer_[idx] = false;
  }
}

void LinearQuantizers::set_linear_recipe(int layer, int linear, const QuantRecipe& r) {
  if (!block_scaled_) throw Error("per-linear recipes need block-scaled linears");
  check_block_scaled(r);
  table_[size_t(layer) * kLinears + linear] = r;
}

ScaledLinear LinearQuantizers::scaled(int layer, int linear, bool backward) {
  ScaledLinear s{&table_[size_t(layer) * kLinears + linear],
                 detail::splitmix64_mix(rng_seed_ + uint64_t(layer * kLinears + linear + 1) *
                                                        0x9E3779B97F4A7C15ull),
                 {}};
  if (block_scaled_) {  // a slot for the amax words of a tensor scale over its groups alone
    if (has_tensor_scale_over_groups(*s.recipe)) s.tensor.slot = layer * kLinears + linear;
    return s;
  }
  s.tensor.slot = layer * kLinears + linear;
  s.tensor.margin = cfg_.margin;
  for (int op : {INP, WEIGHT}) {
    float& kept = fwd_scale_[index(layer, linear, op)];
    if (!backward) kept = scale(layer, linear, op);
    s.tensor.scale[op] = kept;
  }
  s.tensor.scale[GRAD] = scale(layer, linear, GRAD);
  return s;
}

// The linear as the rules of its forward's operands see it (its recipe and slot, as scaled()
// gives them); no slot in a layer that stays wide.
ScaledLinear LinearQuantizers::forward_rule(int layer, int linear) const {
  ScaledLinear s{&table_[size_t(layer) * kLinears + linear], 0, {}};
  const bool slot = !block_scaled_ || has_tensor_scale_over_groups(*s.recipe);
  if (slot && fp8_layer_[layer]) s.tensor.slot = layer * kLinears + linear;
  return s;
}

InputAmax LinearQuantizers::input_amax(int layer, int linear) const {
  const ScaledLinear s = forward_rule(layer, linear);
  return takes_input_amax(s) ? InputAmax{s.tensor.slot} : InputAmax{};
}

bool LinearQuantizers::weight_amax_wanted(int linear) const {
  for (int l = 0; l < int(fp8_layer_.size()); l++)
    if (takes_weight_amax(forward_rule(l, linear))) return true;
  return false;
}

float LinearQuantizers::scale(int layer, int linear, int operand) const {
  const OperandRecipe& o = operand_recipe(operand);
  if (o.source == ScaleSource::Current) return 1.0f;
  const auto& h = history_[index(layer, linear, operand)];
  float amax = h.empty() ? 0.0f : *std::max_element(h.begin(), h.end());
  return fp8_scale_from_amax(amax, elem_format_max(o.elem), cfg_.margin);
}

void LinearQuantizers::record(int layer, int linear, int operand, float amax) {
  auto& h = history_[index(layer, linear, operand)];
  h.push_back(amax);
  while (int(h.size()) > cfg_.history_len) h.pop_front();
}

void LinearQuantizers::record_pass(const std::vector<float>& amax, bool backward) {
  if (amax.size() < history_.size()) throw Error("fp8: fewer amaxes than the model's linears");
  for (int l = 0; l < n_layer_; l++) {
    if (!fp8_layer_[l]) continue;
    for (int lin = 0; lin < kLinears; lin++)
      for (int op = 0; op < kOperands; op++)
        if ((op == GRAD) == backward) record(l, lin, op, amax[index(l, lin, op)]);
  }
}

void LinearQuantizers::reduce_latest(Comm& comm) {
  if (comm.world() == 1) return;
  std::vector<float> latest(history_.size(), 0.0f);
  for (size_t i = 0; i < history_.size(); i++)
    if (!history_[i].empty()) latest[i] = history_[i].back();
  comm.all_reduce_max(latest.data(), latest.size());
  for (size_t i = 0; i < history_.size(); i++)
    if (!history_[i].empty()) history_[i].back() = latest[i];
}

nlohmann::json LinearQuantizers::to_json() const {
  nlohmann::json hist = nlohmann::json::array();
  for (const auto& h : history_) hist.push_back(std::vector<float>(h.begin(), h.end()));
  // The scales the next step starts from (delayed recipe; 1 = current or no history yet), in
  // the histories' order. For readers of the checkpoint: loading recomputes them from the
  // histories, which is what makes a resume exact.
  nlohmann::json scales = nlohmann::json::array();
  for (int l = 0; l < n_layer_; l++)
    for (int lin = 0; lin < kLinears; lin++)
      for (int op = 0; op < kOperands; op++) {
        scales.push_back(scale(l, lin, op));
      }
  return {{"recipe", enum_name(cfg_.gemm[kForward].a.source)},
          {"history_len", cfg_.history_len},
          {"amax_history", hist},
          {"scales", scales}};
}

void LinearQuantizers::from_json(const nlohmann::json& j, const std::string& path) {
  auto bad = [&](const std::string& what) {
    throw Error(
        strf("checkpoint state %s: field 'fp8.amax_history' %s", path.c_str(), what.c_str()));
  };
  if (!j.is_object() || !j.contains("amax_history")) bad("is missing");
  const auto& hist = j["amax_history"];
  if (!hist.is_array() || hist.size() != history_.size())
    bad(strf("does not match this model's layers (%zu histories expected)", history_.size()));
  // Checked whole before anything changes, so a bad entry leaves the state as it was.
  std::vector<std::vector<float>> parsed(history_.size());
  for (size_t i = 0; i < history_.size(); i++) {
    if (!hist[i].is_array() || hist[i].size() > 1024) bad(strf("entry %zu is not a history", i));
    for (const auto& a : hist[i]) {
      if (!a.is_number() || !(a.get<double>() >= 0) || !std::isfinite(a.get<double>()) ||
          a.get<double>() > 3.4e38)
        bad(strf("entry %zu holds %s, not a finite amax", i, a.dump().c_str()));
      parsed[i].push_back(a.get<float>());
    }
  }
  for (size_t i = 0; i < history_.size(); i++) {
    history_[i].assign(parsed[i].begin(), parsed[i].end());
    while (int(history_[i].size()) > cfg_.history_len) history_[i].pop_front();
  }
}

}  // namespace tg
