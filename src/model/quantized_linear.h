// quantized_linear.h: one block linear's GEMMs on the path its quantization state picks.
//
// A block linear runs one of two GEMM paths:
//   plain      Backend::matmul_* (no quantization state, or a layer kept in bf16)
//   quantized  Backend::matmul_*_scaled with the linear's recipe and, for the per-tensor
//              recipes (precision.mode=fp8), the scales LinearQuantizers derives from its amax
//              histories; the amaxes come back once per pass (GPT::take_amaxes)
// so the choice lives here and the model only says which linear it calls.
#pragma once
#include "linear_quantizers.h"
#include "src/backends/backend.h"

namespace tg {

// Linear `linear` (LinearQuantizers::Linear) of block `layer`; state null: not quantized.
struct QuantizedLinear {
  LinearQuantizers* state = nullptr;
  int layer = 0, linear = 0;
};

// out(N,OC) = inp(N,C) W(OC,C)^T + b on the linear's path.
void quantized_linear_forward(Backend& be, const QuantizedLinear& q, Tensor out, Tensor inp,
                              Tensor w, Tensor b, int N, int C, int OC);
// What the op that writes linear q's input asks of the backend (LinearQuantizers::input_amax;
// none where q is not quantized).
InputAmax input_amax(const QuantizedLinear& q);
// dinp, dw, db from dout, likewise.
void quantized_linear_backward(Backend& be, const QuantizedLinear& q, Tensor dinp, Tensor dw,
                               Tensor db, Tensor dout, Tensor inp, Tensor w, int N, int C, int OC);

}  // namespace tg
