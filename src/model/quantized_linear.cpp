// quantized_linear.cpp: the GEMM path of a block linear (see quantized_linear.h).
#include "quantized_linear.h"

namespace tg {

namespace {
bool quantized(const QuantizedLinear& q) { return q.state && q.state->layer_in_fp8(q.layer); }
}  // namespace

std::optional<Fp8Report> quantized_linear_forward(Backend& be, const QuantizedLinear& q, Tensor out,
                                                  Tensor inp, Tensor w, Tensor b, int N, int C,
                                                  int OC) {
  if (!quantized(q)) {
    be.matmul_forward(out, inp, w, b, N, C, OC);
    return std::nullopt;
  }
  const QuantState& s = *q.state;
  if (s.block_scaled()) {
    be.matmul_forward_scaled(out, inp, w, b, N, C, OC, s.scaled(q.layer, q.linear));
    return std::nullopt;
  }
  const Fp8Quant quant[2] = {s.quant(q.layer, q.linear, QuantState::INP),
                             s.quant(q.layer, q.linear, QuantState::WEIGHT)};
  return be.matmul_forward_fp8(out, inp, w, b, N, C, OC, quant);
}

std::optional<Fp8Report> quantized_linear_backward(Backend& be, const QuantizedLinear& q,
                                                   Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                                                   Tensor inp, Tensor w, int N, int C, int OC) {
  if (!quantized(q)) {
    be.matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    return std::nullopt;
  }
  const QuantState& s = *q.state;
  if (s.block_scaled()) {
    be.matmul_backward_scaled(dinp, dw, db, dout, inp, w, N, C, OC, s.scaled(q.layer, q.linear));
    return std::nullopt;
  }
  return be.matmul_backward_fp8(dinp, dw, db, dout, inp, w, N, C, OC,
                                s.quant(q.layer, q.linear, QuantState::GRAD),
                                s.forward_scale(q.layer, q.linear, QuantState::INP),
                                s.forward_scale(q.layer, q.linear, QuantState::WEIGHT));
}

}  // namespace tg
