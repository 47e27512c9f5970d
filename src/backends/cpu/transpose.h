// transpose: dst(cols, rows) = src(rows, cols)^T into fp32 (the backward's operands of the
// block-scaled linears, which quantize along the other dimension), from fp32 or bf16.
#pragma once

#include "storage.h"

namespace tg::cpu {

// In 8 x 8 tiles through AVX registers when the CPU has AVX-512F (and so AVX2), else in
// 32 x 32 tiles of scalar copies; both copy every value's bits.
void transpose(float* dst, const float* src, int rows, int cols);
// The same from bf16, widened exactly on the way (the transpose of the widened copy).
void transpose(float* dst, const bf16* src, int rows, int cols);
// The plain double loop, the oracle of the above.
void transpose_reference(float* dst, const float* src, int rows, int cols);

}  // namespace tg::cpu
