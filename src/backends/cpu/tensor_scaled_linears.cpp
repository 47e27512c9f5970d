// tensor_scaled_linears.cpp: the per-tensor-scaled linears (tensor_scaled_linears.h).
#include "tensor_scaled_linears.h"

#include <algorithm>

#include "gemm_bf16.h"
#include "ops.h"

namespace tg::cpu {

namespace {

TensorQuant tensor_quant(const ScaledLinear& q, const OperandRecipe& o, int operand) {
  return {q.tensor.scale[operand], o.source == ScaleSource::Current, q.tensor.margin, o.elem};
}

// The backward's three operands at their scales: dout's own, the input's and the weight's
// the forward's again.
struct BackwardQuant {
  TensorQuant g, a, b;
};
BackwardQuant backward_quant(const ScaledLinear& q) {
  const QuantRecipe& r = *q.recipe;
  return {tensor_quant(q, r.gemm[kInputGrad].a, kTensorGrad),
          tensor_quant(q, r.gemm[kWeightGrad].b, kTensorInput),
          tensor_quant(q, r.gemm[kInputGrad].b, kTensorWeight)};
}

// Whether the GEMMs can quantize inp and w as they pack them: bf16 tensors (read as they
// lie) at given scales (delayed scaling; current scaling needs the amax before the codes).
bool packs_fp8(Tensor inp, Tensor w, const TensorQuant& qa, const TensorQuant& qb) {
  return inp.dtype == DType::BF16 && w.dtype == DType::BF16 && !qa.current && !qb.current;
}

// narrow_back of f times scale: a bf16 tensor gets round(f scale), the same two roundings as
// scaling f in place first, in the one pass that rounds (a pass over fp32 values fewer).
void narrow_back_scaled(Tensor t, float* f, float scale) {
  if (t.dtype == DType::BF16) {
    bf16* d = P<bf16>(t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < t.numel; i++) d[i] = bf16{f32_to_bf16(f[i] * scale)};
    return;
  }
  if (scale != 1.0f) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < t.numel; i++) f[i] *= scale;
  }
  narrow_back(t, f);
}

}  // namespace

float* TensorScaledLinears::amax_at(int slot, int operand) {
  grow(amax_, size_t(slot + 1) * kTensorOperands);
  return &amax_[size_t(slot) * kTensorOperands + operand];
}

std::vector<float> TensorScaledLinears::take_amaxes(int n_slots) {
  std::vector<float> r(size_t(n_slots) * kTensorOperands, 0.0f);
  std::copy_n(amax_.begin(), std::min(r.size(), amax_.size()), r.begin());
  std::fill(amax_.begin(), amax_.end(), 0.0f);
  return r;
}

// A bf16 tensor is read as it is (the quantizer does not write it; its fp32 copy would hold
// the same values), anything else is widened into `wide_buf` first.
float TensorScaledLinears::quantize_codes(std::vector<bf16>& buf, Tensor t,
                                          std::vector<float>& wide_buf, const TensorQuant& q,
                                          float* amax) {
  if (t.dtype != DType::BF16) {
    const float* x = wide(t, wide_buf, true);
    grow(buf, t.numel);
    return quantize_tensor_fp8(buf.data(), x, t.numel, q, amax);
  }
  grow(buf, t.numel);
  return quantize_tensor_fp8(buf.data(), P<bf16>(t), t.numel, q, amax);
}

void TensorScaledLinears::forward(MatmulScratch& s, Tensor out, Tensor inp, Tensor w, Tensor bias,
                                  int N, int C, int OC, const ScaledLinear& q) {
  const GemmRecipe& g = q.recipe->gemm[kForward];
  const TensorQuant qa = tensor_quant(q, g.a, kTensorInput);
  const TensorQuant qb = tensor_quant(q, g.b, kTensorWeight);
  float* amax_a = amax_at(q.tensor.slot, kTensorInput);
  float* amax_b = amax_at(q.tensor.slot, kTensorWeight);
  float* o = wide(out, s.out, false);
  const float* b = wide(bias, s.c, true);
  if (narrow_gemm_hardware()) {
    // FP8 codes as bf16 (exact) through the bf16 GEMM, the tensor scales applied after; the
    // codes of inp and w made as the GEMM packs them where it can.
    if (packs_fp8(inp, w, qa, qb) &&
        linear_forward_fp8(o, P<bf16>(inp), P<bf16>(w), b, N, C, OC, qa, qb, amax_a, amax_b))
      return narrow_back(out, o);
    const float sa = quantize_codes(q_a_, inp, s.a, qa, amax_a);
    const float sb = quantize_codes(q_b_, w, s.b, qb, amax_b);
    matmul_forward_bf16(o, q_a_.data(), q_b_.data(), b, (1.0f / sa) * (1.0f / sb), N, C, OC);
  } else {
    float* a = copy_wide(inp, s.a);
    float* wb = copy_wide(w, s.b);
    qdq_tensor_fp8(a, inp.numel, qa, amax_a);
    qdq_tensor_fp8(wb, w.numel, qb, amax_b);
    matmul_forward(o, a, wb, b, N, C, OC);
  }
  narrow_back(out, o);
}

void TensorScaledLinears::backward(MatmulScratch& s, Tensor dinp, Tensor dw, float* g, Tensor inp,
                                   Tensor w, int N, int C, int OC, const ScaledLinear& q) {
  const BackwardQuant bq = backward_quant(q);
  float unused;
  float* di = wide(dinp, s.out, false);
  float* dwf = wide(dw, s.dw, true);
  float* a = copy_wide(inp, s.a);
  float* b = copy_wide(w, s.b);
  qdq_tensor_fp8(g, size_t(N) * OC, bq.g, amax_at(q.tensor.slot, kTensorGrad));
  qdq_tensor_fp8(a, inp.numel, bq.a, &unused);
  qdq_tensor_fp8(b, w.numel, bq.b, &unused);
  matmul_backward<float>(di, dwf, nullptr, g, a, b, N, C, OC);
  narrow_back(dinp, di);
  narrow_back(dw, dwf);
}

void TensorScaledLinears::backward_codes(MatmulScratch& s, Tensor dinp, Tensor dw, Tensor dbias,
                                         Tensor dout, Tensor inp, Tensor w, int N, int C, int OC,
                                         const ScaledLinear& q) {
  if (dbias) {  // the bias gradient comes from the unquantized gradient
    float* dbf = wide(dbias, s.db, true);
    if (dout.dtype == DType::BF16)
      bias_backward(dbf, P<bf16>(dout), N, OC);
    else
      bias_backward(dbf, wide(dout, s.g, true), N, OC);
    narrow_back(dbias, dbf);
  }
  const BackwardQuant bq = backward_quant(q);
  float unused;
  float* di = wide(dinp, s.out, false);
  float* dwf = wide(dw, s.dw, true);
  const float inv_g =
      1.0f / quantize_codes(q_g_, dout, s.g, bq.g, amax_at(q.tensor.slot, kTensorGrad));
  float dinp_scale;  // applied as dinp is rounded to its type
  if (packs_fp8(inp, w, bq.a, bq.b)) {
    dinp_scale = linear_backward_fp8(di, dwf, q_g_.data(), inv_g, P<bf16>(inp), P<bf16>(w),
                                          N, C, OC, bq.a, bq.b, q_a_, q_b_);
  } else {
    const float sa = quantize_codes(q_a_, inp, s.a, bq.a, &unused);
    const float sb = quantize_codes(q_b_, w, s.b, bq.b, &unused);
    dinp_scale = inv_g * (1.0f / sb);
    matmul_backward_bf16(di, dwf, q_g_.data(), q_a_.data(), q_b_.data(), N, C, OC, 1.0f,
                              inv_g * (1.0f / sa));
  }
  narrow_back_scaled(dinp, di, dinp_scale);
  narrow_back(dw, dwf);
}

}  // namespace tg::cpu
