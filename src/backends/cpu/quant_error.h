// quant_error.h: how much one GEMM operand loses in a recipe operand's format, measured on a
// host copy by the CPU (quant_error.cpp); the result type is the numerics layer's
// (src/numerics/quant_error.h), which the operand views name without including a backend.
#pragma once
#include <cstdint>

#include "src/numerics/quant_error.h"
#include "src/numerics/recipe.h"

namespace tg::cpu {

QuantError quant_error(const float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed);

}  // namespace tg::cpu
