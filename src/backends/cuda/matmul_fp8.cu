// matmul_fp8.cu: the FP8 block linears on the GPU (precision.mode = fp8) through the cuBLASLt
// wrapper (cublaslt.h).
//
//   forward  out(N,OC)  = inp(N,C) . W(OC,C)^T + bias     E4M3 x E4M3, fast accumulation
//   dgrad    dinp(N,C)  = dout(N,OC) . W(OC,C)             E5M2 x E4M3
//   wgrad    dW(OC,C)  += dout(N,OC)^T . inp(N,C)          E5M2 x E4M3, beta = 1
//   dbias    dbias(OC) += sum_rows dout                    from the unquantized bf16 dout
//
// fp32 accumulation, bf16 outputs, per-tensor scales (fp8_cast.cu). The semantics are the CPU
// emulation's (CpuBackend::matmul_forward_fp8 / matmul_backward_fp8): each operand is quantized
// q = sat(x * s), the product of the dequantized operands is accumulated in fp32 and rounded
// once to bf16 (plus bias, before the rounding). cuBLASLt computes
// D = descale_A * descale_B * sum_k(qA * qB) (+ bias) (+ beta * C): the same value up to the
// order of the fp32 operations.
//
// cuBLASLt is column-major; a row-major (R, K) matrix is a column-major (K, R) one. FP8 GEMMs
// on Hopper accept only the "TN" layout (A transposed, B not), i.e. both operands must be
// stored with the reduction dimension K contiguous. Hence the operands:
//
//   GEMM     m   n   k    A (stored K x M, op T)         B (stored K x N, op N)   D (ld)
//   forward  OC  N   C    W      (OC,C) E4M3, lda C      inp  (N,C)  E4M3, ldb C  out  (OC)
//   dgrad    C   N   OC   W^T    (C,OC) E4M3, lda OC     dout (N,OC) E5M2, ldb OC dinp (C)
//   wgrad    C   OC  N    inp^T  (C,N)  E4M3, lda N      dout^T (OC,N) E5M2, ldb N  dW (C)
//
// so the backward needs the transposed copies W^T, inp^T and dout^T (fp8_cast_transpose
// writes dout and dout^T in one pass). Requirements of cuBLASLt's FP8 kernels (cuBLAS docs,
// cublasLtMatmul, "FP8"): TN layout, compute type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F,
// pointers and leading dimensions 16-byte aligned (FP8: ld multiple of 16 elements). We ask
// N, C and OC to be multiples of 16 and every pointer 16-byte aligned, and check that up front
// (Fp8ShapeError names the GEMM and the shape); fp8_shape_ok() lets a backend decide first.
//
// GPUs without FP8 tensor cores (compute capability < 8.9, e.g. A100) take the fallback:
// each operand is quantized to its fp8 *value* stored in bf16 (fp8_qdq_bf16 with no descale:
// exact), and a bf16 cuBLASLt GEMM multiplies by alpha = descale_A * descale_B read from the
// device (CUBLASLT_POINTER_MODE_DEVICE): the same products and the same scaling as the FP8
// path, no transposed copies needed.
//
// Non-finite operands: the CPU turns a whole operand into NaN when its amax is non-finite;
// here every GEMM output is overwritten with NaN (fp8_poison_if_nonfinite) when an operand's
// amax is non-finite, which is the CPU's result (every product involves a NaN).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cublaslt.h"
#include "fp8.h"
#include "launch.h"

namespace tg::gpu {

namespace {

using fp8_detail::kThreads;

std::string shape_str(int N, int C, int OC) {
  return "N=" + std::to_string(N) + ", C=" + std::to_string(C) + ", OC=" + std::to_string(OC);
}

void check_shape(const char* gemm, int N, int C, int OC) {
  const std::string p = fp8_shape_problem(N, C, OC);
  if (!p.empty())
    throw Fp8ShapeError(std::string("fp8 ") + gemm + " GEMM with " + shape_str(N, C, OC) + ": " +
                        p);
}
void check_ptr(const char* gemm, const char* what, const void* p, int N, int C, int OC) {
  if (p != nullptr && pointer_alignment(p) < 16) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "fp8 %s GEMM with %s: %s pointer %p is not 16-byte aligned (cuBLASLt FP8 GEMMs "
             "need 16-byte aligned operands)",
             gemm, shape_str(N, C, OC).c_str(), what, p);
    throw Fp8ShapeError(buf);
  }
}
[[noreturn]] void no_algorithm(const char* gemm, int N, int C, int OC) {
  throw Error(std::string("cuBLASLt has no algorithm for the fp8 ") + gemm + " GEMM (" +
              shape_str(N, C, OC) + "): " + lt_last_refusal());
}

// Column-major D(m,n) = op(A) op(B) with bf16 D; scaling, scalars and epilogue left to fill.
LtGemm make_gemm(cudaDataType_t at, cudaDataType_t bt, bool ta, bool tb, int m, int n, int k,
                 const void* A, int lda, const void* B, int ldb, bf16* D, int ldd) {
  return lt_gemm_of(at, bt, CUDA_R_16BF, ta, tb, m, n, k, A, lda, B, ldb, D, ldd);
}

// FP8 operands: the descales as cuBLASLt's scale pointers, alpha = 1 and beta on the host.
void set_fp8_scaling(LtGemm& g, const float* a_scale, const float* b_scale, bool fast_accum,
                     bool accumulate) {
  static const float one = 1.0f, zero = 0.0f;
  g.a_scale = a_scale;
  g.b_scale = b_scale;
  g.fast_accum = fast_accum;
  g.alpha = &one;
  g.beta = accumulate ? &one : &zero;
}
// Fallback operands (fp8 values in bf16): alpha = the product of the descales, and beta, on
// the device.
void set_device_scalars(LtGemm& g, const float* alpha, const float* beta) {
  g.device_scalars = true;
  g.alpha = alpha;
  g.beta = beta;
}

// out(N,OC) = g + bias. Without an algorithm for the bias epilogue, the bias rows go into out
// first and g runs with beta = *one (the bias still enters the fp32 sum: one rounding).
bool run_with_bias(const Fp8GemmContext& ctx, LtGemm g, const bf16* bias, int N, int OC,
                   const float* one) {
  if (bias) {
    g.epilogue = LtEpilogue::kBias;
    g.bias = bias;
  }
  if (lt_matmul(ctx, g)) return true;
  if (!bias) return false;
  launch(fp8_detail::fill_bias_rows_kernel, fp8_grid(size_t(N) * OC / 8 + 1), kThreads, 0,
         ctx.stream, static_cast<bf16*>(g.D), bias, N, OC);
  TG_LAUNCH_CHECK();
  g.epilogue = LtEpilogue::kNone;
  g.bias = nullptr;
  g.beta = one;
  return lt_matmul(ctx, g);
}

// dbias(OC) += column sums of bf16 dout(N, OC) (unquantized; fp32 sums, one rounding).
void bias_backward_bf16(bf16* dbias, const bf16* dout, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  launch(fp8_detail::bias_backward_kernel, (OC + 31) / 32, 256, 0, stream, dbias, dout, N, OC);
  TG_LAUNCH_CHECK();
}

// The fallback's alphas of linear d from its descales: which 0 forward, 1 dgrad and wgrad.
void fallback_alpha(Fp8LinearDevice* d, int which, cudaStream_t stream) {
  launch(fp8_detail::fallback_alpha_kernel, 1, 32, 0, stream, d, which);
  TG_LAUNCH_CHECK();
}

// ---- the fallback GEMMs: bf16 operands holding fp8 values, alpha/beta on the device ----

// out(N,OC) = *alpha * vinp(N,C) . vw(OC,C)^T + bias, beta from *zero / *one (device).
void fallback_forward(const Fp8GemmContext& ctx, bf16* out, const bf16* vinp, const bf16* vw,
                      const bf16* bias, int N, int C, int OC, const float* alpha, const float* zero,
                      const float* one) {
  LtGemm g = make_gemm(CUDA_R_16BF, CUDA_R_16BF, true, false, OC, N, C, vw, C, vinp, C, out, OC);
  set_device_scalars(g, alpha, zero);
  if (!run_with_bias(ctx, g, bias, N, OC, one)) no_algorithm("forward (bf16 fallback)", N, C, OC);
}
// dinp(N,C) = *alpha * vdout(N,OC) . vw(OC,C): W row-major (OC,C) is column-major C x OC, op N.
void fallback_dgrad(const Fp8GemmContext& ctx, bf16* dinp, const bf16* vdout, const bf16* vw, int N,
                    int C, int OC, const float* alpha, const float* zero) {
  LtGemm g = make_gemm(CUDA_R_16BF, CUDA_R_16BF, false, false, C, N, OC, vw, C, vdout, OC, dinp, C);
  set_device_scalars(g, alpha, zero);
  if (!lt_matmul(ctx, g)) no_algorithm("dgrad (bf16 fallback)", N, C, OC);
}
// dW(OC,C) += *alpha * vdout(N,OC)^T . vinp(N,C) (beta from *beta: the device 1 or 0).
void fallback_wgrad(const Fp8GemmContext& ctx, bf16* dw, const bf16* vdout, const bf16* vinp, int N,
                    int C, int OC, const float* alpha, const float* beta) {
  LtGemm g = make_gemm(CUDA_R_16BF, CUDA_R_16BF, false, true, C, OC, N, vinp, C, vdout, OC, dw, C);
  set_device_scalars(g, alpha, beta);
  if (!lt_matmul(ctx, g)) no_algorithm("wgrad (bf16 fallback)", N, C, OC);
}

// Quantizes x (rows, cols) with quant (current: own amax; else quant.scale) into st. FP8 path:
// q (may be null) and qT (may be null) as fp8 codes; the amax of x goes to st->amax either
// way. Fallback: q receives the fp8 values in bf16 (qT unused).
void quantize(const Fp8GemmContext& ctx, uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols,
              Fp8Format fmt, const Fp8Quant& quant, Fp8TensorScale* st) {
  const size_t n = size_t(rows) * size_t(cols);
  if (ctx.path == Fp8Path::kFp8) {
    if (quant.current)
      fp8_quantize_current(q, qT, x, rows, cols, fmt, quant.margin, st, ctx.stream);
    else
      fp8_quantize_delayed(q, qT, x, rows, cols, fmt, quant.scale, st, ctx.stream);
    return;
  }
  bf16* v = reinterpret_cast<bf16*>(q);
  if (quant.current) {
    fp8_amax(&st->amax, x, n, ctx.stream);
    fp8_compute_scale(st, fmt, quant.margin, ctx.stream);
    fp8_qdq_bf16(v, x, n, fmt, &st->scale, nullptr, nullptr, &st->amax, ctx.stream);
  } else {
    fp8_set_scale(st, quant.scale, ctx.stream);
    fp8_qdq_bf16(v, x, n, fmt, &st->scale, nullptr, &st->amax, nullptr, ctx.stream);
  }
}

// Re-quantizes x with a fixed scale (the forward's), keeping st->amax (the forward's amax,
// used for poisoning): FP8 path into qT (transposed), fallback into q as bf16 values.
void requantize(const Fp8GemmContext& ctx, uint8_t* q, uint8_t* qT, const bf16* x, int rows,
                int cols, float scale, Fp8TensorScale* st) {
  fp8_set_scale(st, scale, ctx.stream);
  if (ctx.path == Fp8Path::kFp8)
    fp8_cast_transpose(nullptr, qT, x, rows, cols, Fp8Format::E4M3, &st->scale, nullptr, nullptr,
                       ctx.stream);
  else
    fp8_qdq_bf16(reinterpret_cast<bf16*>(q), x, size_t(rows) * size_t(cols), Fp8Format::E4M3,
                 &st->scale, nullptr, nullptr, nullptr, ctx.stream);
}

// This call's operand buffers in the plan's scratch.
struct Operands {
  uint8_t *a, *b, *g, *gT;
};
Operands check_plan(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin, int N, int C, int OC,
                    bool backward) {
  if (ctx.path != plan.path) throw Error("fp8: the plan was made for the other GEMM path");
  if (lin < 0 || lin >= plan.n_linears)
    throw Error("fp8: linear index " + std::to_string(lin) + " out of range (the plan has " +
                std::to_string(plan.n_linears) + ")");
  const Fp8ScratchLayout l = fp8_scratch_layout(plan.path, Fp8LinearShape{N, C, OC});
  const size_t need = backward ? l.total : l.g;
  if (need > plan.scratch_bytes || plan.scratch == nullptr)
    throw Error("fp8: linear " + shape_str(N, C, OC) + " needs " + std::to_string(need) +
                " scratch bytes, the plan has " + std::to_string(plan.scratch_bytes));
  return Operands{plan.scratch + l.a, plan.scratch + l.b, plan.scratch + l.g,
                  plan.path == Fp8Path::kFp8 ? plan.scratch + l.gT : nullptr};
}

// A synchronous copy after the stream's work (the stream may be non-blocking, which the legacy
// stream's cudaMemcpy does not wait for): off the hot path, the backend reads its own reports.
Fp8LinearDevice read_state(const Fp8Plan& plan, int lin, cudaStream_t stream) {
  Fp8LinearDevice h{};
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  TG_CUDA_CHECK(cudaMemcpy(&h, plan.dev + lin, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

const char* fp8_path_name(Fp8Path p) {
  return p == Fp8Path::kFp8 ? "fp8 tensor cores (cuBLASLt E4M3/E5M2 GEMMs)"
                            : "fp8 emulated: quantized values in bf16, bf16 GEMMs (no FP8 "
                              "tensor cores below compute capability 8.9)";
}

Fp8Path fp8_path_for_device(int device) {
  int major = 0, minor = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor >= 89 ? Fp8Path::kFp8 : Fp8Path::kBf16Fallback;
}

std::string fp8_shape_problem(int N, int C, int OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return shape_str(N, C, OC) + " must be positive";
  const char* names[3] = {"N", "C", "OC"};
  const int v[3] = {N, C, OC};
  for (int i = 0; i < 3; i++)
    if (v[i] % 16)
      return std::string(names[i]) + "=" + std::to_string(v[i]) +
             " is not a multiple of 16 (cuBLASLt FP8 GEMMs need 16-byte aligned leading "
             "dimensions, and the backward's transposed copies have N as theirs)";
  return "";
}

void fp8_gemm_forward(const Fp8GemmContext& ctx, bf16* out, const uint8_t* qinp, const uint8_t* qw,
                      const bf16* bias, int N, int C, int OC, const float* descale_inp,
                      const float* descale_w) {
  const char* nm = "forward";
  check_shape(nm, N, C, OC);
  check_ptr(nm, "out", out, N, C, OC);
  check_ptr(nm, "inp (E4M3)", qinp, N, C, OC);
  check_ptr(nm, "weight (E4M3)", qw, N, C, OC);
  check_ptr(nm, "bias", bias, N, C, OC);
  LtGemm g =
      make_gemm(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, true, false, OC, N, C, qw, C, qinp, C, out, OC);
  set_fp8_scaling(g, descale_w, descale_inp, ctx.fast_accum_forward, false);
  static const float one = 1.0f;
  if (!run_with_bias(ctx, g, bias, N, OC, &one)) no_algorithm(nm, N, C, OC);
}

void fp8_gemm_dgrad(const Fp8GemmContext& ctx, bf16* dinp, const uint8_t* qdout, const uint8_t* qwT,
                    int N, int C, int OC, const float* descale_dout, const float* descale_w) {
  const char* nm = "dgrad";
  check_shape(nm, N, C, OC);
  check_ptr(nm, "dinp", dinp, N, C, OC);
  check_ptr(nm, "dout (E5M2)", qdout, N, C, OC);
  check_ptr(nm, "weight^T (E4M3)", qwT, N, C, OC);
  LtGemm g =
      make_gemm(CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, true, false, C, N, OC, qwT, OC, qdout, OC, dinp, C);
  set_fp8_scaling(g, descale_w, descale_dout, ctx.fast_accum_backward, false);
  if (!lt_matmul(ctx, g)) no_algorithm(nm, N, C, OC);
}

void fp8_gemm_wgrad(const Fp8GemmContext& ctx, bf16* dw, const uint8_t* qdoutT,
                    const uint8_t* qinpT, int N, int C, int OC, const float* descale_dout,
                    const float* descale_inp, bool accumulate) {
  const char* nm = "wgrad";
  check_shape(nm, N, C, OC);
  check_ptr(nm, "dweight", dw, N, C, OC);
  check_ptr(nm, "dout^T (E5M2)", qdoutT, N, C, OC);
  check_ptr(nm, "inp^T (E4M3)", qinpT, N, C, OC);
  LtGemm g =
      make_gemm(CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, true, false, C, OC, N, qinpT, N, qdoutT, N, dw, C);
  set_fp8_scaling(g, descale_inp, descale_dout, ctx.fast_accum_backward, accumulate);
  if (!lt_matmul(ctx, g)) no_algorithm(nm, N, C, OC);
}

Fp8ScratchLayout fp8_scratch_layout(Fp8Path path, const Fp8LinearShape& s) {
  const size_t e = path == Fp8Path::kFp8 ? 1 : 2;
  const size_t N = size_t(s.N), C = size_t(s.C), OC = size_t(s.OC);
  Fp8ScratchLayout l;
  l.a = 0;
  l.b = l.a + fp8_align256(N * C * e);
  l.g = l.b + fp8_align256(OC * C * e);
  l.gT = l.g + fp8_align256(N * OC * e);
  l.total = l.gT + (path == Fp8Path::kFp8 ? fp8_align256(N * OC) : 0);
  return l;
}

size_t fp8_plan_scratch_bytes(Fp8Path path, const Fp8LinearShape* shapes, int n) {
  size_t m = 0;
  for (int i = 0; i < n; i++) m = std::max(m, fp8_scratch_layout(path, shapes[i]).total);
  return m;
}

Fp8LinearDevice fp8_initial_state() {
  Fp8LinearDevice init{};
  for (auto& t : init.t) {
    t = Fp8TensorScale{};
    t.scale = t.descale = 1.f;
  }
  for (float& a : init.alpha) a = 1.f;
  init.zero = 0.f;
  init.one = 1.f;
  return init;
}

int fp8_plan_slot(Fp8Plan& plan, const void* weight) {
  const auto it = plan.slots.find(weight);
  if (it != plan.slots.end()) return it->second;
  const int next = int(plan.slots.size());
  if (next >= plan.n_linears)
    throw Error("fp8: more distinct FP8 linears than the plan's " + std::to_string(plan.n_linears));
  plan.slots.emplace(weight, next);
  return next;
}

Fp8Plan fp8_plan_create(Fp8Path path, int n_linears, size_t scratch_bytes, void* external_scratch) {
  Fp8Plan p;
  p.path = path;
  p.n_linears = n_linears;
  p.scratch_bytes = scratch_bytes;
  if (external_scratch) {
    if (pointer_alignment(external_scratch) < 256)
      throw Error("fp8_plan_create: the external scratch is not 256-byte aligned");
    p.scratch = static_cast<uint8_t*>(external_scratch);
  } else if (scratch_bytes) {
    TG_CUDA_CHECK(cudaMalloc(&p.owned_scratch, scratch_bytes));
    p.scratch = static_cast<uint8_t*>(p.owned_scratch);
  }
  if (n_linears > 0) {
    TG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p.dev), fp8_plan_state_bytes(n_linears)));
    const std::vector<Fp8LinearDevice> h(size_t(n_linears), fp8_initial_state());
    TG_CUDA_CHECK(
        cudaMemcpy(p.dev, h.data(), fp8_plan_state_bytes(n_linears), cudaMemcpyHostToDevice));
    // From pageable memory the copy may still be in flight on the legacy stream when cudaMemcpy
    // returns, and a non-blocking stream using the plan would not wait for it.
    TG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  return p;
}

// The plan's work may run on any stream: the device finishes all of it before the memory goes.
void fp8_plan_destroy(Fp8Plan& p) {
  if (p.dev || p.owned_scratch) cudaDeviceSynchronize();
  if (p.dev) cudaFree(p.dev);
  if (p.owned_scratch) cudaFree(p.owned_scratch);
  p = Fp8Plan{};
}

void fp8_linear_forward(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin, bf16* out,
                        const bf16* inp, const bf16* w, const bf16* bias, int N, int C, int OC,
                        const Fp8Quant quant[2]) {
  if (ctx.path == Fp8Path::kFp8) check_shape("forward", N, C, OC);
  const Operands o = check_plan(ctx, plan, lin, N, C, OC, false);
  Fp8LinearDevice* d = plan.dev + lin;
  quantize(ctx, o.a, nullptr, inp, N, C, Fp8Format::E4M3, quant[0], &d->t[kFp8Inp]);
  quantize(ctx, o.b, nullptr, w, OC, C, Fp8Format::E4M3, quant[1], &d->t[kFp8Weight]);
  if (ctx.path == Fp8Path::kFp8) {
    fp8_gemm_forward(ctx, out, o.a, o.b, bias, N, C, OC, &d->t[kFp8Inp].descale,
                     &d->t[kFp8Weight].descale);
  } else {
    fallback_alpha(d, 0, ctx.stream);
    fallback_forward(ctx, out, reinterpret_cast<const bf16*>(o.a),
                     reinterpret_cast<const bf16*>(o.b), bias, N, C, OC, &d->alpha[0], &d->zero,
                     &d->one);
  }
  fp8_poison_if_nonfinite(out, size_t(N) * OC, &d->t[kFp8Inp].amax, &d->t[kFp8Weight].amax,
                          ctx.stream);
}

void fp8_linear_backward(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin, bf16* dinp,
                         bf16* dw, bf16* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                         int N, int C, int OC, const Fp8Quant& gq, float inp_scale, float w_scale) {
  if (ctx.path == Fp8Path::kFp8) check_shape("backward", N, C, OC);
  const Operands o = check_plan(ctx, plan, lin, N, C, OC, true);
  Fp8LinearDevice* d = plan.dev + lin;
  if (dbias) bias_backward_bf16(dbias, dout, N, OC, ctx.stream);
  quantize(ctx, o.g, o.gT, dout, N, OC, Fp8Format::E5M2, gq, &d->t[kFp8Grad]);
  requantize(ctx, o.b, o.b, w, OC, C, w_scale, &d->t[kFp8Weight]);
  requantize(ctx, o.a, o.a, inp, N, C, inp_scale, &d->t[kFp8Inp]);
  if (ctx.path == Fp8Path::kFp8) {
    fp8_gemm_dgrad(ctx, dinp, o.g, o.b, N, C, OC, &d->t[kFp8Grad].descale,
                   &d->t[kFp8Weight].descale);
    fp8_gemm_wgrad(ctx, dw, o.gT, o.a, N, C, OC, &d->t[kFp8Grad].descale, &d->t[kFp8Inp].descale,
                   true);
  } else {
    fallback_alpha(d, 1, ctx.stream);
    const auto* vg = reinterpret_cast<const bf16*>(o.g);
    fallback_dgrad(ctx, dinp, vg, reinterpret_cast<const bf16*>(o.b), N, C, OC, &d->alpha[1],
                   &d->zero);
    fallback_wgrad(ctx, dw, vg, reinterpret_cast<const bf16*>(o.a), N, C, OC, &d->alpha[2],
                   &d->one);
  }
  fp8_poison_if_nonfinite(dinp, size_t(N) * C, &d->t[kFp8Grad].amax, &d->t[kFp8Weight].amax,
                          ctx.stream);
  fp8_poison_if_nonfinite(dw, size_t(OC) * C, &d->t[kFp8Grad].amax, &d->t[kFp8Inp].amax,
                          ctx.stream);
}

Fp8Report fp8_report(const Fp8LinearDevice& h, bool backward) {
  Fp8Report r;
  if (backward) {
    r.amax[0] = h.t[kFp8Grad].amax;
    r.scale[0] = h.t[kFp8Grad].scale;
  } else {
    r.amax[0] = h.t[kFp8Inp].amax;
    r.scale[0] = h.t[kFp8Inp].scale;
    r.amax[1] = h.t[kFp8Weight].amax;
    r.scale[1] = h.t[kFp8Weight].scale;
  }
  return r;
}

Fp8Report fp8_forward_report(const Fp8Plan& plan, int lin, cudaStream_t stream) {
  return fp8_report(read_state(plan, lin, stream), false);
}
Fp8Report fp8_backward_report(const Fp8Plan& plan, int lin, cudaStream_t stream) {
  return fp8_report(read_state(plan, lin, stream), true);
}

}  // namespace tg::gpu
