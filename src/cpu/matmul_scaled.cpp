// matmul_scaled: the block-scaled linears emulated, forward beside backward.
//
// Forward  out(N,OC)  = Q(inp)(N,C) Q(W)(OC,C)^T + bias        (reduction over C)
// dgrad    dinp(N,C)  = Q(dout)(N,OC) Q(W^T)(C,OC)^T           (reduction over OC)
// wgrad    dW(OC,C)  += Q(H dout^T)(OC,N) Q(H inp^T)(C,N)^T    (reduction over N tokens)
// Q quantizes each operand along its own reduction dimension as the recipe's GEMM role says
// (quantize.cpp), so the backward GEMMs re-quantize transposed copies of the fp32 operands;
// H is the optional random Hadamard rotation of both wgrad operands along the tokens (the
// same signs for both, so it cancels in the product). The dequantized operands are exactly
// the values a block-scaled GEMM multiplies (element x power-of-two or UE4M3 scale), and the
// product runs in fp32 (sgemm), times the operands' tensor factors (NVFP4's 1/S), which is
// what hardware with fp32 accumulation computes up to the order of the additions.
// Every GEMM role and operand draws its stochastic-rounding bits from its own stream of the
// linear's seed. A recipe's split_channels (outlier input channels) leave the forward's
// quantized GEMM (their columns of inp and W are zero there, so they set no scale) and are
// added back as an fp32 product of their unquantized values: X_o W_o^T + Q(X_r) Q(W_r)^T,
// equal to the unsplit product in exact arithmetic.
#include <vector>

#include "../formats.h"
#include "ops.h"
#include "parallel.h"

namespace tg::cpu {

namespace {

uint64_t stream(uint64_t seed, int role, int operand) {
  return detail::splitmix64_mix(seed + uint64_t(role * 2 + operand + 1) * 0x9E3779B97F4A7C15ull);
}

// dst(cols, rows) = src(rows, cols)^T
void transpose(float* dst, const float* src, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= kParallelMin)
  for (int c = 0; c < cols; c++)
    for (int r = 0; r < rows; r++) dst[size_t(c) * rows + r] = src[size_t(r) * cols + c];
}

// out(M,Nout) (+)= post * A(M,K) B(Nout,K)^T, A and B quantized in place first.
void scaled_gemm(float* out, float* A, float* B, int M, int Nout, int K, const GemmRecipe& g,
                 uint64_t seed, int role, bool accumulate, std::vector<float>* tmp) {
  const OperandRecipe &ra = g.a, &rb = g.b;
  if (ra.transform == Transform::Hadamard) {
    const uint64_t hs = stream(seed, role, 2);
    hadamard_rows(A, M, K, ra.transform_size, hs, false);
    hadamard_rows(B, Nout, K, rb.transform_size, hs, false);
  }
  const float post = quantize_dequantize(A, M, K, ra, stream(seed, role, 0)) *
                     quantize_dequantize(B, Nout, K, rb, stream(seed, role, 1));
  float* o = out;
  if (accumulate) {
    tmp->resize(size_t(M) * Nout);
    o = tmp->data();
  }
  matmul_forward<float>(o, A, B, nullptr, M, K, Nout);
  if (!accumulate && post == 1.0f) return;
#pragma omp parallel for schedule(static) if (size_t(M) * Nout >= kParallelMin)
  for (size_t i = 0; i < size_t(M) * Nout; i++)
    out[i] = accumulate ? out[i] + o[i] * post : o[i] * post;
}

}  // namespace

namespace {
// Moves columns `ch` of x(rows, cols) into dst(rows, ch.size()), leaving zeros behind.
void take_columns(float* dst, float* x, int rows, int cols, const std::vector<int>& ch) {
  const int k = int(ch.size());
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < k; j++) {
      float& v = x[size_t(r) * cols + ch[j]];
      dst[size_t(r) * k + j] = v;
      v = 0.0f;
    }
}
}  // namespace

void matmul_forward_scaled(float* out, float* inp, float* w, const float* bias, int N, int C,
                           int OC, const QuantRecipe& r, uint64_t seed) {
  const std::vector<int>& ch = r.split_channels;
  std::vector<float> xo, wo;
  if (!ch.empty()) {
    xo.resize(size_t(N) * ch.size());
    wo.resize(size_t(OC) * ch.size());
    take_columns(xo.data(), inp, N, C, ch);
    take_columns(wo.data(), w, OC, C, ch);
  }
  scaled_gemm(out, inp, w, N, OC, C, r.gemm[kForward], seed, kForward, false, nullptr);
  if (!ch.empty()) {
    std::vector<float> o(size_t(N) * OC);
    matmul_forward<float>(o.data(), xo.data(), wo.data(), nullptr, N, int(ch.size()), OC);
    for (size_t i = 0; i < o.size(); i++) out[i] += o[i];
  }
  if (bias) {
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= kParallelMin)
    for (int n = 0; n < N; n++) {
      float* o = out + size_t(n) * OC;
      for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
  }
}

void matmul_backward_scaled(float* dinp, float* dw, float* dout, const float* inp, const float* w,
                            int N, int C, int OC, const QuantRecipe& r, uint64_t seed,
                            ScaledScratch& s) {
  // wgrad first: its operands are transposed copies, so dout can then be quantized in place.
  s.a.resize(size_t(OC) * N);
  s.b.resize(size_t(C) * N);
  transpose(s.a.data(), dout, N, OC);
  transpose(s.b.data(), inp, N, C);
  scaled_gemm(dw, s.a.data(), s.b.data(), OC, C, N, r.gemm[kWeightGrad], seed, kWeightGrad, true,
              &s.tmp);
  s.b.resize(size_t(C) * OC);
  transpose(s.b.data(), w, OC, C);
  scaled_gemm(dinp, dout, s.b.data(), N, C, OC, r.gemm[kInputGrad], seed, kInputGrad, false,
              nullptr);
}

}  // namespace tg::cpu
