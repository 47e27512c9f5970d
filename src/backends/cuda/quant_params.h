// quant_params.h: the scale groups of a block-scaled operand recipe over one (rows, cols)
// operand, clipped to it as src/backends/cpu/quantize.cpp clips them, in the form the kernels of
// kernels/quantize_blocks.cuh take; shared by the quantizer (quantize_blocks.cu) and the
// operand statistics (operand_stats.cu).
#pragma once
#include "kernels/quantize_blocks.cuh"
#include "src/numerics/recipe.h"

namespace tg::gpu {

quant::QuantParams params_of(const OperandRecipe& o, int rows, int cols);

}  // namespace tg::gpu
