// quantized_linear.cpp: the GEMM path of a block linear (see quantized_linear.h).
#include "quantized_linear.h"

namespace tg {

namespace {
bool quantized(const QuantizedLinear& q) { return q.state && q.state->layer_in_fp8(q.layer); }
}  // namespace

void quantized_linear_forward(Backend& be, const QuantizedLinear& q, Tensor out, Tensor inp,
                              Tensor w, Tensor b, int N, int C, int OC) {
  if (!quantized(q))
    be.matmul_forward(out, inp, w, b, N, C, OC);
  else
    be.matmul_forward_scaled(out, inp, w, b, N, C, OC, q.state->scaled(q.layer, q.linear, false));
}

InputAmax input_amax(const QuantizedLinear& q) {
  return q.state ? q.state->input_amax(q.layer, q.linear) : InputAmax{};
}

void quantized_linear_backward(Backend& be, const QuantizedLinear& q, Tensor dinp, Tensor dw,
                               Tensor db, Tensor dout, Tensor inp, Tensor w, int N, int C, int OC) {
  if (!quantized(q))
    be.matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  else
    be.matmul_backward_scaled(dinp, dw, db, dout, inp, w, N, C, OC,
                              q.state->scaled(q.layer, q.linear, true));
}

}  // namespace tg
