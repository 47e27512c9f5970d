// quantize: quantize-dequantize of one GEMM operand, as a recipe operand says
// (src/numerics/recipe.h), in place in fp32.
//
// The operand is a (rows, cols) row-major matrix whose cols run along its GEMM's reduction
// dimension. Its values are split into scale groups: the whole tensor, each row, each 1 x B
// block of a row, or each B x B tile (partial blocks and tiles at the edges are groups of
// their own). Each group gets a scale from its amax, each value is rounded into the element
// format at that scale and multiplied back, so the result holds exactly the values a GPU's
// block-scaled GEMM would multiply:
//   FP32  s = max_elem / amax (fp8_scale_from_amax), q = round(x s), x' = q (1 / s)
//   Pow2  s as FP32, rounded down to a power of two (x' = q / s exactly)
//   E8M0  X = 2^(floor(log2 amax) - emax_elem) (OCP) or 2^ceil(log2(amax / max_elem))
//         (ceil; the quotient in fp32), q = round(x / X), x' = q X (exact)
//   E4M3  (NVFP4) an fp32 tensor scale S = 448 max_elem / amax_tensor, a block decode scale
//         d = ue4m3(amax_block / max_elem S), q = round(x S / d), x' = q d (exact); the GEMM
//         multiplies its output by 1 / S of each operand (what quantize_dequantize returns);
//         S and S / d are clamped to the largest float (tensors of tiny values)
// An all-zero group gets scale 1 (E8M0 code 127); a group whose E4M3 decode scale rounds to
// zero becomes zeros. Elements round to nearest even, saturating, or stochastically with the
// bits quant_sr_bits(quant_sr_seed(seed), r * cols + c) (formats.h; deterministic,
// independent of the thread count).
// Non-finite values (an overflowed gradient) turn the whole operand into NaN, so the loss
// scaler skips the step, as the per-tensor FP8 path does. A bf16 operand (precision.mode=auto's
// wide choice) is left as it is. *saturated, when given, counts the values clipped to the
// element format's largest (sensitivity statistics).
//
// Also here: the random Hadamard transform of operand rows. The per-tensor FP8 of the fp8
// mode's linears is quantize_tensor.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.h"
#include "quantize_lanes.h"
#include "src/numerics/formats.h"
#include "src/numerics/group_scale.h"

namespace tg::cpu {

namespace {

// v rounded into format F and back: E2M1's own fast round trips (storage.h), storage.h's
// row-driven nearest round trip, or formats.h's encoder and decoder (all equal to formats.h's
// encode + decode).
template <ElemFormat F, bool SR>
inline float round_elem(float v, uint32_t bits) {
  if constexpr (F == ElemFormat::E2M1)
    return SR ? e2m1_sr_round_trip(v, bits) : e2m1_round_trip(v);
  else if constexpr (SR)
    return elem_to_f32<F>(f32_to_elem<F>(v, true, bits));
  else
    return nearest_round_trip<F>(v);
}

}  // namespace

// The rows x cols extent of one scale group.
void group_shape(const OperandRecipe& o, int rows, int cols, int* gr, int* gc) {
  switch (o.granularity) {
    case Granularity::Tensor: *gr = rows, *gc = cols; return;
    case Granularity::Row: *gr = 1, *gc = cols; return;
    case Granularity::Block: *gr = 1, *gc = o.block; return;
    case Granularity::Tile: *gr = o.block, *gc = o.block; return;
  }
}

namespace {

// max |x[i]| as fp32 bits: |x|'s bits order as |x| does (inf above every finite value, NaNs
// above inf), so one integer max, which vectorises where a float max with NaN checks does not,
// gives the amax and (bits >= 0x7f800000) whether x holds a non-finite value.
inline uint32_t amax_bits(const float* x, int n) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int i = 0; i < n; i++) {
    const uint32_t a = f32_bits(x[i]) & 0x7fffffffu;
    m = a > m ? a : m;
  }
  return m;
}

// group_scale's E4M3 case (NVFP4) for n groups in a loop the compiler vectorises: the
// UE4M3 round trip of the non-negative finite t = amax / fmax S is storage.h's
// e4m3_round_trip (saturating at 448, as f32_to_ue4m3; tests/backends/test_quantize.cpp holds it to
// the encoder), the divisions are the same IEEE operations in lanes.
void nvfp4_group_scales(GroupScale* out, const float* amax, size_t n, float fmax, float S) {
  for (size_t i = 0; i < n; i++) {
    const float dec = e4m3_round_trip(amax[i] / fmax * S);
    float enc = S / (dec > 0 ? dec : 1.0f);
    enc = dec > 0 ? enc : 0.0f;
    out[i].dec = dec;
    out[i].enc = enc <= kMaxFloat ? enc : kMaxFloat;
  }
}

// group_scale's E8M0 case (MX) for n finite amaxes in a loop the compiler vectorises: enc =
// 2^(127 - code) built from its bits instead of ldexpf (a library call per block); code <= 254
// (saturating), so the exponent is >= -127, whose power of two is the subnormal 2^-127.
void mx_group_scales(GroupScale* out, const float* amax, size_t n, ElemFormat elem,
                     ScaleRule rule) {
  for (size_t i = 0; i < n; i++) {
    const int code = e8m0_group_code(elem, rule, amax[i]);
    out[i].dec = e8m0_to_f32(uint8_t(code));
    out[i].enc = code < 254 ? bits_f32(uint32_t(254 - code) << 23) : bits_f32(0x00400000u);
  }
}

// One row: every column group at its scale. idx0: the row's first element index (SR bits).
// saturated (when given): += the values beyond the element format's largest at their scale.
// Lanes: stochastic rounding (and E2M1's nearest-even) in AVX-512 lanes (quantize_lanes.h;
// the same bits).
template <ElemFormat F, bool SR, bool Lanes>
void apply_row(float* xr, int cols, int gc, const GroupScale* sg, uint64_t seed, uint64_t idx0,
               int* saturated) {
  int j0 = 0;  // whole groups of 16-multiples in one call (small blocks: no call per block)
  if constexpr (SR && Lanes)
    if (!saturated) j0 = sr_round_groups_lanes(xr, cols / gc, gc, sg, seed, idx0, F);
  if constexpr (!SR && Lanes && F == ElemFormat::E2M1)
    if (!saturated) j0 = rne_round_groups_e2m1_lanes(xr, cols / gc, gc, sg);
  for (int c0 = j0 * gc, j = j0; c0 < cols; c0 += gc, j++) {
    const float enc = sg[j].enc, dec = sg[j].dec;
    const int c1 = c0 + gc < cols ? c0 + gc : cols;
    if (saturated) {  // beyond the largest by more than an fp32 scale's own rounding
      const float fmax = elem_format_max(F) * (1.0f + 1.0f / 1024);
      for (int c = c0; c < c1; c++) *saturated += std::fabs(xr[c] * enc) > fmax;
    }
    if constexpr (SR) {
      int c = c0;
      if (Lanes) {  // from an even index (one element first if need be), 16 at a time
        if (((idx0 + c) & 1) && c < c1) {
          xr[c] = round_elem<F, true>(xr[c] * enc, quant_sr_bits(seed, idx0 + c)) * dec;
          c++;
        }
        c += sr_round_lanes(xr + c, c1 - c, enc, dec, seed, idx0 + c, F);
      }
      uint64_t pair = ~uint64_t(0), h = 0;
      for (; c < c1; c++) {
        const uint64_t i = idx0 + c;
        if ((i >> 1) != pair) h = quant_sr_pair(seed, pair = i >> 1);
        const uint32_t bits = uint32_t((i & 1) ? h >> 32 : h);  // = quant_sr_bits(seed, i)
        xr[c] = round_elem<F, true>(xr[c] * enc, bits) * dec;
      }
    } else {
      for (int c = c0; c < c1; c++) xr[c] = round_elem<F, false>(xr[c] * enc, 0u) * dec;
    }
  }
}

using RowFn = void (*)(float*, int, int, const GroupScale*, uint64_t, uint64_t, int*);
template <bool Lanes>
RowFn row_fn(ElemFormat f, bool sr) {
  RowFn fn = nullptr;
  dispatch_operand_format(f, [&](auto format) {
    constexpr ElemFormat F = decltype(format)::value;
    // Nearest rounding has lanes for E2M1 only (rne_round_groups_e2m1_lanes).
    constexpr bool kNearestLanes = Lanes && F == ElemFormat::E2M1;
    fn = sr ? apply_row<F, true, Lanes> : apply_row<F, false, kNearestLanes>;
  });
  if (!fn) throw Error(strf("cpu backend: %s is not an operand format", elem_format_name(f)));
  return fn;
}

// row[c] rounded to bf16 into out[c] (convert's rounding: every value here is exact in
// bf16 or a NaN, which becomes the same code either way).
void narrow_row(bf16* out, const float* row, int n) {
  for (int c = 0; c < n; c++) out[c] = bf16{f32_to_bf16(row[c])};
}

// The scale groups over a (rows, cols) operand: gr x gc values each (clipped to the
// operand), ngr x ngc of them (partial groups at the edges included).
struct GroupGrid {
  int rows, cols, gr, gc, ngr, ngc;
};

GroupGrid group_grid(const OperandRecipe& o, int rows, int cols) {
  GroupGrid g{rows, cols, rows, cols, 0, 0};
  group_shape(o, rows, cols, &g.gr, &g.gc);
  if (g.gc > cols) g.gc = cols;
  if (g.gr > rows) g.gr = rows;
  g.ngc = (cols + g.gc - 1) / g.gc, g.ngr = (rows + g.gr - 1) / g.gr;
  return g;
}

// The amax of every (row, column group) into row_amax (rows x ngc); returns how many of them
// are non-finite. big: a parallel loop.
int row_group_amax(const float* x, const GroupGrid& g, bool lanes, bool big, float* row_amax) {
  const int rows = g.rows, cols = g.cols, gc = g.gc, ngc = g.ngc;
  int nonfinite = 0;
#pragma omp parallel for reduction(+ : nonfinite) schedule(static) if (big)
  for (int r = 0; r < rows; r++) {
    const float* xr = x + size_t(r) * cols;
    float* ra = &row_amax[size_t(r) * ngc];
    // Whole groups of a multiple of 16 values in registers (small blocks: one call per row).
    int j = 0;
    if (lanes && gc % 16 == 0) {
      j = cols / gc;
      group_amax_lanes(xr, j, gc, reinterpret_cast<uint32_t*>(ra));
      for (int i = 0; i < j; i++) nonfinite += f32_bits(ra[i]) >= 0x7f800000u;
    }
    for (; j < ngc; j++) {
      const int c1 = (j + 1) * gc < cols ? (j + 1) * gc : cols;
      const uint32_t m = amax_bits(xr + size_t(j) * gc, c1 - j * gc);
      nonfinite += m >= 0x7f800000u;
      ra[j] = bits_f32(m);
    }
  }
  return nonfinite;
}

// An operand with a non-finite value becomes all NaN (the loss scaler then skips the step),
// its groups' multipliers 1.
void poison_operand(float* x, const GroupGrid& g, bool big, std::vector<float>* dec_out,
                    bf16* narrow) {
  const int rows = g.rows, cols = g.cols;
#pragma omp parallel for schedule(static) if (big)
  for (size_t i = 0; i < size_t(rows) * cols; i++) x[i] = NAN;
  for (int r = 0; r < rows && narrow; r++)
    narrow_row(narrow + size_t(r) * cols, x + size_t(r) * cols, cols);
  if (dec_out) dec_out->assign(size_t(g.ngr) * g.ngc, 1.0f);
}

// Every group's scale (ngr x ngc, group-major) from the row amaxes: the groups' amaxes (max
// is exact in any order), then the scales. Returns NVFP4's tensor scale (1 for the others).
float scales_from_row_amax(const OperandRecipe& o, const GroupGrid& g,
                           const std::vector<float>& row_amax, bool lanes,
                           std::vector<GroupScale>* scale) {
  const int ngc = g.ngc;
  std::vector<float> amax(size_t(g.ngr) * ngc, 0.0f);
  float tensor_amax = 0;
  for (int r = 0; r < g.rows; r++)
    for (int j = 0; j < ngc; j++) {
      float& m = amax[size_t(r / g.gr) * ngc + j];
      const float a = row_amax[size_t(r) * ngc + j];
      m = a > m ? a : m;
      tensor_amax = a > tensor_amax ? a : tensor_amax;
    }
  // NVFP4's second level: the tensor scale that maps the largest block scale to E4M3's max.
  const float tensor_scale =
      o.scale == ScaleFormat::E4M3 ? nvfp4_tensor_scale(o.elem, tensor_amax) : 1.0f;
  scale->resize(amax.size());
  if (lanes && o.scale == ScaleFormat::E4M3)
    nvfp4_group_scales(scale->data(), amax.data(), amax.size(), elem_format_max(o.elem),
                       tensor_scale);
  else if (lanes && o.scale == ScaleFormat::E8M0)
    mx_group_scales(scale->data(), amax.data(), amax.size(), o.elem, o.scale_rule);
  else
    for (size_t i = 0; i < amax.size(); i++) (*scale)[i] = group_scale(o, amax[i], tensor_scale);
  return tensor_scale;
}

// Every row rounded at its groups' scales (and narrowed to bf16 when narrow is given);
// saturated (when given) += the values clipped.
void round_rows(float* x, const GroupGrid& g, const OperandRecipe& o, const GroupScale* scale,
                uint64_t seed, bool lanes, bool big, size_t* saturated, bf16* narrow) {
  const int rows = g.rows, cols = g.cols;
  const bool sr = o.rounding == RoundMode::Stochastic;
  const RowFn apply = lanes ? row_fn<true>(o.elem, sr) : row_fn<false>(o.elem, sr);
  const uint64_t mixed = quant_sr_seed(seed);
  std::vector<int> row_sat(saturated ? size_t(rows) : 0, 0);
#pragma omp parallel for schedule(static) if (big)
  for (int r = 0; r < rows; r++) {
    float* xr = x + size_t(r) * cols;
    apply(xr, cols, g.gc, scale + size_t(r / g.gr) * g.ngc, mixed, uint64_t(r) * cols,
          saturated ? &row_sat[r] : nullptr);
    if (narrow) narrow_row(narrow + size_t(r) * cols, xr, cols);
  }
  for (int n : row_sat) *saturated += size_t(n);
}

// dec_out (when given): x keeps the codes q and dec_out every group's multiplier, group-major.
// narrow (when given): x's result rounded to bf16 as well.
float quantize_impl(float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed,
                    size_t* saturated, bool lanes, std::vector<float>* dec_out,
                    bf16* narrow = nullptr) {
  // A bf16 operand stays as it is: the model's operands are bf16 values already.
  if (rows <= 0 || cols <= 0 || !is_low_bit(o.elem)) {
    for (int r = 0; r < rows && narrow; r++)
      narrow_row(narrow + size_t(r) * cols, x + size_t(r) * cols, cols);
    return 1.0f;
  }
  const GroupGrid g = group_grid(o, rows, cols);
  // Small operands run on one thread: a parallel region costs more than they do.
  const bool big = size_t(rows) * cols >= kParallelMin;
  std::vector<float> row_amax(size_t(rows) * g.ngc);
  if (row_group_amax(x, g, lanes, big, row_amax.data())) {
    poison_operand(x, g, big, dec_out, narrow);
    return 1.0f;
  }
  std::vector<GroupScale> scale;
  const float tensor_scale = scales_from_row_amax(o, g, row_amax, lanes, &scale);
  if (dec_out) {  // q dec with dec = 1 is q: the same rounding, the multiplier kept apart
    dec_out->resize(scale.size());
    for (size_t i = 0; i < scale.size(); i++) (*dec_out)[i] = scale[i].dec, scale[i].dec = 1.0f;
  }
  round_rows(x, g, o, scale.data(), seed, lanes, big, saturated, narrow);
  return o.scale == ScaleFormat::E4M3 ? 1.0f / tensor_scale : 1.0f;
}

}  // namespace

float quantize_dequantize(float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed,
                          size_t* saturated) {
  return quantize_impl(x, rows, cols, o, seed, saturated, quantize_lanes_available(), nullptr);
}

float quantize_dequantize_reference(float* x, int rows, int cols, const OperandRecipe& o,
                                    uint64_t seed, size_t* saturated) {
  return quantize_impl(x, rows, cols, o, seed, saturated, false, nullptr);
}

float quantize_to_codes(float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed,
                        std::vector<float>* dec, bf16* narrow) {
  dec->clear();
  return quantize_impl(x, rows, cols, o, seed, nullptr, quantize_lanes_available(), dec, narrow);
}

float quantize_dequantize_narrow(float* x, bf16* narrow, int rows, int cols, const OperandRecipe& o,
                                 uint64_t seed) {
  return quantize_impl(x, rows, cols, o, seed, nullptr, quantize_lanes_available(), nullptr,
                       narrow);
}

// x <- H D x on each run of n consecutive values of every row (D: random signs per column,
// sign of column c from sr_hash(seed, c); H: the Sylvester Hadamard matrix scaled by
// 1/sqrt(n), orthogonal and symmetric). inverse applies (H D)^T = D H. A row's last cols % n
// values stay as they are: both operands of a GEMM get the same treatment, so their product
// is unchanged either way. For n a power of 4 the scale is a power of two, so H D is exact up
// to the rounding of the butterflies' additions.
namespace {
void hadamard_impl(float* x, int rows, int cols, int n, uint64_t seed, bool inverse, bool lanes) {
  if (n < 2) return;
  lanes = lanes && n >= 16;  // n is a power of two: a whole number of registers
  std::vector<float> sign(static_cast<size_t>(cols));
  for (int c = 0; c < cols; c++) sign[c] = (sr_hash(seed, uint64_t(c)) & 1u) ? -1.0f : 1.0f;
  const float norm = float(1.0 / std::sqrt(double(n)));
  const int full = cols / n * n;
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    float* xr = x + size_t(r) * cols;
    if (lanes) {
      hadamard_runs_lanes(xr, sign.data(), n, full / n, norm, inverse);
      continue;
    }
    for (int c0 = 0; c0 < full; c0 += n) {
      float* v = xr + c0;
      if (!inverse)
        for (int i = 0; i < n; i++) v[i] *= sign[c0 + i];
      for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
          for (int j = i; j < i + h; j++) {
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
          }
      for (int i = 0; i < n; i++) v[i] *= norm;
      if (inverse)
        for (int i = 0; i < n; i++) v[i] *= sign[c0 + i];
    }
  }
}
}  // namespace

void hadamard_rows(float* x, int rows, int cols, int n, uint64_t seed, bool inverse) {
  hadamard_impl(x, rows, cols, n, seed, inverse, quantize_lanes_available());
}

void hadamard_rows_reference(float* x, int rows, int cols, int n, uint64_t seed, bool inverse) {
  hadamard_impl(x, rows, cols, n, seed, inverse, false);
}

}  // namespace tg::cpu
