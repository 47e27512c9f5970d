// quant_error: the error one GEMM operand takes in a recipe operand's format, measured on a
// copy (the operand itself is not touched).
//
// x(rows, cols) row-major, cols along the GEMM's reduction dimension, as quantize.cpp takes
// it. With a Hadamard transform in the recipe, the reference is the rotated operand (the
// rotation is orthogonal, so the error is the same as in the unrotated space). Returns
//   signal    = sum r^2             r: the reference (x, or its rotation)
//   noise     = sum (r - Q(r))^2    Q: quantize_dequantize with the recipe
//   values, nonzero                 counts of r
//   underflow = #{r != 0, Q(r) = 0} (flushed to zero by the format at its scale)
//   saturated = #{|r| x scale > the element format's largest}
// so SQNR = 10 log10(signal / noise) dB; sums of these over ranks give the SQNR of all rows.
#include <cmath>
#include <vector>

#include "ops.h"

namespace tg::cpu {

QuantError quant_error(const float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed) {
  const size_t n = size_t(rows) * cols;
  std::vector<float> ref(x, x + n);
  if (o.transform == Transform::Hadamard)
    hadamard_rows(ref.data(), rows, cols, o.transform_size, seed ^ 0x48ull /*"H"*/, false);
  std::vector<float> q = ref;
  size_t saturated = 0;
  const float post = quantize_dequantize(q.data(), rows, cols, o, seed, &saturated);
  QuantError e;
  e.values = double(n);
  e.saturated = double(saturated);
  for (size_t i = 0; i < n; i++) {
    const double r = ref[i], d = r - double(q[i]) * post;
    e.signal += r * r;
    e.noise += d * d;
    e.nonzero += r != 0;
    e.underflow += r != 0 && q[i] == 0;
  }
  return e;
}

}  // namespace tg::cpu
