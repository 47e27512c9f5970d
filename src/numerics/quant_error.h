// quant_error.h: what one GEMM operand loses in a recipe operand's format, as counts and sums
// (the sensitivity statistics of precision.mode=auto, quantization telemetry). The numbers
// only: backends measure them (cpu::quant_error in src/backends/cpu/quant_error.h, the CUDA
// backend's operand statistics), and the operand views (src/numerics/operand_view.h) hand them
// back.
#pragma once

namespace tg {

struct QuantError {
  double signal = 0, noise = 0;  // sum x^2, sum (x - Q(x))^2 (after the transform, if any)
  double values = 0, nonzero = 0, underflow = 0, saturated = 0;  // counts
  // Counts of scale groups (blocks, rows, tiles or the tensor): all, those whose scale
  // saturates (a value clipped to the element format's largest at it) and those whose scale
  // underflows (nonzero amax, but the scale at or below its format's least normal value: precision
  // of the scale lost, or the whole group flushed); and of values that quantize to zero (zeros
  // included).
  double groups = 0, groups_saturated = 0, groups_underflow = 0, zeros = 0;
};
// A QuantError's counts as kQuantErrorFields doubles (sums over ranks), and back; and a sum.
constexpr int kQuantErrorFields = 10;
void quant_error_fields(const QuantError& e, double* f);
QuantError quant_error_from_fields(const double* f);
QuantError& operator+=(QuantError& a, const QuantError& b);

}  // namespace tg
