// tensor_scaled_linears.h: the CPU backend's per-tensor-scaled linears (ScaledLinear::tensor:
// the fp8 mode), forward and backward.
//
// They keep the fp8 mode's CPU numerics, which tests/fixtures/regression_losses.json records:
// the dequantized operands q (1 / s) in fp32 GEMMs, or on the bf16 hardware path the codes
// with 1 / (s_a s_b) as the GEMM's alpha; the block-scaled path would multiply the codes and
// scale each product afterwards (the same values, rounded in another order). The backward
// quantizes the input and the weight at the forward's scales again (TensorScaling: the given
// delayed ones, or the same current amax), its output gradient at its own.
#pragma once
#include <vector>

#include "src/backends/backend.h"
#include "storage.h"
#include "tensor_access.h"

namespace tg::cpu {

class TensorScaledLinears {
 public:
  void forward(MatmulScratch& s, Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
               int OC, const ScaledLinear& q);
  // The exact path. g: dout's fp32 copy (quantized in place).
  void backward(MatmulScratch& s, Tensor dinp, Tensor dw, float* g, Tensor inp, Tensor w, int N,
                int C, int OC, const ScaledLinear& q);
  // The hardware path: FP8 codes as bf16 through the bf16 GEMMs, the tensor scales applied
  // after. dout is read where it lies (no fp32 copy): its bias sums and codes equal those of
  // its exact widening.
  void backward_codes(MatmulScratch& s, Tensor dinp, Tensor dw, Tensor dbias, Tensor dout,
                      Tensor inp, Tensor w, int N, int C, int OC, const ScaledLinear& q);
  // Backend::take_amaxes: the amaxes recorded since the last call, kTensorOperands per slot.
  std::vector<float> take_amaxes(int n_slots);

 private:
  float* amax_at(int slot, int operand);
  // x's FP8 codes (unscaled) into buf as bf16 from t; returns the scale.
  float quantize_codes(std::vector<bf16>& buf, Tensor t, std::vector<float>& wide_buf,
                       const struct TensorQuant& q, float* amax);

  std::vector<bf16> q_a_, q_b_, q_g_;  // FP8 codes of the hardware path's operands
  std::vector<float> amax_;            // kTensorOperands per slot
};

}  // namespace tg::cpu
