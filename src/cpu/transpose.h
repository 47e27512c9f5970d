// transpose: dst(cols, rows) = src(rows, cols)^T of fp32 matrices (the backward's operands of
// the block-scaled linears, which quantize along the other dimension).
#pragma once

namespace tg::cpu {

// In 8 x 8 tiles through AVX registers when the CPU has AVX-512F (and so AVX2), else in
// 32 x 32 tiles of scalar copies; both copy every value's bits.
void transpose(float* dst, const float* src, int rows, int cols);
// The plain double loop, the oracle of the above.
void transpose_reference(float* dst, const float* src, int rows, int cols);

}  // namespace tg::cpu
