// linear_fp8: the fp8 mode's per-tensor-scaled linears on the bf16 GEMMs (cpu.narrow_gemm's
// hardware path) where the input and the weight are bf16 tensors at given (delayed) scales:
// the GEMMs quantize them as they pack them (matmul_forward_fp8 / matmul_backward_fp8,
// gemm_bf16.h's PackQuant), so their codes are never written out and read back, which on the
// CPU cost as much as the rest of the fp8 mode's overhead (docs/benchmarks.md, 2026-12-07).
// The results are those of the GEMMs on quantize_tensor_fp8's codes, bit for bit
// (tests/backends/test_matmul_fp8.cpp): where a value was not finite, what it spoilt is
// computed again from the quantizer's NaN codes, as rare as an overflowed gradient.
#include <vector>

#include "gemm_bf16.h"
#include "ops.h"

namespace tg::cpu {

namespace {

bool finite_bits(uint32_t amax_bits) { return amax_bits < 0x7f800000u; }

// x's codes at q's scale into buf (the quantizer's: NaN codes where x is not finite).
const bf16* codes_into(std::vector<bf16>& buf, const bf16* x, size_t n, const TensorQuant& q) {
  if (buf.size() < n) buf.resize(n);
  float unused;
  quantize_tensor_fp8(buf.data(), x, n, q, &unused);
  return buf.data();
}

}  // namespace

bool linear_forward_fp8(float* out, const bf16* inp, const bf16* w, const float* bias, int N, int C,
                        int OC, const TensorQuant& qa, const TensorQuant& qb, float* amax_a,
                        float* amax_b) {
  PackQuant pa{qa.scale, qa.format}, pb{qb.scale, qb.format};
  matmul_forward_fp8(out, inp, w, bias, (1.0f / qa.scale) * (1.0f / qb.scale), N, C, OC, &pa, &pb);
  if (!finite_bits(pa.amax_bits) || !finite_bits(pb.amax_bits)) return false;
  *amax_a = bits_f32(pa.amax_bits);
  *amax_b = bits_f32(pb.amax_bits);
  return true;
}

// dinp is left unscaled: its caller applies the scale as it rounds dinp to its storage type.
// dW's GEMM accumulates into dW itself when its scale is 1 (no product buffer), so nothing a
// non-finite input spoilt could be left out: inp's codes are made first then.
float linear_backward_fp8(float* dinp, float* dw, const bf16* dout_codes, float inv_g,
                          const bf16* inp, const bf16* w, int N, int C, int OC,
                          const TensorQuant& qa, const TensorQuant& qb, std::vector<bf16>& codes_a,
                          std::vector<bf16>& codes_b) {
  const float dinp_scale = inv_g * (1.0f / qb.scale), dw_scale = inv_g * (1.0f / qa.scale);
  const size_t n_inp = size_t(N) * C, n_w = size_t(OC) * C;
  PackQuant pi{qa.scale, qa.format}, pw{qb.scale, qb.format};
  PackQuant* qi = dw_scale != 1.0f ? &pi : nullptr;
  const bf16* a = qi ? inp : codes_into(codes_a, inp, n_inp, qa);
  matmul_backward_fp8(dinp, dw, dout_codes, a, w, N, C, OC, 1.0f, dw_scale, qi, &pw);
  if (!finite_bits(pw.amax_bits))  // dinp again (dW does not read w)
    matmul_backward_bf16(dinp, nullptr, dout_codes, nullptr, codes_into(codes_b, w, n_w, qb), N, C,
                         OC, 1.0f, dw_scale);
  if (qi && !finite_bits(pi.amax_bits))  // dW, which matmul_backward_fp8 left as it was
    matmul_backward_bf16(nullptr, dw, dout_codes, codes_into(codes_a, inp, n_inp, qa), nullptr, N,
                         C, OC, 1.0f, dw_scale);
  return dinp_scale;
}

}  // namespace tg::cpu
