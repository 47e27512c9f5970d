// quantize_blocks.cu: launchers of kernels/quantize_blocks.cuh: the block quantize-dequantize
// of one GEMM operand, read where it lies (transposed or not, any storage type), and its
// quantization into codes and a scale tensor for the native GEMMs; staging into fp32 and the
// random Hadamard rotation for the steps that change an operand first (declared in scaled.h).
#include <cmath>

#include "kernels/quantize_blocks.cuh"
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
  dispatch("quantize (amax)", x.type, [&](auto tag) {
    using T = decltype(tag);
    launch(quant::operand_amax_kernel<T>, tile_grid(rows, cols), kThreads, 0, c.stream,
           static_cast<const T*>(x.data), rows, cols, x.transposed, rotation_of(x), p.gc, row_amax,
           tbits);
    TG_LAUNCH_CHECK();
  });
  if (x.amax_out)  // the per-tensor recipes' amax, for the host's history
    TG_CUDA_CHECK(
        cudaMemcpyAsync(x.amax_out, tbits, sizeof(unsigned), cudaMemcpyDeviceToDevice, c.stream));
  QuantParams ps = p;  // the per-tensor recipes' own scale rule
  ps.tensor_enc = x.tensor_scale;
  ps.margin = x.margin;
  const size_t groups = size_t(p.ngr) * p.ngc;
  launch(quant::group_scale_kernel, c.grid(groups, kThreads), kThreads, 0, c.stream,
         static_cast<const unsigned*>(row_amax), rows, ps, static_cast<const unsigned*>(tbits),
         scales, post, nonfinite_post);
  TG_LAUNCH_CHECK();
  *tbits_out = tbits;
  return scales;
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
  const unsigned* tbits = nullptr;
  const Scale2* scales = group_scales(c, p, x, rows, cols, post, NAN, &tbits);
  const size_t n = quant::native_scale_count(mode, rows, p.ngr, p.ngc);
  launch(quant::native_scale_kernel, c.grid(n, kThreads), kThreads, 0, c.stream, scale, mode,
         scales, p, rows, tbits);
  TG_LAUNCH_CHECK();
  const bool sr = o.rounding == RoundMode::Stochastic;
  const uint64_t mixed = quant_sr_seed(seed);
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
  const unsigned* tbits = nullptr;
  const Scale2* scales = group_scales(c, p, x, rows, cols, post, 1.0f, &tbits);
  const bool sr = o.rounding == RoundMode::Stochastic;
  const uint64_t mixed = quant_sr_seed(seed);
  const bool known = dispatch_operand_format(o.elem, [&](auto format) {
    apply_rounding<decltype(format)::value>(c, sr, out_type, out, x, rows, cols, p, scales, tbits,
                                            mixed);
  });
  if (!known) throw Error("cuda backend: quantizing into a format that is not an operand format");
}

}  // namespace tg::gpu
