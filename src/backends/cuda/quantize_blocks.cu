// quantize_blocks.cu: launchers of kernels/quantize_blocks.cuh: the block quantize-dequantize
// of one GEMM operand, read where it lies (transposed or not, any storage type), and its
// quantization into codes and a scale tensor for the native GEMMs; staging into fp32 and the
// random Hadamard rotation for the steps that change an operand first (declared in scaled.h).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/quantize_blocks.cuh"
#include "kernels/quantize_tile.cuh"
#include "quant_params.h"
#include "scaled.h"

namespace tg::gpu {

using quant::QuantParams;
using quant::Rotation;
using quant::Scale2;

// The group shape of o over a (rows, cols) operand, clipped as quantize.cpp clips it.
QuantParams params_of(const OperandRecipe& o, int rows, int cols) {
  QuantParams p;
  p.elem = o.elem;
  p.scale = o.scale;
  p.rule = o.scale_rule;
  switch (o.granularity) {
    case Granularity::Tensor: p.gr = rows, p.gc = cols; break;
    case Granularity::Row: p.gr = 1, p.gc = cols; break;
    case Granularity::Block: p.gr = 1, p.gc = o.block; break;
    case Granularity::Tile: p.gr = o.block, p.gc = o.block; break;
  }
  if (p.gc > cols) p.gc = cols;
  if (p.gr > rows) p.gr = rows;
  if (p.gc < 1 || p.gr < 1) throw Error("cuda backend: a block-scaled recipe with no block size");
  p.ngc = (cols + p.gc - 1) / p.gc;
  p.ngr = (rows + p.gr - 1) / p.gr;
  return p;
}

namespace {

constexpr int kThreads = 256;

// hadamard_rows' factor 1 / sqrt(n), computed on the host as quantize.cpp computes it.
float hadamard_norm(int n) { return float(1.0 / std::sqrt(double(n))); }

// The rotation x is read through (none when x.rotate is 0).
Rotation rotation_of(const OperandSource& x) {
  if (x.rotate == 0) return {};
  if (!quant::rotates_in_warp(x.rotate))
    throw Error(
        strf("cuda backend: a %d-point Hadamard rotation cannot be fused into the "
             "quantizer's read (powers of two up to 32 can)",
             x.rotate));
  return {x.rotate, x.rotate_seed, hadamard_norm(x.rotate)};
}

// The tiled kernels' grid over a (rows, cols) operand: one block per 32 x 32 tile.
dim3 tile_grid(int rows, int cols) {
  return dim3(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32));
}

template <ElemFormat F, bool SR>
void apply(Ctx& c, DType out_type, void* out, const OperandSource& x, int rows, int cols,
           const QuantParams& p, const Scale2* scales, const unsigned* tbits, uint64_t mixed) {
  dispatch("quantize_dequantize", x.type, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.data);
    if (out_type == DType::BF16)
      launch(quant::apply_kernel<T, F, SR, bf16>, tile_grid(rows, cols), kThreads, 0, c.stream,
             static_cast<bf16*>(out), src, rows, cols, x.transposed, rotation_of(x), p, scales,
             tbits, mixed);
    else
      launch(quant::apply_kernel<T, F, SR, float>, tile_grid(rows, cols), kThreads, 0, c.stream,
             static_cast<float*>(out), src, rows, cols, x.transposed, rotation_of(x), p, scales,
             tbits, mixed);
    TG_LAUNCH_CHECK();
  });
}

template <ElemFormat F>
void apply_rounding(Ctx& c, bool sr, DType out_type, void* out, const OperandSource& x, int rows,
                    int cols, const QuantParams& p, const Scale2* scales, const unsigned* tbits,
                    uint64_t mixed) {
  if (sr)
    apply<F, true>(c, out_type, out, x, rows, cols, p, scales, tbits, mixed);
  else
    apply<F, false>(c, out_type, out, x, rows, cols, p, scales, tbits, mixed);
}

// The operand's quantizer parameters with its per-tensor scale rule (a delayed scale, a margin,
// an amax taken before, of the values as read: for one group's scale or NVFP4's tensor scale)
// and the transpose's amax it takes on the way (TransposedAmax), where asked.
QuantParams with_tensor_rule(QuantParams p, const OperandSource& x) {
  p.tensor_enc = x.tensor_scale;
  p.margin = x.margin;
  const bool tensor_wide = (p.ngr == 1 && p.ngc == 1) || p.scale == ScaleFormat::E4M3;
  if (x.amax_in && tensor_wide) p.tensor_amax = x.amax_in;
  if (x.transposed_amax_out) {
    if (!quant::rotates_in_warp(x.transposed_rotate) || x.rotate != 0)
      throw Error(
          strf("cuda backend: the amax of an operand's transpose is taken through a rotation "
               "of 2 to 32 points of an operand read as it lies (asked: %d points, the operand "
               "rotated by %d)",
               x.transposed_rotate, x.rotate));
    p.transposed_amax = {
        {x.transposed_rotate, x.transposed_rotate_seed, hadamard_norm(x.transposed_rotate)},
        x.transposed_amax_out};
  }
  return p;
}

// The word of the transpose's amax zeroed in stream order, before the quantizer's kernels
// take their maxima into it.
void zero_transposed_amax(Ctx& c, const OperandSource& x) {
  if (x.transposed_amax_out)
    TG_CUDA_CHECK(cudaMemsetAsync(x.transposed_amax_out, 0, sizeof(unsigned), c.stream));
}

// The groups' scales of x (operand_amax_kernel, group_scale_kernel; in scratch), *tbits the
// operand's amax bits they were drawn from, *post the GEMM's factor (nonfinite_post if x holds
// a non-finite value).
const Scale2* group_scales(Ctx& c, const QuantParams& p, const OperandSource& x, int rows, int cols,
                           float* post, float nonfinite_post, const unsigned** tbits_out) {
  // One group (the per-tensor recipes): its amax is the tensor's, no row maxima needed.
  const bool one_group = p.ngr == 1 && p.ngc == 1;
  const size_t amax_bytes = size_t(rows) * p.ngc * sizeof(unsigned);
  unsigned* row_amax =
      one_group ? nullptr : static_cast<unsigned*>(c.scratch(kScratchQAmax, amax_bytes));
  Scale2* scales =
      static_cast<Scale2*>(c.scratch(kScratchQScales, size_t(p.ngr) * p.ngc * sizeof(Scale2)));
  unsigned* tbits = static_cast<unsigned*>(c.scratch(kScratchQWords, 64));
  if (row_amax) TG_CUDA_CHECK(cudaMemsetAsync(row_amax, 0, amax_bytes, c.stream));
  TG_CUDA_CHECK(cudaMemsetAsync(tbits, 0, sizeof(unsigned), c.stream));
  const QuantParams ps = with_tensor_rule(p, x);  // the per-tensor recipes' own scale rule
  dispatch("quantize (amax)", x.type, [&](auto tag) {
    using T = decltype(tag);
    launch(quant::operand_amax_kernel<T>, tile_grid(rows, cols), kThreads, 0, c.stream,
           static_cast<const T*>(x.data), rows, cols, x.transposed, rotation_of(x), p.gc, row_amax,
           tbits, ps.transposed_amax);
    TG_LAUNCH_CHECK();
  });
  if (x.amax_out)  // the per-tensor recipes' amax, for the host's history
    TG_CUDA_CHECK(
        cudaMemcpyAsync(x.amax_out, tbits, sizeof(unsigned), cudaMemcpyDeviceToDevice, c.stream));
  const size_t groups = size_t(p.ngr) * p.ngc;
  launch(quant::group_scale_kernel, c.grid(groups, kThreads), kThreads, 0, c.stream,
         static_cast<const unsigned*>(row_amax), rows, ps, static_cast<const unsigned*>(tbits),
         scales, post, nonfinite_post);
  TG_LAUNCH_CHECK();
  *tbits_out = tbits;
  return scales;
}

// ---- the one-pass quantizer (kernels/quantize_tile.cuh) ----

std::atomic<bool> g_two_pass{false};

// The one-pass kernels' grid: one block per super-tile.
dim3 super_tile_grid(int rows, int cols, const quant::TilePlan& tp) {
  return dim3(unsigned((cols + 32 * tp.nc - 1) / (32 * tp.nc)),
              unsigned((rows + 32 * tp.nr - 1) / (32 * tp.nr)));
}

// The finish kernels' grid: a few blocks (each reads the flag word once; they write only the
// layout's padding, or everything for a non-finite operand).
unsigned finish_grid(Ctx& c, size_t n) { return std::min(c.grid(n, kThreads), 64u); }

// The operand's amax bits word (zeroed) for the one-pass kernel's atomics; copied to
// x.amax_out after the kernel when the recipe keeps an amax history.
unsigned* zeroed_tensor_bits(Ctx& c) {
  unsigned* tbits = static_cast<unsigned*>(c.scratch(kScratchQWords, 64));
  TG_CUDA_CHECK(cudaMemsetAsync(tbits, 0, sizeof(unsigned), c.stream));
  return tbits;
}
void copy_amax_out(Ctx& c, const OperandSource& x, const unsigned* tbits) {
  if (x.amax_out)
    TG_CUDA_CHECK(
        cudaMemcpyAsync(x.amax_out, tbits, sizeof(unsigned), cudaMemcpyDeviceToDevice, c.stream));
}

template <ElemFormat F, bool SR>
void one_pass_codes(Ctx& c, cublasLtMatmulMatrixScale_t mode, const OperandSource& x, int rows,
                    int cols, const QuantParams& p, const quant::TilePlan& tp, uint8_t* codes,
                    void* scale, float* post, uint64_t mixed) {
  unsigned* tbits = zeroed_tensor_bits(c);
  dispatch("quantize_codes", x.type, [&](auto tag) {
    using T = decltype(tag);
    launch(quant::one_pass_codes_kernel<T, F, SR>, super_tile_grid(rows, cols, tp), kThreads, 0,
           c.stream, codes, scale, mode, static_cast<const T*>(x.data), rows, cols, x.transposed,
           rotation_of(x), p, tp, tbits, mixed);
    TG_LAUNCH_CHECK();
  });
  copy_amax_out(c, x, tbits);
  const size_t code_bytes = size_t(rows) * cols * elem_bits(F) / 8;
  launch(quant::finish_codes_kernel, finish_grid(c, code_bytes), kThreads, 0, c.stream,
         static_cast<const unsigned*>(tbits), post, float(NAN), codes, code_bytes, scale, mode,
         rows, p);
  TG_LAUNCH_CHECK();
}

template <ElemFormat F, bool SR, typename O>
void one_pass_operand(Ctx& c, const OperandSource& x, int rows, int cols, const QuantParams& p,
                      const quant::TilePlan& tp, O* out, float* post, uint64_t mixed) {
  unsigned* tbits = zeroed_tensor_bits(c);
  dispatch("quantize_dequantize", x.type, [&](auto tag) {
    using T = decltype(tag);
    launch(quant::one_pass_operand_kernel<T, F, SR, O>, super_tile_grid(rows, cols, tp), kThreads,
           0, c.stream, out, static_cast<const T*>(x.data), rows, cols, x.transposed,
           rotation_of(x), p, tp, tbits, mixed);
    TG_LAUNCH_CHECK();
  });
  copy_amax_out(c, x, tbits);
  const size_t n = size_t(rows) * cols;
  launch(quant::finish_operand_kernel<O>, finish_grid(c, n), kThreads, 0, c.stream,
         static_cast<const unsigned*>(tbits), post, out, n, p);
  TG_LAUNCH_CHECK();
}

// quantize_dequantize's one pass, where plan_one_pass says it applies (false: it does not).
template <ElemFormat F, bool SR>
bool one_pass_dequantize(Ctx& c, const OperandSource& x, int rows, int cols, const QuantParams& p,
                         DType out_type, void* out, float* post, uint64_t mixed) {
  quant::TilePlan tp;
  if (g_two_pass || !quant::plan_one_pass(p, rows, cols, quant::kSpan<F, SR>, &tp)) return false;
  if (out_type == DType::BF16)
    one_pass_operand<F, SR>(c, x, rows, cols, p, tp, static_cast<bf16*>(out), post, mixed);
  else
    one_pass_operand<F, SR>(c, x, rows, cols, p, tp, static_cast<float*>(out), post, mixed);
  return true;
}

template <ElemFormat F, bool SR>
void launch_codes(Ctx& c, uint8_t* codes, const OperandSource& x, int rows, int cols,
                  const QuantParams& p, const Scale2* scales, const unsigned* tbits,
                  uint64_t mixed) {
  dispatch("quantize_codes", x.type, [&](auto tag) {
    using T = decltype(tag);
    launch(quant::codes_kernel<T, F, SR>, tile_grid(rows, cols), kThreads, 0, c.stream, codes,
           static_cast<const T*>(x.data), rows, cols, x.transposed, rotation_of(x), p, scales,
           tbits, mixed);
    TG_LAUNCH_CHECK();
  });
}

template <ElemFormat F>
void codes_rounding(Ctx& c, bool sr, uint8_t* codes, const OperandSource& x, int rows, int cols,
                    const QuantParams& p, const Scale2* scales, const unsigned* tbits,
                    uint64_t mixed) {
  if (sr)
    launch_codes<F, true>(c, codes, x, rows, cols, p, scales, tbits, mixed);
  else
    launch_codes<F, false>(c, codes, x, rows, cols, p, scales, tbits, mixed);
}

}  // namespace

void force_two_pass_quantizer(bool two_pass) { g_two_pass = two_pass; }

size_t native_scale_bytes(const OperandRecipe& o, cublasLtMatmulMatrixScale_t mode, int rows,
                          int cols) {
  const QuantParams p = params_of(o, rows, cols);
  const size_t n = quant::native_scale_count(mode, rows, p.ngr, p.ngc);
  const bool bytes = mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ||
                     mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
  return n * (bytes ? 1 : sizeof(float));
}

void quantize_codes(Ctx& c, const OperandRecipe& o, cublasLtMatmulMatrixScale_t mode, uint64_t seed,
                    const OperandSource& x, int rows, int cols, uint8_t* codes, void* scale,
                    float* post) {
  if (rows <= 0 || cols <= 0 || !is_operand_format(o.elem))
    throw Error("cuda backend: quantize_codes needs a narrow, non-empty operand");
  if (elem_bits(o.elem) == 4 && cols % 2)
    throw Error("cuda backend: packed 4-bit codes need an even row length");
  const QuantParams p = params_of(o, rows, cols);
  zero_transposed_amax(c, x);
  const bool sr = o.rounding == RoundMode::Stochastic;
  const uint64_t mixed = quant_sr_seed(seed);
  quant::TilePlan tp;
  const int max_span = one_pass_max_span(elem_bits(o.elem), sr);
  if (!g_two_pass && quant::plan_one_pass(with_tensor_rule(p, x), rows, cols, max_span, &tp)) {
    dispatch_operand_format(o.elem, [&](auto format) {
      constexpr ElemFormat F = decltype(format)::value;
      if (sr)
        one_pass_codes<F, true>(c, mode, x, rows, cols, with_tensor_rule(p, x), tp, codes, scale,
                                post, mixed);
      else
        one_pass_codes<F, false>(c, mode, x, rows, cols, with_tensor_rule(p, x), tp, codes, scale,
                                 post, mixed);
    });
    return;
  }
  const unsigned* tbits = nullptr;
  const Scale2* scales = group_scales(c, p, x, rows, cols, post, NAN, &tbits);
  const size_t n = quant::native_scale_count(mode, rows, p.ngr, p.ngc);
  launch(quant::native_scale_kernel, c.grid(n, kThreads), kThreads, 0, c.stream, scale, mode,
         scales, p, rows, tbits);
  TG_LAUNCH_CHECK();
  dispatch_operand_format(o.elem, [&](auto format) {
    codes_rounding<decltype(format)::value>(c, sr, codes, x, rows, cols, p, scales, tbits, mixed);
  });
}

void stage_operand(Ctx& c, float* dst, DType t, const void* src, bool transposed, int rows,
                   int cols) {
  if (rows <= 0 || cols <= 0) return;
  dispatch("stage_operand", t, [&](auto tag) {
    using E = decltype(tag);
    launch(quant::stage_kernel<E>, tile_grid(rows, cols), kThreads, 0, c.stream, dst,
           static_cast<const E*>(src), rows, cols, transposed);
    TG_LAUNCH_CHECK();
  });
}

void hadamard_rows(Ctx& c, float* x, int rows, int cols, int n, uint64_t seed) {
  if (n < 2 || cols < n || rows <= 0) return;
  const float norm = hadamard_norm(n);
  const size_t runs = size_t(rows) * (cols / n);
  launch(quant::hadamard_rows_kernel, c.grid(runs, kThreads), kThreads, 0, c.stream, x, rows, cols,
         n, seed, norm);
  TG_LAUNCH_CHECK();
}

void quantize_dequantize(Ctx& c, const OperandRecipe& o, uint64_t seed, const OperandSource& x,
                         int rows, int cols, DType out_type, void* out, float* post) {
  static const float one = 1.0f;
  if (out_type != DType::F32 && out_type != DType::BF16)
    throw Error("cuda backend: quantized operands are fp32 or bf16");
  if (x.transposed_amax_out && !is_low_bit(o.elem))
    throw Error("cuda backend: the amax of a transpose is taken by a low-bit operand's quantizer");
  zero_transposed_amax(c, x);
  if (rows <= 0 || cols <= 0 || !is_low_bit(o.elem)) {
    // Left as it is (a bf16 operand of precision.mode=auto, whose GEMM operands are fp32 as
    // dequantizes_to_bf16 says): its fp32 copy.
    upload(c, post, &one, sizeof one);
    if (rows <= 0 || cols <= 0) return;
    if (out_type != DType::F32)
      throw Error("cuda backend: an unquantized operand is copied into fp32 only");
    stage_operand(c, static_cast<float*>(out), x.type, x.data, x.transposed, rows, cols);
    if (x.rotate) hadamard_rows(c, static_cast<float*>(out), rows, cols, x.rotate, x.rotate_seed);
    return;
  }
  const QuantParams p = params_of(o, rows, cols);
  const bool sr = o.rounding == RoundMode::Stochastic;
  const uint64_t mixed = quant_sr_seed(seed);
  bool one_pass = false;
  dispatch_operand_format(o.elem, [&](auto format) {
    constexpr ElemFormat F = decltype(format)::value;
    const QuantParams pt = with_tensor_rule(p, x);
    one_pass = sr ? one_pass_dequantize<F, true>(c, x, rows, cols, pt, out_type, out, post, mixed)
                  : one_pass_dequantize<F, false>(c, x, rows, cols, pt, out_type, out, post, mixed);
  });
  if (one_pass) return;
  const unsigned* tbits = nullptr;
  const Scale2* scales = group_scales(c, p, x, rows, cols, post, 1.0f, &tbits);
  const bool known = dispatch_operand_format(o.elem, [&](auto format) {
    apply_rounding<decltype(format)::value>(c, sr, out_type, out, x, rows, cols, p, scales, tbits,
                                            mixed);
  });
  if (!known) throw Error("cuda backend: quantizing into a format that is not an operand format");
}

}  // namespace tg::gpu
