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
//   zeros     = #{Q(r) = 0}
// so SQNR = 10 log10(signal / noise) dB; sums of these over ranks give the SQNR of all rows.
// And per scale group (group_stats): how many groups there are, how many have a saturating
// scale (a value clipped at it: OCP's E8M0 rule, or a UE4M3 scale rounded down) and how many an
// underflowing one (nonzero amax but the scale at or below its format's least normal value:
// E8M0 code 0, a UE4M3 decode scale below 2^-6 or flushed to zero, an fp32 scale clamped
// because the amax is tiny). The groups are quantize.cpp's (group_shape, group_scale).
#include <cmath>
#include <vector>

#include "ops.h"
#include "src/numerics/formats.h"
#include "src/numerics/group_scale.h"

namespace tg::cpu {

namespace {

constexpr float kUe4m3MinNormal = elem_format_info(ElemFormat::UE4M3).min_normal;

void group_stats(const float* x, int rows, int cols, const OperandRecipe& o, QuantError* e) {
  int gr = rows, gc = cols;
  group_shape(o, rows, cols, &gr, &gc);
  gr = gr < rows ? gr : rows;
  gc = gc < cols ? gc : cols;
  const int ngr = (rows + gr - 1) / gr, ngc = (cols + gc - 1) / gc;
  std::vector<float> amax(size_t(ngr) * ngc, 0.0f);
  float tensor_amax = 0;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const float a = std::fabs(x[size_t(r) * cols + c]);
      float& m = amax[size_t(r / gr) * ngc + c / gc];
      m = a > m ? a : m;
      tensor_amax = a > tensor_amax ? a : tensor_amax;
    }
  const float fmax = elem_format_max(o.elem);
  const float tensor_scale =
      o.scale == ScaleFormat::E4M3
          ? nvfp4_tensor_scale(o.elem, tensor_amax)
          : 1.0f;
  // Beyond the largest by more than an fp32 scale's own rounding (as quantize.cpp counts).
  const float clip = fmax * (1.0f + 1.0f / 1024);
  for (float a : amax) {
    const GroupScale g = group_scale(o, a, tensor_scale);
    e->groups += 1;
    bool under = false, sat = a * g.enc > clip;
    if (a > 0) switch (o.scale) {
        case ScaleFormat::FP32:
        case ScaleFormat::Pow2: under = g.enc >= kMaxFloat / 2; break;
        case ScaleFormat::E8M0: under = g.dec <= e8m0_to_f32(0); break;
        case ScaleFormat::E4M3: under = g.dec < kUe4m3MinNormal; break;
      }
    e->groups_saturated += sat;
    e->groups_underflow += under;
  }
}

}  // namespace

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
    e.zeros += q[i] == 0;
  }
  group_stats(ref.data(), rows, cols, o, &e);
  return e;
}

}  // namespace tg::cpu
