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
// With cpu.narrow_gemm's hardware path, operands whose dequantized values are exact in bf16
// go through the bf16 GEMM instead (bf16_exact below says which), the same products summed
// in gemm_bf16's order.
// Every GEMM role and operand draws its stochastic-rounding bits from its own stream of the
// linear's seed. A recipe's split_channels (outlier input channels) leave the forward's
// quantized GEMM (their columns of inp and W are zero there, so they set no scale) and are
// added back as an fp32 product of their unquantized values: X_o W_o^T + Q(X_r) Q(W_r)^T,
// equal to the unsplit product in exact arithmetic. A recipe's smooth factors
// (src/precision/smoothing.h) scale the forward's operands first, X diag(1/s) and W diag(s), the
// same product in exact arithmetic; the backward takes the unsmoothed operands, the exact gradient
// of that product.
#include <algorithm>
#include <tuple>
#include <vector>

#include "gemm_bf16.h"
#include "ops.h"
#include "parallel.h"
#include "src/base/common.h"
#include "src/numerics/formats.h"
#include "transpose.h"

namespace tg::cpu {

namespace {

uint64_t stream(uint64_t seed, int role, int operand) {
  return detail::splitmix64_mix(seed + uint64_t(role * 2 + operand + 1) * 0x9E3779B97F4A7C15ull);
}

// v's first n elements, grown when needed, never shrunk: shrinking and regrowing would
// zero-fill the regrown part on every call.
template <typename T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The bf16 copies of the operands the bf16 GEMM multiplies (one per operand, this thread's).
bf16* narrow_buffer(int operand, size_t n) {
  static thread_local std::vector<bf16> buf[2];
  return grown(buf[operand], n);
}

// The bf16 copy of x(rows, K): `ready` when the quantizer wrote it, else converted here.
const bf16* narrowed(const bf16* ready, const float* x, size_t n, int operand) {
  if (ready) return ready;
  bf16* b = narrow_buffer(operand, n);
  convert(b, x, n, Rounding{});
  return b;
}

// out(M,N) = A(M,K) B(N,K)^T: the bf16 GEMM on bf16 copies of A and B (exact per bf16_exact;
// na, nb when the quantizer wrote them) when the hardware path is on and both operands allow
// it, else sgemm.
void product(float* out, const float* A, const float* B, int M, int N, int K, bool bf16_ok,
             const bf16* na = nullptr, const bf16* nb = nullptr) {
  if (!bf16_ok || !narrow_gemm_hardware()) {
    matmul_forward<float>(out, A, B, nullptr, M, K, N);
    return;
  }
  const bf16* a = narrowed(na, A, size_t(M) * K, 0);
  const bf16* b = narrowed(nb, B, size_t(N) * K, 1);
  matmul_forward_bf16(out, a, b, nullptr, 1.0f, M, K, N);
}

// An operand with fp32 scales (fp8-rowwise, fp8-block) enters the product as its codes q, its
// scales applied to the products afterwards, as hardware with per-row or per-block fp32
// scales computes (cuBLASLt's OUTER_VEC_32F, VEC128_32F and BLK128x128_32F; DeepSeek-V3's
// promotion every 128 along K): out = sum over K chunks of (Q_a Q_b^T)_chunk d_a d_b, each
// chunk inside one scale group of both operands. The codes are exact in bf16 (E4M3, E5M2,
// E2M1: at most 4 significant bits, |q| >= 2^-16), so these operands take the bf16 GEMM too;
// q d rounded to fp32 would not be, and hardware never forms it.
struct Factored {
  bool on = false;
  int gr = 1, gc = 1, ngc = 1;  // scale groups (rows x cols along K), groups per row
  std::vector<float> dec;
  float at(int row, int k) const { return on ? dec[size_t(row / gr) * ngc + k / gc] : 1.0f; }
};

bool factored_scales(const OperandRecipe& o) {
  return o.scale == ScaleFormat::FP32 && is_low_bit(o.elem);
}

// Quantizes x(rows, K) in place: codes with their scales apart (f) or dequantized values;
// narrow (when given) gets their bf16 copy too.
float quantize_operand(float* x, int rows, int K, const OperandRecipe& o, uint64_t seed,
                       Factored* f, bf16* narrow) {
  if (!factored_scales(o))
    return narrow ? quantize_dequantize_narrow(x, narrow, rows, K, o, seed)
                  : quantize_dequantize(x, rows, K, o, seed);
  f->on = true;
  group_shape(o, rows, K, &f->gr, &f->gc);
  f->gr = std::min(f->gr, rows);
  f->gc = std::min(f->gc, K);
  f->ngc = (K + f->gc - 1) / f->gc;
  return quantize_to_codes(x, rows, K, o, seed, &f->dec, narrow);
}

// The K chunk both operands' scale groups hold whole: the narrower group width, or 0 when
// neither width divides the other (those products take dequantized operands instead).
int common_chunk(const Factored& a, const Factored& b, int K) {
  const int wa = a.on ? a.gc : K, wb = b.on ? b.gc : K;
  const int lo = std::min(wa, wb), hi = std::max(wa, wb);
  return hi % lo == 0 || hi == K ? lo : 0;
}

// cols [k0, k0 + kc) of x(rows, K) as a contiguous (rows, kc) matrix.
const float* columns(std::vector<float>& buf, const float* x, int rows, int K, int k0, int kc) {
  if (k0 == 0 && kc == K) return x;
  buf.resize(size_t(rows) * kc);
  for (int r = 0; r < rows; r++)
    std::copy_n(x + size_t(r) * K + k0, kc, buf.data() + size_t(r) * kc);
  return buf.data();
}

// Rows [r0, r1) of M that part id of nt owns (matmul.cpp's split).
void part_rows(int M, int id, int nt, int* r0, int* r1) {
  *r0 = int(int64_t(M) * id / nt);
  *r1 = int(int64_t(M) * (id + 1) / nt);
}

// Every row's scale for each K chunk, row-major: t[r * nch + c] = f.at(r, c chunk).
void chunk_scales(std::vector<float>& t, const Factored& f, int rows, int K, int chunk) {
  const int nch = (K + chunk - 1) / chunk;
  t.resize(size_t(rows) * nch);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < nch; c++) t[size_t(r) * nch + c] = f.at(r, c * chunk);
}

// factored_product on the bf16 GEMM: the codes converted to bf16 once (exact), each thread's
// rows through gemm_bf16_chunks, which scales every chunk's sum in registers (the same
// operations as the loop below: the first chunk p (sa sb), then fma(p, sa sb, o); that loop's
// o + p (sa sb) is compiled into an fma). One chunk (fp8-rowwise: the whole row) is a plain
// GEMM followed by the scaling in place. Returns false for chunks deeper than the kernel's
// slice that do not span K (the loop below takes those).
bool factored_product_bf16(float* o, const float* A, const float* B, const Factored& fa,
                           const Factored& fb, int M, int Nout, int K, int chunk, const bf16* na,
                           const bf16* nb) {
  if (chunk < K && chunk > kGemmBf16MaxChunk) return false;
  static thread_local std::vector<float> sa, sb;
  const bf16* a = narrowed(na, A, size_t(M) * K, 0);
  const bf16* b = narrowed(nb, B, size_t(Nout) * K, 1);
  const int step = chunk < K ? chunk : K, nch = (K + step - 1) / step;
  chunk_scales(sa, fa, M, K, step);
  chunk_scales(sb, fb, Nout, K, step);
  const uint16_t* ac = reinterpret_cast<const uint16_t*>(a);
  const uint16_t* bc = reinterpret_cast<const uint16_t*>(b);
  const float *psa = sa.data(), *psb = sb.data();
  for_each_part([&](int id, int nt) {
    int r0, r1;
    part_rows(M, id, nt, &r0, &r1);
    if (r1 <= r0) return;
    float* orow = o + size_t(r0) * Nout;
    if (nch > 1) {
      gemm_bf16_chunks(r1 - r0, Nout, K, step, ac + size_t(r0) * K, K, bc, K,
                       psa + size_t(r0) * nch, psb, orow, Nout);
      return;
    }
    gemm_bf16(false, true, r1 - r0, Nout, K, ac + size_t(r0) * K, K, bc, K, 0.0f, orow, Nout);
    for (int m = r0; m < r1; m++) {
      const float s = psa[m];
      float* om = o + size_t(m) * Nout;
      for (int n = 0; n < Nout; n++) om[n] *= s * psb[n];
    }
  });
  return true;
}

// o(M,Nout) = sum over chunks of A_c B_c^T scaled by both operands' group scales.
void factored_product(float* o, const float* A, const float* B, const Factored& fa,
                      const Factored& fb, int M, int Nout, int K, int chunk, bool bf16_ok,
                      const bf16* na, const bf16* nb) {
  if (bf16_ok && narrow_gemm_hardware() &&
      factored_product_bf16(o, A, B, fa, fb, M, Nout, K, chunk, na, nb))
    return;
  static thread_local std::vector<float> ca, cb, part;
  part.resize(size_t(M) * Nout);
  for (int k0 = 0; k0 < K; k0 += chunk) {
    const int kc = std::min(chunk, K - k0);
    product(part.data(), columns(ca, A, M, K, k0, kc), columns(cb, B, Nout, K, k0, kc), M, Nout, kc,
            bf16_ok);
    const bool first = k0 == 0;
    const float* p = part.data();  // the caller's thread_local: not the workers' own
#pragma omp parallel for schedule(static) if (size_t(M) * Nout >= kParallelMin)
    for (int m = 0; m < M; m++) {
      const float sa = fa.at(m, k0);
      float* om = o + size_t(m) * Nout;
      const float* pm = p + size_t(m) * Nout;
      for (int n = 0; n < Nout; n++) {
        const float v = pm[n] * (sa * fb.at(n, k0));
        om[n] = first ? v : om[n] + v;
      }
    }
  }
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
  // The quantizer writes the bf16 GEMM's operands as it goes when that GEMM will take them.
  const auto takes_bf16 = [](const OperandRecipe& o) {
    return factored_scales(o) || dequantizes_to_bf16(o);
  };
  bf16 *na = nullptr, *nb = nullptr;
  if (narrow_gemm_hardware() && takes_bf16(ra) && takes_bf16(rb)) {
    na = narrow_buffer(0, size_t(M) * K);
    nb = narrow_buffer(1, size_t(Nout) * K);
  }
  Factored fa, fb;
  float post = quantize_operand(A, M, K, ra, stream(seed, role, 0), &fa, na) *
               quantize_operand(B, Nout, K, rb, stream(seed, role, 1), &fb, nb);
  int chunk = fa.on || fb.on ? common_chunk(fa, fb, K) : K;
  if (chunk == 0) {  // groups that do not nest: dequantize the codes after all
    for (auto [x, f, rows] : {std::tuple{A, &fa, M}, std::tuple{B, &fb, Nout}})
      for (int r = 0; r < rows && f->on; r++)
        for (int k = 0; k < K; k++) x[size_t(r) * K + k] *= f->at(r, k);
    fa.on = fb.on = false;
    chunk = K;
    na = nb = nullptr;  // the codes' copies, no longer the values
  }
  float* o = out;
  if (accumulate) o = grown(*tmp, size_t(M) * Nout);
  const bool bf16_ok = (fa.on || dequantizes_to_bf16(ra)) && (fb.on || dequantizes_to_bf16(rb));
  if (fa.on || fb.on)
    factored_product(o, A, B, fa, fb, M, Nout, K, chunk, bf16_ok, na, nb);
  else
    product(o, A, B, M, Nout, K, bf16_ok, na, nb);
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

void smooth_columns(float* x, int rows, int cols, const std::vector<float>& s, bool divide) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    float* row = x + size_t(r) * cols;
    if (divide)  // x / s, correctly rounded (x * (1/s) would round twice)
      for (int c = 0; c < cols; c++) row[c] /= s[size_t(c)];
    else
      for (int c = 0; c < cols; c++) row[c] *= s[size_t(c)];
  }
}

void matmul_forward_scaled(float* out, float* inp, float* w, const float* bias, int N, int C,
                           int OC, const QuantRecipe& r, uint64_t seed) {
  if (!r.smooth.empty()) {
    if (int(r.smooth.size()) != C)
      throw Error(
          strf("smoothing: %zu factors for a GEMM with %d input channels", r.smooth.size(), C));
    smooth_columns(inp, N, C, r.smooth, true);
    smooth_columns(w, OC, C, r.smooth, false);
  }
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

namespace {
template <typename T>
void backward_scaled(float* dinp, float* dw, float* dout, const T* inp, const T* w, int N, int C,
                     int OC, const QuantRecipe& r, uint64_t seed, ScaledScratch& s) {
  // wgrad first: its operands are transposed copies, so dout can then be quantized in place.
  float* a = grown(s.a, size_t(OC) * N);
  float* b = grown(s.b, size_t(C) * std::max(N, OC));
  transpose(a, dout, N, OC);
  transpose(b, inp, N, C);
  scaled_gemm(dw, a, b, OC, C, N, r.gemm[kWeightGrad], seed, kWeightGrad, true, &s.tmp);
  transpose(b, w, OC, C);
  scaled_gemm(dinp, dout, b, N, C, OC, r.gemm[kInputGrad], seed, kInputGrad, false, nullptr);
}
}  // namespace

void matmul_backward_scaled(float* dinp, float* dw, float* dout, const float* inp, const float* w,
                            int N, int C, int OC, const QuantRecipe& r, uint64_t seed,
                            ScaledScratch& s) {
  backward_scaled(dinp, dw, dout, inp, w, N, C, OC, r, seed, s);
}

void matmul_backward_scaled(float* dinp, float* dw, float* dout, const bf16* inp, const bf16* w,
                            int N, int C, int OC, const QuantRecipe& r, uint64_t seed,
                            ScaledScratch& s) {
  backward_scaled(dinp, dw, dout, inp, w, N, C, OC, r, seed, s);
}

}  // namespace tg::cpu
