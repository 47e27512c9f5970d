// scaled.h: the block-scaled linears on the GPU (precision.mode = fp8-rowwise, fp8-block,
// mxfp8, mxfp4, nvfp4 and auto's choices; recipes as data, src/recipe.h): the operand
// quantizer (quantize_blocks.cu, kernels/quantize_blocks.cuh) and the linear's three GEMMs
// (matmul_scaled.cu), the device twins of src/cpu/quantize.cpp and src/cpu/matmul_scaled.cpp.
//
// Path (the portable one, every compute capability): each operand is quantize-dequantized
// into a GEMM operand that holds exactly the values a block-scaled GEMM multiplies (element
// times its block scale), and the existing GEMM wrapper multiplies them with fp32
// accumulation; the operands' tensor factors (NVFP4's 1 / S) and the bias follow in one fp32
// epilogue that rounds the output once. The operands are bf16 when both are exact in bf16
// (operand_in_bf16), else fp32 (CUBLAS_COMPUTE_32F, no TF32).
#pragma once
#include <cstdint>

#include "../recipe.h"
#include "launch.h"

namespace tg::gpu {

// Whether the dequantized values q d of an operand are bf16 values, so that storing them in
// bf16 loses nothing (src/cpu/matmul_scaled.cpp's bf16_exact, the same rule): FP8 or FP4
// elements (at most 4 significant bits) times a power-of-two scale (E8M0, Pow2) or a UE4M3
// block scale (4 bits; NVFP4, whose fp32 tensor scale stays outside the GEMM) have at most 8
// significant bits. fp32 scales (fp8-rowwise, fp8-block) do not: q (1/s) has up to 24 bits.
// The one exception: a value below bf16's smallest normal, 2^-126, is kept on bf16's
// subnormal grid (spacing 2^-133), so E4M3 (E5M2) elements of a block whose power-of-two
// scale is below 2^-124 (2^-117), i.e. a block amax under about 2^-116 (2^-102), lose their
// last bits; E2M1 and UE4M3-scaled values never do.
bool operand_in_bf16(const OperandRecipe& o);

// The operand's fp32 (rows, cols) copy in dst from src (type t): src is (rows, cols)
// row-major, or (cols, rows) when `transposed` (dst = src^T, the backward GEMMs' operands).
void stage_operand(Ctx& c, float* dst, DType t, const void* src, bool transposed, int rows,
                   int cols);
// x <- H D x on each full run of n values of every row (src/cpu/quantize.cpp's hadamard_rows,
// forward direction, the same signs and order of operations); n < 2 does nothing.
void hadamard_rows(Ctx& c, float* x, int rows, int cols, int n, uint64_t seed);
// out (rows, cols, type out_type: F32 or BF16) = x quantize-dequantized as `o` says along
// its rows (src/cpu/quantize.cpp's quantize_dequantize, bit for bit in every value; all NaN
// if x holds a non-finite value), and *post (device) = the factor the GEMM's output takes
// (1 / S for UE4M3 scales, else 1). A BF16 operand is copied as it is.
void quantize_dequantize(Ctx& c, const OperandRecipe& o, uint64_t seed, const float* x, int rows,
                         int cols, DType out_type, void* out, float* post);

// The block-scaled linear (Backend::matmul_forward_scaled / matmul_backward_scaled), every
// tensor of type t:
//   forward  out(N,OC) = Q(inp) Q(W)^T + bias (+ the split channels' fp32 product)
//   backward dW(OC,C) += Q(H dout^T) Q(H inp^T)^T, dinp(N,C) = Q(dout) Q(W^T)^T,
//            dbias += column sums of the unquantized dout (when given)
// with the operands, roles and random streams of src/cpu/matmul_scaled.cpp.
void scaled_linear_forward(Ctx& c, DType t, void* out, const void* inp, const void* w,
                           const void* bias, int N, int C, int OC, const QuantRecipe& r,
                           uint64_t seed);
void scaled_linear_backward(Ctx& c, DType t, void* dinp, void* dw, void* dbias, const void* dout,
                            const void* inp, const void* w, int N, int C, int OC,
                            const QuantRecipe& r, uint64_t seed);

// The start-up line's path of these linears.
const char* scaled_path_name();

}  // namespace tg::gpu
