// launchers_checked.cpp: every kernel of kernels/*.cuh, through its launcher in
// src/backends/cuda/*.cu, under the checks of the kernels_checked binary (racecheck, memcheck,
// initcheck: tests/cuda/memory_check.h), on small shapes with random non-zero inputs in device
// memory from the emulated cudaMalloc: each element type, the packed and scalar paths, misaligned
// pointers, ragged edges (rows, columns and sequence lengths that fill no whole warp, block or
// tile), both GEMM paths, every head size, both FP8 paths, every block-scaled preset operand
// (values and native codes) and the device operand statistics. Buffers a kernel accumulates
// into start written, as the backend's do; buffers it only writes start unwritten, so that a
// read of them is reported. A case passes when no check reports anything; the numbers are
// the emulated tests' business (kernels_emulated compares them with the CPU). The last case
// fails when a kernel of kernels/*.cuh never ran here.
#include "checked_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "kernels/quantize_blocks.cuh"
#include "src/backends/cuda/operand_stats.h"
#include "src/backends/cuda/scaled.h"
#include "src/numerics/recipe.h"
#include "src/numerics/state_format.h"
#include "src/numerics/wire_format.h"

namespace emu_test {}  // namespace emu_test

using namespace emu_test;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(2024);
  return r;
}
template <typename E>
std::unique_ptr<Dev<E>> rnd(size_t n, float scale = 1.f) {
  return random_dev<E>(n, rng(), scale);
}
// n zeros of E on the device (a buffer that a kernel accumulates into).
template <typename E>
std::unique_ptr<Dev<E>> zeros(size_t n) {
  auto d = std::make_unique<Dev<E>>(n);
  REQUIRE(cudaMemset(d->p, 0, n * sizeof(E)) == cudaSuccess);
  return d;
}

template <typename E>
void encoder_case(gpu::Ctx& c, int B, int T, int C, int V) {
  std::vector<int32_t> tok(size_t(B) * T);
  for (int32_t& t : tok) t = int32_t(rng()() % unsigned(V));
  Dev<int32_t> tokens(tok);
  auto wte = rnd<E>(size_t(V) * C), wpe = rnd<E>(size_t(T) * C), dout = rnd<E>(size_t(B) * T * C);
  Dev<E> out(size_t(B) * T * C);
  auto dwte = zeros<E>(size_t(V) * C), dwpe = zeros<E>(size_t(T) * C);
  gpu::encoder_forward(c, dtype_of<E>(), out.p, tokens.p, wte->p, wpe->p, B, T, C);
  gpu::encoder_backward(c, dtype_of<E>(), dwte->p, dwpe->p, dout->p, tokens.p, nullptr, B, T, C);
  gpu::encoder_backward(c, dtype_of<E>(), dwte->p, dwpe->p, dout->p, tokens.p, tok.data(), B, T, C);
}

// Element-wise ops on n elements at offset `skew` of their buffers (1: no 16-byte packs).
template <typename E>
void elementwise_case(gpu::Ctx& c, size_t n, size_t skew) {
  auto a = rnd<E>(n + skew), b = rnd<E>(n + skew);
  Dev<E> out(n + skew), dinp(n + skew);
  auto amax = zeros<unsigned>(1);  // GELU taking its output's amax (Backend's InputAmax)
  gpu::residual_forward(c, dtype_of<E>(), out.p + skew, a->p + skew, b->p + skew, n);
  gpu::gelu_forward(c, dtype_of<E>(), out.p + skew, a->p + skew, n, amax->p);
  gpu::gelu_forward(c, dtype_of<E>(), out.p + skew, a->p + skew, n);
  gpu::gelu_backward(c, dtype_of<E>(), dinp.p + skew, a->p + skew, out.p + skew, n);
}

TEST_CASE("checked: encoder, residual, GELU (packed, scalar, ragged)") {
  gpu::Ctx& c = checked_ctx();
  take_reports();
  FOR_TYPES({
    encoder_case<E>(c, 2, 5, 40, 11);
    encoder_case<E>(c, 1, 3, 300, 4);   // C over one block of threads
    encoder_case<E>(c, 2, 40, 16, 2);   // buckets of over 32 positions
    encoder_case<E>(c, 4, 100, 16, 3);  // a block's over the 256 it stages
    for (size_t n : {size_t(1024), size_t(1003)})
      for (size_t skew : {size_t(0), size_t(1)}) elementwise_case<E>(c, n, skew);
  })
  expect_clean();
}

template <typename E>
void adamw_case(gpu::Ctx& c, size_t n, bool stochastic) {
  auto params = rnd<E>(n), grads = rnd<E>(n);
  auto master = rnd<float>(n), m = rnd<float>(n, 0.1f), v = zeros<float>(n);
  AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3, Rounding{stochastic, 7, 11}};
  gpu::adamw(c, dtype_of<E>(), params->p, master->p, grads->p, m->p, v->p, n, a);
  // Moments as 16-bit codes (bf16-sr m, fp16 v): every code read and written once.
  auto m16 = zeros<uint16_t>(n), v16 = zeros<uint16_t>(n);
  AdamWArgs a16 = a;
  a16.m_format = moment_format(StateFormat::BF16SR, false);
  a16.v_format = moment_format(StateFormat::FP16, true);
  gpu::adamw(c, dtype_of<E>(), params->p, master->p, grads->p, m16->p, v16->p, n, a16);
  // The device loss scaler's decision from the fused norm pass, then AdamW reading it.
  Dev<float> check(2);
  gpu::norm(c, dtype_of<E>(), grads->p, n, 0.25f, check.p);
  LossScaleDevice host{};
  host.state.scale = 1024.0;
  Dev<LossScaleDevice> d(std::vector<LossScaleDevice>{host});
  LossScaleParams p;
  p.dynamic = true;
  gpu::loss_scale_decide(c, d.p, check.p, p, 1.0);
  gpu::adamw(c, dtype_of<E>(), params->p, master->p, grads->p, m->p, v->p, n, a, d.p);
}

TEST_CASE("checked: AdamW (host and device factors), conversions, norms, classifier") {
  gpu::Ctx& c = checked_ctx();
  take_reports();
  FOR_TYPES({
    adamw_case<E>(c, 1000, false);  // the packed kernels (4 elements a thread)
    adamw_case<E>(c, 1000, true);
    adamw_case<E>(c, 517, true);  // the kernels of one element a thread
    adamw_case<E>(c, 517, false);
  })
  const DType types[] = {DType::F32, DType::BF16, DType::F16};
  for (DType dst : types)
    for (DType src : types)
      for (bool sr : {false, true}) {
        const size_t n = 333;
        auto s = rnd<float>(n);  // every source type reads bytes that were written
        Dev<float> d(n);
        gpu::convert(c, dst, d.p, src, s->p, n, Rounding{sr, 5, 9});
      }
  // fp32 dlogits in place, and 16-bit ones over the first half of each fp32 row (the lm_head's
  // layout). The row staged in shared memory (kernels/classifier.cuh's smem kernel) in 16-byte
  // packs (Vp 64, 1152) or not (Vp 90), past the default 48 KiB (Vp 12800) up to the most a
  // block may opt into (Vp 58048 at V = Vp); wider rows (Vp 58112) through the kernel that
  // reads each chunk of its row before it writes over it (many of its chunks).
  for (int Vp : {64, 90, 1152, 12800, 58048, 58112})
    for (int V : {Vp - 14, Vp})
      for (DType g : types) {
        const int N = 3;
        auto logits = rnd<float>(size_t(N) * Vp, 3.f);
        Dev<float> losses(N);
        Dev<int32_t> targets(std::vector<int32_t>{0, V - 1, V / 2});
        const size_t ld = g == DType::F32 ? size_t(Vp) : size_t(2) * Vp;
        gpu::classifier(c, logits->p, losses.p, targets.p, g, logits->p, ld, 0.f, N, V, Vp);
        gpu::classifier(c, logits->p, losses.p, targets.p, g, logits->p, ld, 1.f / N, N, V, Vp);
      }
  expect_clean();
}

TEST_CASE("checked: gradient wire: encode, sum, decode (every format, ragged rows)") {
  gpu::Ctx& c = checked_ctx();
  take_reports();
  for (WireFormat f :
       {WireFormat::FP32, WireFormat::BF16, WireFormat::FP8E4M3, WireFormat::FP8E5M2})
    for (size_t part : {size_t(1), size_t(130), size_t(1001)}) {
      const size_t rows = 3;
      auto x = rnd<float>(rows * part);
      Dev<uint8_t> enc(rows * wire_bytes(part, f));  // written whole by the encoding (padding too)
      Dev<float> sum(part), dec(rows * part);
      gpu::wire_encode(c, x->p, part, rows, f, enc.p);
      gpu::wire_sum(c, enc.p, part, rows, f, sum.p);
      gpu::wire_decode(c, enc.p, part, rows, f, dec.p);
    }
  expect_clean();
}

template <typename E>
void layernorm_case(gpu::Ctx& c, int N, int C) {
  const size_t n = size_t(N) * C;
  auto inp = rnd<E>(n), a = rnd<E>(n), w = rnd<E>(C), b = rnd<E>(C), dout = rnd<E>(n);
  Dev<E> out(n), res(n);
  Dev<float> mean(N), rstd(N);
  auto dinp = zeros<E>(n), dw = zeros<E>(C), db = zeros<E>(C);
  auto amax = zeros<unsigned>(2);  // out's amax (Backend's InputAmax), and without
  gpu::layernorm_forward(c, dtype_of<E>(), out.p, mean.p, rstd.p, inp->p, w->p, b->p, N, C);
  gpu::layernorm_forward(c, dtype_of<E>(), out.p, mean.p, rstd.p, inp->p, w->p, b->p, N, C,
                         amax->p);
  gpu::residual_layernorm_forward(c, dtype_of<E>(), res.p, out.p, mean.p, rstd.p, a->p, inp->p,
                                  w->p, b->p, N, C, amax->p + 1);
  gpu::residual_layernorm_forward(c, dtype_of<E>(), res.p, out.p, mean.p, rstd.p, a->p, inp->p,
                                  w->p, b->p, N, C);
  gpu::layernorm_backward(c, dtype_of<E>(), dinp->p, dw->p, db->p, dout->p, res.p, w->p, mean.p,
                          rstd.p, N, C);
}

TEST_CASE("checked: layernorm forward, fused residual + layernorm, backward") {
  gpu::Ctx& c = checked_ctx();
  take_reports();
  FOR_TYPES({
    layernorm_case<E>(c, 7, 40);  // rows that fill no block of 8 warps, C below a warp's 64
    layernorm_case<E>(c, 33, 96);
    layernorm_case<E>(c, 70, 300);  // more than one chunk of 64 rows, C over a block
    layernorm_case<E>(c, 20, 2000);  // the fused backward with fewer than 8 warps per block
    layernorm_case<E>(c, 2, 8200);  // rows too wide to stage in shared memory: the plain kernels
  })
  expect_clean();
}

// D(M,N) = op(A) op(B) (+ bias) (+ beta D) on one path; D is written first only when beta != 0
// (a GEMM with beta = 0 must not read it).
template <typename E, typename D>
void gemm_case(bool fallback, bool ta, bool tb, int M, int N, int K, float beta, bool bias) {
  gpu::Ctx c = checked_ctx();
  c.opt.gemm_fallback = fallback;
  auto A = rnd<E>(size_t(M) * K), B = rnd<E>(size_t(K) * N);
  auto bv = rnd<D>(N);
  auto out = beta != 0.f ? rnd<D>(size_t(M) * N) : std::make_unique<Dev<D>>(size_t(M) * N);
  gpu::gemm(c, ta, tb, M, N, K, dtype_of<E>(), A->p, ta ? M : K, B->p, tb ? K : N, dtype_of<D>(),
            out->p, N, beta, bias ? bv->p : nullptr);
}

template <typename E>
void linear_case(int M, int N, int K) {
  for (bool fallback : {false, true})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) gemm_case<E, E>(fallback, ta, tb, M, N, K, 0.f, !ta);
  gemm_case<E, E>(true, false, true, M, N, K, 1.f, true);
  gemm_case<E, E>(false, true, false, M, N, K, 1.f, false);
  gemm_case<E, float>(true, false, true, M, N, K, 0.f, false);  // the lm_head's fp32 logits
  gemm_case<E, float>(false, false, true, M, N, K, 0.f, false);
  gpu::Ctx c = checked_ctx();
  c.opt.gelu_epilogue = true;
  auto A = rnd<E>(size_t(M) * K), W = rnd<E>(size_t(N) * K), bias = rnd<E>(N);
  Dev<E> pre(size_t(M) * N), out(size_t(M) * N);
  gpu::gemm_bias_gelu(c, M, N, K, dtype_of<E>(), A->p, W->p, bias->p, pre.p, out.p);
  auto dout = rnd<E>(size_t(M) * N);
  auto dbias = zeros<E>(N);
  gpu::bias_backward(c, dtype_of<E>(), dbias->p, dout->p, M, N);
}

TEST_CASE("checked: GEMMs on both paths (epilogue kernel), GELU epilogue, bias backward") {
  take_reports();
  FOR_TYPES({
    linear_case<E>(13, 24, 40);
    linear_case<E>(70, 9, 16);  // more than one chunk of 64 rows
  })
  expect_clean();
}

template <typename E>
void attention_case(int B, int T, int NH, int hs) {
  const int C = NH * hs;
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C;
  auto qkv = rnd<E>(nqkv), dout = rnd<E>(nout);
  {
    gpu::Ctx c = checked_ctx();
    Dev<E> out(nout), att(size_t(B) * NH * T * T), dqkv(nqkv);
    auto amax = zeros<unsigned>(1);  // out's amax (Backend's InputAmax)
    gpu::attention_forward(c, dtype_of<E>(), out.p, att.p, qkv->p, B, T, C, NH, amax->p);
    gpu::attention_backward(c, dtype_of<E>(), dqkv.p, dout->p, qkv->p, att.p, B, T, C, NH);
  }
  {  // the softmax kernels for rows too long to stage: a device with no shared memory to spare
    gpu::Ctx c = checked_ctx();
    c.prop.sharedMemPerBlock = 0;
    Dev<E> out(nout), att(size_t(B) * NH * T * T), dqkv(nqkv);
    gpu::attention_forward(c, dtype_of<E>(), out.p, att.p, qkv->p, B, T, C, NH);
    gpu::attention_backward(c, dtype_of<E>(), dqkv.p, dout->p, qkv->p, att.p, B, T, C, NH);
  }
}

TEST_CASE("checked: attention: permutes, softmax, every head size") {
  take_reports();
  FOR_TYPES({
    for (int hs : {32, 64, 96, 128}) attention_case<E>(1, 37, 2, hs);  // T: a partial tile
    attention_case<E>(2, 64, 1, 32);                                   // whole tiles
  })
  expect_clean();
}

// ---- per-tensor FP8 linears (the fp8 mode: delayed or current scales, amaxes out) ----

// One per-tensor linear's forward and backward on a GPU of compute capability `major` (8: the
// portable path; 9: cuBLASLt's SCALAR_32F FP8 GEMMs), its amaxes into a slot (current scales:
// the backward reads the input and weight at the amaxes the forward kept; the forward its input
// at the amax GELU took as it wrote it).
void tensor_linear_case(int major, bool current, int N, int C, int OC) {
  gpu::Ctx c = checked_ctx();
  c.prop.major = major;
  gpu::native_forget_checks();
  const QuantRecipe r =
      fp8_tensor_recipe(current ? ScaleSource::Current : ScaleSource::Delayed, 4, 1, {});
  const ScaledLinear q{&r, 7, {0, {4.f, 16.f, 8.f}, 1}};
  auto inp = rnd<bf16>(size_t(N) * C), w = rnd<bf16>(size_t(OC) * C), bias = rnd<bf16>(OC);
  auto dout = rnd<bf16>(size_t(N) * OC);
  Dev<bf16> out(size_t(N) * OC), dinp(size_t(N) * C);
  auto dw = zeros<bf16>(size_t(OC) * C), dbias = zeros<bf16>(OC);
  auto slot = zeros<unsigned>(kTensorOperands), kept = zeros<unsigned>(2);
  auto produced = zeros<unsigned>(1);
  Dev<bf16> x(size_t(N) * C);
  gpu::gelu_forward(c, DType::BF16, x.p, inp->p, size_t(N) * C, produced->p);
  gpu::scaled_linear_forward(c, DType::BF16, out.p, x.p, w->p, bias->p, N, C, OC, q, slot->p,
                             kept->p, produced->p);
  gpu::scaled_linear_backward(c, DType::BF16, dinp.p, dw->p, dbias->p, dout->p, x.p, w->p, N, C,
                              OC, q, slot->p, kept->p);
}

TEST_CASE("checked: per-tensor FP8 linears forward and backward, portable and native") {
  take_reports();
  for (int major : {8, 9})
    for (bool current : {false, true}) tensor_linear_case(major, current, 32, 48, 80);
  expect_clean();
  gpu::native_forget_checks();
}

// ---- block-scaled quantization, linears, operand statistics ----

// Every distinct operand recipe of the block-scaled presets, with and without their options.
std::vector<OperandRecipe> preset_operands() {
  std::vector<OperandRecipe> out;
  std::vector<RecipeOptions> opts(3);
  opts[1].pow2_scales = true, opts[1].grad_format = tg::GradFormat::E5M2;
  opts[1].scale_rule = tg::ScaleRuleChoice::Ceil;
  opts[2].stochastic_grads = false, opts[2].hadamard = false, opts[2].weight_2d = false;
  for (const char* mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"})
    for (const RecipeOptions& o : opts)
      for (const GemmRecipe& g : block_scaled_recipe(mode, o).gemm)
        for (const OperandRecipe* x : {&g.a, &g.b}) {
          bool seen = false;
          for (const OperandRecipe& y : out) seen |= std::memcmp(&y, x, sizeof y) == 0;
          if (!seen) out.push_back(*x);
        }
  return out;
}

// One operand recipe over a (rows, cols) source of E, plain and transposed: its dequantized
// values (fp32, and bf16 where exact) and, where a native scale mode expresses it, its codes
// and scale tensor. Rotations of up to 32 points are read through; larger ones staged.
template <typename E>
void quantize_case(gpu::Ctx& c, const OperandRecipe& o, int rows, int cols, uint64_t seed) {
  const size_t n = size_t(rows) * cols;
  auto src = rnd<E>(n, 0.5f);
  Dev<float> out(n), staged(n), post(2);
  Dev<bf16> outb(n);
  for (bool transposed : {false, true}) {
    gpu::OperandSource x{dtype_of<E>(), src->p, transposed};
    if (o.transform == Transform::Hadamard) {
      if (gpu::quant::rotates_in_warp(o.transform_size)) {
        x.rotate = o.transform_size, x.rotate_seed = seed;
      } else {
        gpu::stage_operand(c, staged.p, dtype_of<E>(), src->p, transposed, rows, cols);
        gpu::hadamard_rows(c, staged.p, rows, cols, o.transform_size, seed);
        x = gpu::fp32_operand(staged.p);
      }
    }
    gpu::quantize_dequantize(c, o, seed, x, rows, cols, DType::F32, out.p, post.p);
    if (tg::dequantizes_to_bf16(o))
      gpu::quantize_dequantize(c, o, seed, x, rows, cols, DType::BF16, outb.p, post.p + 1);
    cublasLtMatmulMatrixScale_t mode;
    if (!gpu::native_operand_mode(o, &mode).empty() || cols % 2) continue;
    Dev<uint8_t> codes(n), scales(gpu::native_scale_bytes(o, mode, rows, cols));
    gpu::quantize_codes(c, o, mode, seed, x, rows, cols, codes.p, scales.p, post.p);
  }
}

TEST_CASE("checked: block quantizer, every preset operand: values and native codes") {
  gpu::Ctx& c = checked_ctx();
  take_reports();
  uint64_t seed = 1;
  for (const OperandRecipe& o : preset_operands()) {
    quantize_case<float>(c, o, 37, 100, ++seed);  // partial blocks, tiles and 128-row tiles
    quantize_case<bf16>(c, o, 48, 160, ++seed);
  }
  quantize_case<f16>(c, preset_operands()[0], 20, 48, ++seed);
  expect_clean();
}

template <typename E>
void scaled_linear_case(const char* mode, int major, bool smooth_split) {
  gpu::Ctx c = checked_ctx();
  c.prop.major = major;
  gpu::native_forget_checks();
  const int N = 40, C = 64, OC = 48;
  QuantRecipe r = block_scaled_recipe(mode, RecipeOptions{});
  if (smooth_split) {
    r.smooth.assign(C, 0.f);
    for (int i = 0; i < C; i++) r.smooth[size_t(i)] = 0.5f + float(i % 5) * 0.25f;
    r.split_channels = {3, 17};
  }
  auto inp = rnd<E>(size_t(N) * C), w = rnd<E>(size_t(OC) * C), bias = rnd<E>(OC);
  auto dout = rnd<E>(size_t(N) * OC);
  Dev<E> out(size_t(N) * OC), dinp(size_t(N) * C);
  auto dw = zeros<E>(size_t(OC) * C), dbias = zeros<E>(OC);
  gpu::scaled_linear_forward(c, dtype_of<E>(), out.p, inp->p, w->p, bias->p, N, C, OC, r, 5);
  gpu::scaled_linear_backward(c, dtype_of<E>(), dinp.p, dw->p, dbias->p, dout->p, inp->p, w->p, N,
                              C, OC, r, 6);
}

TEST_CASE("checked: block-scaled linears, portable and native, smoothing and split channels") {
  take_reports();
  for (const char* mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"})
    for (int major : {8, 10}) scaled_linear_case<bf16>(mode, major, major == 10);
  scaled_linear_case<float>("mxfp8", 8, true);
  expect_clean();
  gpu::native_forget_checks();
}

template <typename E>
void stats_case(gpu::Ctx& c, int rows, int cols) {
  auto x = rnd<E>(size_t(rows) * cols);
  auto view =
      gpu::make_operand_view(c, Tensor{x->p, dtype_of<E>(), size_t(rows) * cols}, rows, cols);
  view->amax();
  view->column_amax();
  view->values();
  const std::vector<float> smooth(size_t(cols), 2.f);
  const std::vector<int> split = {1, cols - 1};
  OperandVariant plain, t, s, sp;
  t.transposed = true;
  s.smooth = &smooth, s.smooth_divide = true;
  sp.split = &split, sp.transposed = true;
  uint64_t seed = 3;
  for (const OperandRecipe& o : preset_operands())
    for (const OperandVariant* v : {&plain, &t, &s, &sp}) view->quant_error(o, ++seed, *v);
}

TEST_CASE("checked: operand statistics on the device (amax, column amax, quantization error)") {
  gpu::Ctx& c = checked_ctx();
  take_reports();
  stats_case<float>(c, 37, 100);
  stats_case<bf16>(c, 64, 48);
  expect_clean();
}

// ---- coverage ----

TEST_CASE("checked: every kernel of kernels/*.cuh ran under the checks (runs last)") {
  std::set<std::string> declared, ran;
  for (const auto& [k, file] : declared_kernels(
           {"adamw", "attention", "classifier", "encoder", "gelu", "global_norm", "layernorm",
            "loss_scale", "matmul", "operand_stats", "quantize_blocks", "residual", "wire"}))
    declared.insert(k);
  CHECK(declared.size() >= 50);
  for (const void* k : emu::check::launched_kernels()) {
    std::string name = emu::check::symbolize(k, false);
    const size_t t = name.find('<');
    ran.insert(t == std::string::npos ? name : name.substr(0, t));
  }
  std::string missing;
  for (const std::string& k : declared)
    if (!ran.count(k)) missing += " " + k;
  CHECK_MESSAGE(missing.empty(), "never launched under the checks:" << missing);
}

}  // namespace
