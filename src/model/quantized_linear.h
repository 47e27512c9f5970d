// quantized_linear.h: one block linear's GEMMs on the path its quantization state picks.
//
// A block linear runs one of three GEMM paths:
//   plain         Backend::matmul_* (no quantization state, or a layer kept in bf16)
//   block-scaled  Backend::matmul_*_scaled with the linear's recipe (MXFP4, NVFP4, auto, ...)
//   per-tensor    Backend::matmul_*_fp8 with the scales QuantState derives (precision.mode=fp8)
// Only the per-tensor path reports amaxes back; the caller applies them to the state (at
// once, or in call order when a backend defers its reports), so the choice lives here and
// the model only says which linear it calls.
#pragma once
#include <optional>

#include "quant_state.h"
#include "src/backends/backend.h"

namespace tg {

// Linear `linear` (QuantState::Linear) of block `layer`; state null: not quantized.
struct QuantizedLinear {
  const QuantState* state = nullptr;
  int layer = 0, linear = 0;
};

// out(N,OC) = inp(N,C) W(OC,C)^T + b on the linear's path; the FP8 report when that was the
// per-tensor FP8 one.
std::optional<Fp8Report> quantized_linear_forward(Backend& be, const QuantizedLinear& q, Tensor out,
                                                  Tensor inp, Tensor w, Tensor b, int N, int C,
                                                  int OC);
// dinp, dw, db from dout, likewise.
std::optional<Fp8Report> quantized_linear_backward(Backend& be, const QuantizedLinear& q,
                                                   Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                                                   Tensor inp, Tensor w, int N, int C, int OC);

}  // namespace tg
