// test_gemm_bf16.cpp: the hardware path of cpu.narrow_gemm (src/backends/cpu/gemm_bf16.cpp and its
// callers) against references: bit for bit against a scalar loop that adds in the kernel's
// order (gemm_bf16.h), within the fp32 summation bound of an fp64 product otherwise; the
// block-scaled and FP8 GEMMs through both paths; the dispatch's fallback; subnormals.
// The linears and the chunked GEMM run on every hardware path the CPU has (AVX512-BF16 and
// AMX: test_gemm_amx.cpp checks the tiles' own order). Cases that need AVX512-BF16 say so and
// skip on CPUs without it.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/gemm.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "src/backends/cpu/ops.h"
#include "src/backends/cpu/parallel.h"
#include "src/numerics/formats.h"
#include "src/numerics/recipe.h"
#include "tests/backends/gemm_bf16_problem.h"
#include "tests/test_util.h"

using tg::cpu::NarrowGemm;
using tgt::NarrowPath, tgt::Problem, tgt::ftz, tgt::kShapes, tgt::random_problem, tgt::run_kernel,
    tgt::for_each_problem, tgt::hardware_paths;

namespace {

bool have_bf16_kernel() {
  tg::cpu::set_narrow_gemm(NarrowGemm::Avx512Bf16);
  const bool on = tg::cpu::narrow_gemm_hardware();
  tg::cpu::set_narrow_gemm(NarrowGemm::Exact);
  if (!on) MESSAGE("skipped: this CPU has no AVX512-BF16 (" << tg::cpu::cpu_isa_summary() << ")");
  return on;
}

// gemm_bf16.h's order: c = beta C, then per pair (c + a[2p+1] b[2p+1]) + a[2p] b[2p], each
// product exact and each sum rounded once (fmaf), subnormal operands and sums zero.
float ordered_dot(const Problem& p, int i, int j) {
  float c = p.beta == 0 ? 0.0f : ftz(p.C0[size_t(i) * p.N + j]);
  for (int k = 0; k < p.K; k += 2) {
    if (k + 1 < p.K)
      c = ftz(std::fmaf(ftz(p.a(i, k + 1)), ftz(p.b(k + 1, j)), c));
    else
      c = ftz(c + 0.0f);  // the zero padding of an odd K
    c = ftz(std::fmaf(ftz(p.a(i, k)), ftz(p.b(k, j)), c));
  }
  return c;
}

}  // namespace

TEST_CASE("gemm_bf16: bit-identical to a scalar loop adding in the kernel's order") {
  if (!have_bf16_kernel()) return;
  for_each_problem(1, [](const Problem& p) {
    const std::vector<float> C = run_kernel(p);
    int mismatches = 0;
    for (int i = 0; i < p.M; i++)
      for (int j = 0; j < p.N; j++) mismatches += C[size_t(i) * p.N + j] != ordered_dot(p, i, j);
    CHECK(mismatches == 0);
  });
}

TEST_CASE("gemm_bf16: within the fp32 summation bound of the exact product, as sgemm is") {
  if (!have_bf16_kernel()) return;
  // |computed - exact| <= gamma_(K+1) sum |a b| (+ |C|) for any order of fp32 additions of
  // exact products, gamma_n = n u / (1 - n u), u = 2^-24: both the kernel and sgemm on the
  // widened values must meet it.
  uint64_t seed = 100;
  for (const auto& s : kShapes) {
    const Problem p = random_problem(s[0], s[1], s[2], false, true, 1.0f, seed++);
    std::vector<float> Af(p.A.size()), Bf(p.B.size());
    for (size_t i = 0; i < Af.size(); i++) Af[i] = tg::bf16_to_f32(p.A[i]);
    for (size_t i = 0; i < Bf.size(); i++) Bf[i] = tg::bf16_to_f32(p.B[i]);
    std::vector<float> Cs = p.C0;
    tg::cpu::gemm(false, true, p.M, p.N, p.K, Af.data(), p.K, Bf.data(), p.K, 1.0f, Cs.data(), p.N);
    const std::vector<float> C = run_kernel(p);
    const double u = std::ldexp(1.0, -24), gamma = (p.K + 1) * u / (1 - (p.K + 1) * u);
    double worst_kernel = 0, worst_sgemm = 0;
    for (int i = 0; i < p.M; i++)
      for (int j = 0; j < p.N; j++) {
        double exact = p.C0[size_t(i) * p.N + j], mag = std::fabs(exact);
        for (int k = 0; k < p.K; k++) {
          exact += double(p.a(i, k)) * p.b(k, j);
          mag += std::fabs(double(p.a(i, k)) * p.b(k, j));
        }
        const double bound = gamma * mag;
        worst_kernel = std::max(worst_kernel, std::fabs(C[size_t(i) * p.N + j] - exact) / bound);
        worst_sgemm = std::max(worst_sgemm, std::fabs(Cs[size_t(i) * p.N + j] - exact) / bound);
      }
    CAPTURE(p.K);
    CHECK(worst_kernel <= 1.0);
    CHECK(worst_sgemm <= 1.0);
  }
}

TEST_CASE("gemm_bf16: subnormal operands and results are zeros (the exact path keeps them)") {
  if (!have_bf16_kernel()) return;
  // Measured on AMD Zen 4, as Intel defines vdpbf16ps: a subnormal bf16 operand reads as
  // zero, a subnormal C (beta = 1) reads as zero, a sum below 2^-126 is flushed; a product
  // below 2^-126 is kept exactly until it is added.
  const uint16_t one = 0x3f80, half = 0x3f00, sub = 0x0040;  // sub = 2^-127, a subnormal
  const uint16_t min_normal = 0x0080;                        // 2^-126
  struct Case {
    uint16_t a, b;
    float c0, want_exact, want_hw;
  };
  const Case cases[] = {
      {sub, one, 0.0f, 0x1p-127f, 0.0f},                  // subnormal operand
      {min_normal, half, 0.0f, 0x1p-127f, 0.0f},          // subnormal product
      {min_normal, one, 0.0f, 0x1p-126f, 0x1p-126f},      // the smallest normal stays
      {0x0000, one, 0x1p-130f, 0x1p-130f, 0.0f},          // subnormal C, beta = 1
      {0x8080, half, 0x1.8p-126f, 0x1p-126f, 0x1p-126f},  // a subnormal product, kept
      {0x8080, one, 0x1.8p-126f, 0x1p-127f, 0.0f},        // a subnormal sum
  };
  for (const Case& c : cases) {
    float C = c.c0, Cf = c.c0;
    tg::cpu::gemm_bf16(false, false, 1, 1, 1, &c.a, 1, &c.b, 1, 1.0f, &C, 1);
    const float af = tg::bf16_to_f32(c.a), bf = tg::bf16_to_f32(c.b);
    tg::cpu::gemm(false, false, 1, 1, 1, &af, 1, &bf, 1, 1.0f, &Cf, 1);
    CAPTURE(c.a);
    CAPTURE(c.c0);
    CHECK(Cf == c.want_exact);
    CHECK(C == c.want_hw);
  }
}

TEST_CASE("narrow gemm dispatch: hardware only where the CPU has it; exact and loops keep sgemm") {
  tg::cpu::CpuFeatures none, bf16;
  bf16.avx512f = bf16.avx512bw = bf16.avx512vl = bf16.avx512_bf16 = true;
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::Auto, false, bf16) ==
        NarrowGemm::Avx512Bf16);
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::Auto, false, none) == NarrowGemm::Exact);
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::Exact, false, bf16) ==
        NarrowGemm::Exact);
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::Auto, true, bf16) == NarrowGemm::Exact);
  CHECK(tg::cpu::cpu_isa_summary(none) == "none");
  CHECK(tg::cpu::cpu_isa_summary(bf16) == "avx512f avx512bw avx512vl avx512_bf16");
  CHECK(!tg::cpu::cpu_model_name().empty());
  // Asking for the kernel on a CPU without it falls back to the exact path.
  tg::cpu::set_narrow_gemm(NarrowGemm::Avx512Bf16);
  CHECK(tg::cpu::narrow_gemm_hardware() == tg::cpu::cpu_features().avx512_bf16);
  tg::cpu::set_narrow_gemm(NarrowGemm::Exact);
  CHECK(!tg::cpu::narrow_gemm_hardware());
}

namespace {

std::vector<float> randn_f(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

tg::Tensor upload_bf16(tg::Backend& be, const std::vector<float>& v) {
  tg::Tensor t = be.alloc(tg::DType::BF16, v.size());
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); i++) h[i] = tg::f32_to_bf16(v[i]);
  be.upload(t, h.data());
  return t;
}

std::vector<float> download_f(tg::Backend& be, tg::Tensor t) {
  std::vector<float> v(t.numel);
  if (t.dtype == tg::DType::F32) {
    be.download(v.data(), t);
    return v;
  }
  std::vector<uint16_t> h(t.numel);
  be.download(h.data(), t);
  for (size_t i = 0; i < h.size(); i++) v[i] = tg::bf16_to_f32(h[i]);
  return v;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// The bf16 linear's forward and backward on the CPU backend under one path.
struct LinearResult {
  std::vector<float> out, dinp, dw, db;
};
LinearResult bf16_linear(NarrowGemm path, int N, int C, int OC) {
  NarrowPath np(path);
  auto be = tg::make_cpu_backend();
  using tg::DType;
  tg::Tensor inp = upload_bf16(*be, randn_f(size_t(N) * C, 1, 1.0f));
  tg::Tensor w = upload_bf16(*be, randn_f(size_t(OC) * C, 2, 0.1f));
  tg::Tensor b = upload_bf16(*be, randn_f(OC, 3, 0.1f));
  tg::Tensor dout = upload_bf16(*be, randn_f(size_t(N) * OC, 4, 1e-2f));
  tg::Tensor out = be->alloc(DType::BF16, size_t(N) * OC),
             dinp = be->alloc(DType::BF16, size_t(N) * C);
  tg::Tensor dw = upload_bf16(*be, randn_f(size_t(OC) * C, 5, 1e-3f));
  tg::Tensor db = upload_bf16(*be, randn_f(OC, 6, 1e-3f));
  be->matmul_forward(out, inp, w, b, N, C, OC);
  be->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  return {download_f(*be, out), download_f(*be, dinp), download_f(*be, dw), download_f(*be, db)};
}

}  // namespace

TEST_CASE("cpu backend: bf16 linears through gemm_bf16 match the exact path") {
  tg::cpu::set_parallelism(2, 2);
  const int N = 70, C = 96, OC = 50;  // no shape a multiple of the micro-tile
  const LinearResult exact = bf16_linear(NarrowGemm::Exact, N, C, OC);
  for (NarrowGemm path : hardware_paths()) {
    INFO(tg::cpu::narrow_gemm_name(path));
    tg::cpu::set_parallelism(2, 2);
    const LinearResult hw = bf16_linear(path, N, C, OC);
    // The same exact products summed in another fp32 order, then rounded to bf16: at most a
    // bf16 rounding apart (2^-8 relative), far less on average.
    CHECK(rel_diff(hw.out, exact.out) < 4e-3);
    CHECK(rel_diff(hw.dinp, exact.dinp) < 4e-3);
    CHECK(rel_diff(hw.dw, exact.dw) < 4e-3);
    CHECK(hw.db == exact.db);  // the bias gradient is summed the same way on both paths
    // and bit-identical for 1 or 2 threads
    tg::cpu::set_parallelism(1, 1);
    const LinearResult one = bf16_linear(path, N, C, OC);
    CHECK(one.out == hw.out);
    CHECK(one.dinp == hw.dinp);
    CHECK(one.dw == hw.dw);
  }
  tg::cpu::set_parallelism(2, 2);
}

namespace {
// Random values as t's codes (bf16 or fp16), uploaded.
std::vector<uint16_t> codes16(tg::DType t, const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); i++)
    h[i] = t == tg::DType::BF16 ? tg::f32_to_bf16(v[i]) : tg::f32_to_f16(v[i]);
  return h;
}
tg::Tensor upload16(tg::Backend& be, tg::DType t, const std::vector<float>& v) {
  tg::Tensor x = be.alloc(t, v.size());
  be.upload(x, codes16(t, v).data());
  return x;
}
std::vector<char> bytes_of(tg::Backend& be, tg::Tensor t) {
  std::vector<char> b(t.bytes());
  be.download(b.data(), t);
  return b;
}
}  // namespace

// The lm_head's backward from the classifier's 16-bit dlogits where they lie, in the first half
// of each fp32 row of the logits (rows 2 Vp apart), equals matmul_backward on the same values
// packed, bit for bit: the exact path widens them in blocks of rows and columns (the loop
// nest's sums do not depend on the blocks), the bf16 kernel reads them in place (its order does
// not depend on the blocking either). N and Vp leave partial blocks (16 rows, 64 columns).
TEST_CASE("cpu backend: the lm_head backward from 16-bit dlogits in the logits' rows") {
  tg::cpu::set_parallelism(2, 2);
  tg::cpu::set_gemm_loops(true);
  const int N = 37, C = 40, Vp = 200;
  for (tg::DType t : {tg::DType::BF16, tg::DType::F16})
    for (NarrowGemm path : {NarrowGemm::Exact, NarrowGemm::Avx512Bf16}) {
      if (path == NarrowGemm::Avx512Bf16 && (t != tg::DType::BF16 || !have_bf16_kernel())) continue;
      INFO(tg::dtype_name(t) << " " << tg::cpu::narrow_gemm_name(path));
      NarrowPath np(path);
      auto be = tg::make_cpu_backend();
      const std::vector<float> g = randn_f(size_t(N) * Vp, 21, 1e-2f);
      tg::Tensor inp = upload16(*be, t, randn_f(size_t(N) * C, 22, 1.0f));
      tg::Tensor w = upload16(*be, t, randn_f(size_t(Vp) * C, 23, 0.1f));
      tg::Tensor packed = upload16(*be, t, g);
      // The logits' buffer: each row's gradient codes, then the row's fp32 upper half (noise).
      tg::Tensor logits = be->alloc(tg::DType::F32, size_t(N) * Vp);
      std::vector<uint16_t> rows = codes16(t, randn_f(size_t(N) * 2 * Vp, 24, 5.0f));
      const std::vector<uint16_t> gc = codes16(t, g);
      for (int n = 0; n < N; n++)
        std::copy(gc.begin() + size_t(n) * Vp, gc.begin() + size_t(n + 1) * Vp,
                  rows.begin() + size_t(n) * 2 * Vp);
      be->upload(logits, rows.data());
      const std::vector<float> dw0 = randn_f(size_t(Vp) * C, 25, 1e-3f);
      tg::Tensor dinp[2] = {be->alloc(t, size_t(N) * C), be->alloc(t, size_t(N) * C)};
      tg::Tensor dw[2] = {upload16(*be, t, dw0), upload16(*be, t, dw0)};
      be->matmul_backward(dinp[0], dw[0], tg::Tensor{}, packed, inp, w, N, C, Vp);
      be->lm_head_backward(dinp[1], dw[1], tg::dlogits_view(logits, t), inp, w, N, C, Vp);
      CHECK(bytes_of(*be, dinp[1]) == bytes_of(*be, dinp[0]));
      CHECK(bytes_of(*be, dw[1]) == bytes_of(*be, dw[0]));
    }
  tg::cpu::set_gemm_loops(false);  // the default (OpenBLAS where the build has it)
}

TEST_CASE("cpu backend: fp8 linears through gemm_bf16 match the exact path") {
  tg::cpu::set_parallelism(2, 2);
  const int N = 66, C = 80, OC = 40;
  const tg::QuantRecipe r = tg::fp8_tensor_recipe(tg::ScaleSource::Current, 4, 0, {});
  const tg::ScaledLinear q{&r, 0, {0, {1.0f, 1.0f, 1.0f}, 0}};
  auto run = [&](NarrowGemm path, std::vector<float>* fwd, std::vector<float>* bwd) {
    NarrowPath np(path);
    auto be = tg::make_cpu_backend();
    tg::Tensor inp = upload_bf16(*be, randn_f(size_t(N) * C, 11, 1.0f));
    tg::Tensor w = upload_bf16(*be, randn_f(size_t(OC) * C, 12, 0.1f));
    tg::Tensor b = upload_bf16(*be, randn_f(OC, 13, 0.1f));
    tg::Tensor dout = upload_bf16(*be, randn_f(size_t(N) * OC, 14, 1e-2f));
    tg::Tensor out = be->alloc(tg::DType::BF16, size_t(N) * OC);
    tg::Tensor dinp = be->alloc(tg::DType::BF16, size_t(N) * C);
    tg::Tensor dw = upload_bf16(*be, randn_f(size_t(OC) * C, 15, 1e-3f));
    tg::Tensor db = upload_bf16(*be, randn_f(OC, 16, 1e-3f));
    be->matmul_forward_scaled(out, inp, w, b, N, C, OC, q);
    *fwd = be->take_amaxes(1);
    be->matmul_backward_scaled(dinp, dw, db, dout, inp, w, N, C, OC, q);
    *bwd = be->take_amaxes(1);
    return LinearResult{download_f(*be, out), download_f(*be, dinp), download_f(*be, dw),
                        download_f(*be, db)};
  };
  std::vector<float> ef, eb, hf, hb;  // the amaxes each pass leaves
  const LinearResult exact = run(NarrowGemm::Exact, &ef, &eb);
  if (!have_bf16_kernel()) return;
  const LinearResult hw = run(NarrowGemm::Avx512Bf16, &hf, &hb);
  // The same FP8 values and scales (the same amaxes); only where the scales apply (after the
  // sum instead of on each operand) and the order of the additions differ.
  CHECK(hf == ef);
  CHECK(hb == eb);
  CHECK(rel_diff(hw.out, exact.out) < 4e-3);
  CHECK(rel_diff(hw.dinp, exact.dinp) < 4e-3);
  CHECK(rel_diff(hw.dw, exact.dw) < 4e-3);
  CHECK(hw.db == exact.db);
}

TEST_CASE("block-scaled GEMMs through gemm_bf16: exact products in the kernel's order") {
  tg::cpu::set_parallelism(2, 2);
  if (!have_bf16_kernel()) return;
  const int N = 45, C = 96, OC = 37;
  const std::vector<float> inp = randn_f(size_t(N) * C, 21, 1.0f);
  const std::vector<float> w = randn_f(size_t(OC) * C, 22, 0.1f);
  for (const char* mode : {"mxfp8", "mxfp4", "nvfp4", "fp8-rowwise", "fp8-block"}) {
    CAPTURE(mode);
    tg::RecipeOptions opt;
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, opt);
    const tg::GemmRecipe& g = r.gemm[tg::kForward];
    std::vector<float> exact(size_t(N) * OC), hw(size_t(N) * OC);
    {
      std::vector<float> a = inp, b = w;
      tg::cpu::matmul_forward_scaled(exact.data(), a.data(), b.data(), nullptr, N, C, OC, r, 7);
    }
    {
      NarrowPath np(NarrowGemm::Avx512Bf16);
      std::vector<float> a = inp, b = w;
      tg::cpu::matmul_forward_scaled(hw.data(), a.data(), b.data(), nullptr, N, C, OC, r, 7);
    }
    // The forward rounds to nearest without a transform, so its operands do not depend on
    // the seed: the same values, as bf16 (exactly), in gemm_bf16's order. fp32-scaled
    // operands (q d is not a bf16 value) enter as their codes, the scales applied to each
    // product after it: C < 128, so one K chunk and one scale per row of each operand.
    const bool fp32_scales = g.a.scale == tg::ScaleFormat::FP32;
    std::vector<float> qa = inp, qb = w, da, db;
    float post = 1.0f;
    if (fp32_scales) {
      post = tg::cpu::quantize_to_codes(qa.data(), N, C, g.a, 0, &da) *
             tg::cpu::quantize_to_codes(qb.data(), OC, C, g.b, 0, &db);
    } else {
      post = tg::cpu::quantize_dequantize(qa.data(), N, C, g.a, 0) *
             tg::cpu::quantize_dequantize(qb.data(), OC, C, g.b, 0);
    }
    // One scale per row of each operand (a whole-K group; a weight tile's rows share one).
    auto row_scale = [&](const std::vector<float>& d, const tg::OperandRecipe& o, int rows, int r) {
      if (d.empty()) return 1.0f;
      int gr = 0, gc = 0;
      tg::cpu::group_shape(o, rows, C, &gr, &gc);
      REQUIRE(std::min(gc, C) == C);
      return d[size_t(r / std::min(gr, rows))];
    };
    Problem p{N, OC, C, false, true, 0.0f, {}, {}, {}};
    for (float v : qa) {
      CHECK(tg::bf16_to_f32(tg::f32_to_bf16(v)) == v);  // exact in bf16
      p.A.push_back(tg::f32_to_bf16(v));
    }
    for (float v : qb) {
      CHECK(tg::bf16_to_f32(tg::f32_to_bf16(v)) == v);
      p.B.push_back(tg::f32_to_bf16(v));
    }
    int mismatches = 0;
    for (int i = 0; i < N; i++)
      for (int j = 0; j < OC; j++) {
        float want = ordered_dot(p, i, j);
        if (fp32_scales) want *= row_scale(da, g.a, N, i) * row_scale(db, g.b, OC, j);
        if (post != 1.0f) want *= post;
        mismatches += hw[size_t(i) * OC + j] != want;
      }
    CHECK(mismatches == 0);
    CHECK(rel_diff(hw, exact) < 1e-6);  // fp32 sums in two orders
  }
}

namespace {
// gemm_bf16_chunks on the current path against one gemm_bf16 per chunk and the scaling loop.
void chunks_match_per_chunk_gemms() {
  // Edges in every blocking dimension, odd chunks and last chunks, chunks of 1 and of the slice.
  const int shapes[][4] = {{1, 1, 1, 1},        {3, 5, 7, 2},       {9, 33, 300, 128},
                           {8, 32, 256, 128},   {13, 70, 513, 256}, {100, 41, 385, 128},
                           {97, 1030, 129, 64}, {17, 19, 30, 7}};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1], K = s[2], chunk = s[3], nch = (K + chunk - 1) / chunk;
    CAPTURE(M);
    CAPTURE(N);
    CAPTURE(K);
    CAPTURE(chunk);
    const Problem p = random_problem(M, N, K, false, true, 0.0f, seed++);
    std::vector<float> sa = randn_f(size_t(M) * nch, seed++, 1.0f);
    std::vector<float> sb = randn_f(size_t(N) * nch, seed++, 1e-3f);
    sa[0] = 0.0f;  // a zero scale, and extremes whose product rounds
    if (sb.size() > 1) sb[1] = 3e38f;
    std::vector<float> C(size_t(M) * N, NAN);
    tg::cpu::gemm_bf16_chunks(M, N, K, chunk, p.A.data(), K, p.B.data(), K, sa.data(), sb.data(),
                              C.data(), N);
    // The reference: one gemm_bf16 per chunk (beta 0), then the scaling loop.
    std::vector<float> want(size_t(M) * N), part(size_t(M) * N);
    for (int c = 0; c < nch; c++) {
      const int k0 = c * chunk, kc = std::min(chunk, K - k0);
      tg::cpu::gemm_bf16(false, true, M, N, kc, p.A.data() + k0, K, p.B.data() + k0, K, 0.0f,
                         part.data(), N);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          const float f = sa[size_t(i) * nch + c] * sb[size_t(j) * nch + c];
          float& w = want[size_t(i) * N + j];
          const float pv = part[size_t(i) * N + j];
          w = c == 0 ? pv * f : std::fmaf(pv, f, w);
        }
    }
    int mismatches = 0;
    for (size_t i = 0; i < C.size(); i++)
      mismatches += !(C[i] == want[i] || (std::isnan(C[i]) && std::isnan(want[i])));
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("gemm_bf16_chunks: each chunk's gemm_bf16 scaled into C by fma, bit for bit") {
  for (NarrowGemm path : hardware_paths()) {
    INFO(tg::cpu::narrow_gemm_name(path));
    NarrowPath np(path);
    chunks_match_per_chunk_gemms();
  }
}

TEST_CASE("cpu.narrow_gemm: a bad value is a usage error naming the key") {
  std::string out;
  CHECK(tgt::run_binary("train --cpu.narrow_gemm=fast --train.steps=1", &out) == 2);
  CHECK(out.find("cpu.narrow_gemm") != std::string::npos);
}
