// quant_telemetry.h: what the run's own recipe does to each operand of the quantized block
// linears (precision.telemetry_every, the block-scaled modes).
//
// On a telemetry step the first micro-batch's operands are measured as the training passes
// hand them over (LinearProbe: operand views, src/numerics/operand_view.h, whose statistics the
// backend reduces where the tensors live; before quantization, the step unchanged): for every
// slot (layer x linear x GEMM role x operand, src/precision/auto_precision.h's numbering) that the
// layer's recipe quantizes, the operand is quantized as that GEMM quantizes it (along its
// reduction dimension, transposed where the GEMM takes it so, Hadamard-rotated where the
// recipe says, smoothed in the forward where the recipe has channel factors) and compared
// with its bf16 values (smoothed likewise):
//   sqnr_db               10 log10(sum x^2 / sum (x - Q(x))^2)
//   zero_frac             share of the elements that quantize to zero (zeros included)
//   underflow_frac        share of the nonzero elements that quantize to zero
//   saturated_frac        share of the elements clipped to the element format's largest
//   block_saturated_frac  share of the scale groups with a clipped element
//   block_underflow_frac  share of the scale groups whose scale is at or below its format's
//                         least normal value (src/backends/cpu/quant_error.cpp says exactly when)
// Slots left in bf16 (kept layers) are not listed. With several ranks the counts are summed,
// so every rank writes the statistics of all the rows. Written to metrics.jsonl as
// {"kind":"quant","step":..,"slots":{"layer":[..],"linear":[..],"role":[..],"operand":[..],
// "format":[..],"sqnr_db":[..],...}}, one entry per listed slot.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/model/model.h"

namespace tg {

class Comm;
class LinearQuantizers;

class QuantTelemetry : public LinearProbe {
 public:
  QuantTelemetry(const LinearQuantizers& fp8, int n_layer);
  // Starts a measurement (seed: of its stochastic rounding and rotations).
  void begin(int64_t step, uint64_t seed);
  using LinearProbe::take;
  void take(int layer, int linear, int operand, OperandView& x) override;
  void reduce(Comm& comm);
  nlohmann::json record() const;
  // For summary.json: the last measurement per GEMM operand kind ("forward input", ...,
  // "wgrad input"): the SQNR of all its slots together (summed signal over summed noise) and
  // the least slot's, and the shares above over all its slots. null before any measurement.
  nlohmann::json summary() const;

 private:
  const LinearQuantizers& fp8_;
  int n_layer_;
  int64_t step_ = 0;
  uint64_t seed_ = 0;
  std::vector<QuantError> err_;  // per slot
  std::vector<bool> measured_;   // per slot: quantized by its recipe, and taken
};

}  // namespace tg
