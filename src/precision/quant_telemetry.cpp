// quant_telemetry.cpp: the per-operand quantization statistics of the block-scaled modes
// (see quant_telemetry.h).
#include "quant_telemetry.h"

#include <algorithm>
#include <cmath>

#include "auto_precision.h"
#include "src/base/rng.h"
#include "src/comm/comm.h"
#include "src/model/linear_quantizers.h"

namespace tg {
using json = nlohmann::json;

QuantTelemetry::QuantTelemetry(const LinearQuantizers& fp8, int n_layer)
    : fp8_(fp8), n_layer_(n_layer) {
  const size_t slots = size_t(n_layer) * kAutoLinears * kSlotsPerLinear;
  err_.resize(slots);
  measured_.resize(slots);
}

void QuantTelemetry::begin(int64_t step, uint64_t seed) {
  step_ = step;
  seed_ = seed;
  std::fill(err_.begin(), err_.end(), QuantError{});
  std::fill(measured_.begin(), measured_.end(), false);
}

void QuantTelemetry::take(int layer, int linear, int operand, OperandView& x) {
  if (!fp8_.layer_in_fp8(layer)) return;
  const QuantRecipe& r = fp8_.linear_recipe(layer, linear);
  // The forward GEMM runs the smoothed operands (src/precision/smoothing.h), the backward ones the
  // operands as they are.
  OperandVariant forward;
  if (!r.smooth.empty() && operand != kLinearGrad) {
    forward.smooth = &r.smooth;
    forward.smooth_divide = operand == kLinearInput;
  }
  for (int g = 0; g < kGemmRoles; g++)
    for (int b = 0; b < 2; b++) {
      if (auto_slot_operand(g, b) != operand) continue;
      const OperandRecipe& o = b ? r.gemm[g].b : r.gemm[g].a;
      if (!is_low_bit(o)) continue;
      const int slot = auto_slot(layer, linear, g, b);
      const uint64_t s = detail::splitmix64_mix(seed_ + uint64_t(slot + 1) * 0x9E3779B97F4A7C15ull);
      OperandVariant v;
      if (auto_slot_transposed(g, b))
        v.transposed = true;
      else if (g == kForward)
        v = forward;
      err_[size_t(slot)] = x.quant_error(o, s, v);
      measured_[size_t(slot)] = true;
    }
}

void QuantTelemetry::reduce(Comm& comm) {
  if (comm.world() == 1) return;
  const size_t nf = kQuantErrorFields;
  std::vector<double> v(err_.size() * nf);
  for (size_t i = 0; i < err_.size(); i++) quant_error_fields(err_[i], &v[i * nf]);
  comm.all_reduce_sum(v.data(), v.size());
  for (size_t i = 0; i < err_.size(); i++) err_[i] = quant_error_from_fields(&v[i * nf]);
}

namespace {
double share(double part, double whole) { return whole > 0 ? part / whole : 0.0; }
// The element format of a slot's operand, e.g. "E2M1" (the recipe's name says the rest).
const char* operand_format(const QuantRecipe& r, int role, int b) {
  return elem_format_name(b ? r.gemm[role].b.elem : r.gemm[role].a.elem);
}
}  // namespace

json QuantTelemetry::record() const {
  json slots = {{"layer", json::array()},
                {"linear", json::array()},
                {"role", json::array()},
                {"operand", json::array()},
                {"format", json::array()},
                {"sqnr_db", json::array()},
                {"zero_frac", json::array()},
                {"underflow_frac", json::array()},
                {"saturated_frac", json::array()},
                {"block_saturated_frac", json::array()},
                {"block_underflow_frac", json::array()}};
  for (size_t s = 0; s < err_.size(); s++) {
    if (!measured_[s]) continue;
    const int b = int(s % 2), role = int(s / 2 % kGemmRoles);
    const int lin = int(s / kSlotsPerLinear % kAutoLinears);
    const int layer = int(s / (kSlotsPerLinear * kAutoLinears));
    const QuantError& e = err_[s];
    const double db = sqnr_db(e);
    slots["layer"].push_back(layer);
    slots["linear"].push_back(auto_linear_name(lin));
    slots["role"].push_back(auto_role_name(role));
    slots["operand"].push_back(auto_operand_name(auto_slot_operand(role, b)));
    slots["format"].push_back(operand_format(fp8_.linear_recipe(layer, lin), role, b));
    slots["sqnr_db"].push_back(std::isfinite(db) ? json(db) : json(nullptr));
    slots["zero_frac"].push_back(share(e.zeros, e.values));
    slots["underflow_frac"].push_back(share(e.underflow, e.nonzero));
    slots["saturated_frac"].push_back(share(e.saturated, e.values));
    slots["block_saturated_frac"].push_back(share(e.groups_saturated, e.groups));
    slots["block_underflow_frac"].push_back(share(e.groups_underflow, e.groups));
  }
  return {{"kind", "quant"}, {"step", step_}, {"slots", slots}};
}

json QuantTelemetry::summary() const {
  if (step_ == 0) return nullptr;
  json out = json::object();
  for (int role = 0; role < kGemmRoles; role++)
    for (int b = 0; b < 2; b++) {
      QuantError sum;
      double least = INFINITY;
      int n = 0;
      for (size_t s = 0; s < err_.size(); s++) {
        if (!measured_[s] || int(s % 2) != b || int(s / 2 % kGemmRoles) != role) continue;
        sum += err_[s];
        least = std::min(least, sqnr_db(err_[s]));
        n++;
      }
      if (n == 0) continue;
      const double all = sqnr_db(sum);
      out[std::string(auto_role_name(role)) + " " + auto_operand_name(auto_slot_operand(role, b))] =
          {{"slots", n},
           {"sqnr_db", std::isfinite(all) ? json(all) : json(nullptr)},
           {"least_sqnr_db", std::isfinite(least) ? json(least) : json(nullptr)},
           {"zero_frac", share(sum.zeros, sum.values)},
           {"underflow_frac", share(sum.underflow, sum.nonzero)},
           {"saturated_frac", share(sum.saturated, sum.values)},
           {"block_saturated_frac", share(sum.groups_saturated, sum.groups)},
           {"block_underflow_frac", share(sum.groups_underflow, sum.groups)}};
    }
  return {{"step", step_}, {"operands", out}};
}

}  // namespace tg
