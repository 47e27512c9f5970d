// Every CUDA kernel against the CPU backend: fresh random inputs, poisoned outputs, relative
// error within the precision's tolerance (see cuda_test_util.h). Accumulating outputs (+=)
// start from the same random values on both sides.
#include <algorithm>
#include <array>
#include <cstdlib>

#include "cuda_test_util.h"
#include "kernels/loss_scale.cuh"
#include "src/backends/cuda/launch.h"
#include "src/numerics/loss_scaler.h"

using namespace tgc;

TEST_CASE("cuda: encoder forward and backward") {
  TG_REQUIRE_GPU();
  const int B = 3, T = 17, C = 40, V = 23;  // few tokens: many repeats in the scatter-add
  for (DType t : kAllTypes) {
    INFO(name(t));
    Twin tw;
    Pair tok = tw.ints(random_tokens(size_t(B) * T, V, 1));
    Pair wte = tw.rand(t, size_t(V) * C, 2), wpe = tw.rand(t, size_t(T) * C, 3);
    Pair out = tw.poisoned(t, size_t(B) * T * C);
    tw.cpu->encoder_forward(out.cpu, tok.cpu, wte.cpu, wpe.cpu, B, T, C);
    tw.gpu->encoder_forward(out.gpu, tok.gpu, wte.gpu, wpe.gpu, B, T, C);
    CHECK(tw.same_bits(out));  // one add, one rounding: identical
    Pair dout = tw.rand(t, size_t(B) * T * C, 4);
    Pair dwte = tw.rand(t, size_t(V) * C, 5), dwpe = tw.rand(t, size_t(T) * C, 6);
    tw.cpu->encoder_backward(dwte.cpu, dwpe.cpu, dout.cpu, tok.cpu, B, T, C);
    tw.gpu->encoder_backward(dwte.gpu, dwpe.gpu, dout.gpu, tok.gpu, B, T, C);
    // The same additions in the same order, rounded at the same points: identical.
    CHECK(tw.same_bits(dwte));
    CHECK(tw.same_bits(dwpe));
    // Tokens the backend has no host copy of (a slice at another address than the upload):
    // it reads them back.
    std::vector<int32_t> padded = random_tokens(size_t(B) * T + 1, V, 7);
    Pair tok2 = tw.ints(padded);
    Pair tok2s{tok2.cpu.slice(1, size_t(B) * T), tok2.gpu.slice(1, size_t(B) * T)};
    tw.cpu->encoder_backward(dwte.cpu, dwpe.cpu, dout.cpu, tok2s.cpu, B, T, C);
    tw.gpu->encoder_backward(dwte.gpu, dwpe.gpu, dout.gpu, tok2s.gpu, B, T, C);
    CHECK(tw.same_bits(dwte));
    CHECK(tw.same_bits(dwpe));
  }
}

TEST_CASE("cuda: layernorm forward, fused residual + layernorm, backward") {
  TG_REQUIRE_GPU();
  for (auto sh : {std::array<int, 2>{37, 72}, {64, 768}, {5, 33}}) {
    const int N = sh[0], C = sh[1];
    for (DType t : kAllTypes) {
      INFO(name(t) << " N=" << N << " C=" << C);
      Twin tw;
      const size_t n = size_t(N) * C;
      Pair inp = tw.rand(t, n, 10, 2.f, 0.5f), w = tw.rand(t, C, 11, 0.5f, 1.f),
           b = tw.rand(t, C, 12, 0.3f);
      Pair out = tw.poisoned(t, n), mean = tw.poisoned(DType::F32, N),
           rstd = tw.poisoned(DType::F32, N);
      tw.cpu->layernorm_forward(out.cpu, mean.cpu, rstd.cpu, inp.cpu, w.cpu, b.cpu, N, C);
      tw.gpu->layernorm_forward(out.gpu, mean.gpu, rstd.gpu, inp.gpu, w.gpu, b.gpu, N, C);
      CHECK(tw.err(out) < tol(t));
      CHECK(tw.err(mean) < 1e-5);
      CHECK(tw.err(rstd) < 1e-5);

      Pair ra = tw.rand(t, n, 13), rb = tw.rand(t, n, 14);
      Pair res = tw.poisoned(t, n), out2 = tw.poisoned(t, n), mean2 = tw.poisoned(DType::F32, N),
           rstd2 = tw.poisoned(DType::F32, N);
      tw.cpu->residual_layernorm_forward(res.cpu, out2.cpu, mean2.cpu, rstd2.cpu, ra.cpu, rb.cpu,
                                         w.cpu, b.cpu, N, C);
      tw.gpu->residual_layernorm_forward(res.gpu, out2.gpu, mean2.gpu, rstd2.gpu, ra.gpu, rb.gpu,
                                         w.gpu, b.gpu, N, C);
      CHECK(tw.same_bits(res));
      CHECK(tw.err(out2) < tol(t));
      CHECK(tw.err(mean2) < 1e-5);
      CHECK(tw.err(rstd2) < 1e-5);

      Pair dout = tw.rand(t, n, 15), dinp = tw.rand(t, n, 16), dw = tw.rand(t, C, 17),
           db = tw.rand(t, C, 18);
      tw.cpu->layernorm_backward(dinp.cpu, dw.cpu, db.cpu, dout.cpu, inp.cpu, w.cpu, mean.cpu,
                                 rstd.cpu, N, C);
      tw.gpu->layernorm_backward(dinp.gpu, dw.gpu, db.gpu, dout.gpu, inp.gpu, w.gpu, mean.gpu,
                                 rstd.gpu, N, C);
      CHECK(tw.err(dinp) < tol(t));
      CHECK(tw.err(dw) < tol(t));
      CHECK(tw.err(db) < tol(t));
    }
  }
}

TEST_CASE("cuda: matmul forward and backward (cuBLASLt and the fallback)") {
  TG_REQUIRE_GPU();
  // Aligned shapes take cuBLASLt; odd ones may take the cuBLAS + epilogue fallback, and
  // cuda.gemm=fallback forces the fallback for all.
  for (int forced = 0; forced < 2; forced++) {
    tg::BackendOptions o;
    o.gemm_fallback = forced;
    for (auto sh : {std::array<int, 3>{64, 96, 288}, {33, 48, 80}, {7, 13, 9}}) {
      const int N = sh[0], C = sh[1], OC = sh[2];
      for (DType t : kAllTypes) {
        for (bool with_bias : {true, false}) {
          INFO(name(t) << " N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias
                       << " forced fallback=" << forced);
          Twin tw(o);
          Pair inp = tw.rand(t, size_t(N) * C, 20), w = tw.rand(t, size_t(OC) * C, 21, 0.2f);
          Pair bias = with_bias ? tw.rand(t, OC, 22) : Pair{};
          Pair out = tw.poisoned(t, size_t(N) * OC);
          tw.cpu->matmul_forward(out.cpu, inp.cpu, w.cpu, bias.cpu, N, C, OC);
          tw.gpu->matmul_forward(out.gpu, inp.gpu, w.gpu, bias.gpu, N, C, OC);
          CHECK(tw.err(out) < tol(t));

          Pair dout = tw.rand(t, size_t(N) * OC, 23);
          Pair dinp = tw.poisoned(t, size_t(N) * C);
          Pair dw = tw.rand(t, size_t(OC) * C, 24), dbias = with_bias ? tw.rand(t, OC, 25) : Pair{};
          tw.cpu->matmul_backward(dinp.cpu, dw.cpu, dbias.cpu, dout.cpu, inp.cpu, w.cpu, N, C, OC);
          tw.gpu->matmul_backward(dinp.gpu, dw.gpu, dbias.gpu, dout.gpu, inp.gpu, w.gpu, N, C, OC);
          CHECK(tw.err(dinp) < tol(t));
          CHECK(tw.err(dw) < tol(t));
          if (with_bias) CHECK(tw.err(dbias) < tol(t));
        }
      }
    }
  }
}

TEST_CASE("cuda: matmul + GELU (plain, and the cuBLASLt GELU epilogue)") {
  TG_REQUIRE_GPU();
  for (int epilogue = 0; epilogue < 2; epilogue++) {
    tg::BackendOptions o;
    o.gelu_epilogue = epilogue;
    for (auto sh : {std::array<int, 3>{64, 96, 384}, {33, 40, 160}, {5, 12, 20}}) {
      const int N = sh[0], C = sh[1], OC = sh[2];
      for (DType t : kAllTypes) {
        INFO(name(t) << " N=" << N << " C=" << C << " OC=" << OC << " epilogue=" << epilogue);
        Twin tw(o);
        Pair inp = tw.rand(t, size_t(N) * C, 26), w = tw.rand(t, size_t(OC) * C, 27, 0.2f),
             bias = tw.rand(t, OC, 28);
        Pair pre = tw.poisoned(t, size_t(N) * OC), out = tw.poisoned(t, size_t(N) * OC);
        tw.cpu->matmul_gelu_forward(pre.cpu, out.cpu, inp.cpu, w.cpu, bias.cpu, N, C, OC);
        tw.gpu->matmul_gelu_forward(pre.gpu, out.gpu, inp.gpu, w.gpu, bias.gpu, N, C, OC);
        CHECK(tw.err(pre) < tol(t));
        CHECK(tw.err(out) < tol(t));
      }
    }
  }
}

namespace {
// The first Vp values of each of the N rows of a dlogits view (rows numel / N apart), on both
// backends.
std::pair<std::vector<double>, std::vector<double>> dlogits_rows(Twin& tw, Pair d, int N, int Vp) {
  const auto c = tw.get(*tw.cpu, d.cpu), g = tw.get(*tw.gpu, d.gpu);
  const size_t ld = d.cpu.numel / size_t(N);
  std::pair<std::vector<double>, std::vector<double>> r;
  for (int n = 0; n < N; n++)
    for (int i = 0; i < Vp; i++) {
      r.first.push_back(c[size_t(n) * ld + i]);
      r.second.push_back(g[size_t(n) * ld + i]);
    }
  return r;
}
double rel(const std::vector<double>& ref, const std::vector<double>& out) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}
}  // namespace

// The lm_head as the model runs it: fp32 logits from the compute type's operands, the
// classifier's gradient in the compute type over the logits' rows (tg::dlogits_view), the
// backward GEMMs from there in the compute type (both backends round dlogits, dinp and dW at
// the same places: the tolerance of any 16-bit matmul).
TEST_CASE("cuda: the lm_head: fp32 logits, 16-bit dlogits in their rows, the backward in 16-bit") {
  TG_REQUIRE_GPU();
  const int N = 24, C = 64, V = 250, Vp = 256;
  for (DType t : kAllTypes) {
    INFO(name(t));
    Twin tw;
    Pair inp = tw.rand(t, size_t(N) * C, 30), w = tw.rand(t, size_t(Vp) * C, 31, 0.2f);
    Pair logits = tw.poisoned(DType::F32, size_t(N) * Vp);
    tw.cpu->matmul_forward(logits.cpu, inp.cpu, w.cpu, Tensor{}, N, C, Vp);
    tw.gpu->matmul_forward(logits.gpu, inp.gpu, w.gpu, Tensor{}, N, C, Vp);
    CHECK(tw.err(logits) < 1e-5);  // exact products, fp32 sums
    Pair tgt = tw.ints(random_tokens(N, V, 32)), losses = tw.poisoned(DType::F32, N);
    Pair dl{tg::dlogits_view(logits.cpu, t), tg::dlogits_view(logits.gpu, t)};
    tw.cpu->classifier(logits.cpu, losses.cpu, tgt.cpu, dl.cpu, 1.f / N, N, V, Vp);
    tw.gpu->classifier(logits.gpu, losses.gpu, tgt.gpu, dl.gpu, 1.f / N, N, V, Vp);
    CHECK(tw.err(losses) < 1e-5);
    const auto rows = dlogits_rows(tw, dl, N, Vp);
    CHECK(rel(rows.first, rows.second) < tol(t));
    Pair dinp = tw.poisoned(t, size_t(N) * C), dw = tw.rand(t, size_t(Vp) * C, 33);
    tw.cpu->lm_head_backward(dinp.cpu, dw.cpu, dl.cpu, inp.cpu, w.cpu, N, C, Vp);
    tw.gpu->lm_head_backward(dinp.gpu, dw.gpu, dl.gpu, inp.gpu, w.gpu, N, C, Vp);
    CHECK(tw.err(dinp) < tol(t));
    CHECK(tw.err(dw) < tol(t));
  }
}

// fp16 dlogits carry the loss scale: beyond 65504 they are inf on both backends (the
// conversion's overflow, never a clamp to the largest half), and so are the lm_head's
// gradients: the step is skipped.
TEST_CASE("cuda: fp16 dlogits beyond the range are inf, and the lm_head's gradients non-finite") {
  TG_REQUIRE_GPU();
  const int N = 8, C = 32, V = 120, Vp = 128;
  const DType t = DType::F16;
  Twin tw;
  Pair inp = tw.rand(t, size_t(N) * C, 34), w = tw.rand(t, size_t(Vp) * C, 35, 0.2f);
  Pair logits = tw.rand(DType::F32, size_t(N) * Vp, 36);
  const std::vector<int32_t> tg_ids = random_tokens(N, V, 37);
  Pair tgt = tw.ints(tg_ids), losses = tw.poisoned(DType::F32, N);
  Pair dl{tg::dlogits_view(logits.cpu, t), tg::dlogits_view(logits.gpu, t)};
  tw.cpu->classifier(logits.cpu, losses.cpu, tgt.cpu, dl.cpu, 1e5f, N, V, Vp);
  tw.gpu->classifier(logits.gpu, losses.gpu, tgt.gpu, dl.gpu, 1e5f, N, V, Vp);
  const auto rows = dlogits_rows(tw, dl, N, Vp);
  for (int n = 0; n < N; n++) {
    CHECK(rows.first[size_t(n) * Vp + tg_ids[n]] == -INFINITY);
    CHECK(rows.second[size_t(n) * Vp + tg_ids[n]] == -INFINITY);
  }
  Pair dinp = tw.poisoned(t, size_t(N) * C), dw = tw.rand(t, size_t(Vp) * C, 38);
  tw.cpu->lm_head_backward(dinp.cpu, dw.cpu, dl.cpu, inp.cpu, w.cpu, N, C, Vp);
  tw.gpu->lm_head_backward(dinp.gpu, dw.gpu, dl.gpu, inp.gpu, w.gpu, N, C, Vp);
  for (tg::Backend* be : {tw.cpu.get(), tw.gpu.get()}) {
    const bool cpu = be == tw.cpu.get();
    CHECK(!be->unscale_check_norm(cpu ? dinp.cpu : dinp.gpu, 1.0).finite);
    CHECK(!be->unscale_check_norm(cpu ? dw.cpu : dw.gpu, 1.0).finite);
  }
}

TEST_CASE("cuda: attention forward and backward") {
  TG_REQUIRE_GPU();
  for (auto sh : {std::array<int, 4>{2, 24, 32, 4}, {1, 64, 128, 2}, {3, 7, 12, 3}}) {
    const int B = sh[0], T = sh[1], C = sh[2], NH = sh[3];
    for (DType t : kAllTypes) {
      INFO(name(t) << " B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
      Twin tw;
      const size_t btc = size_t(B) * T * C, att_n = size_t(B) * NH * T * T;
      Pair qkv = tw.rand(t, 3 * btc, 50);
      Pair out = tw.poisoned(t, btc), att = tw.poisoned(t, att_n);
      tw.cpu->attention_forward(out.cpu, att.cpu, qkv.cpu, B, T, C, NH);
      tw.gpu->attention_forward(out.gpu, att.gpu, qkv.gpu, B, T, C, NH);
      CHECK(tw.err(out) < tol(t));
      CHECK(tw.err(att) < tol(t));
      Pair dout = tw.rand(t, btc, 51), dqkv = tw.poisoned(t, 3 * btc);
      tw.cpu->attention_backward(dqkv.cpu, dout.cpu, qkv.cpu, att.cpu, B, T, C, NH);
      tw.gpu->attention_backward(dqkv.gpu, dout.gpu, qkv.gpu, att.gpu, B, T, C, NH);
      // 16-bit: dS is stored in the compute type before the last two GEMMs (one rounding more
      // than the CPU, which keeps it in fp32).
      CHECK(tw.err(dqkv) < tol(t));
    }
  }
}

TEST_CASE("cuda: gelu and residual, packed and unpacked") {
  TG_REQUIRE_GPU();
  for (DType t : kAllTypes) {
    for (size_t n : {size_t(4096), size_t(1001)}) {
      for (size_t off : {size_t(0), size_t(1)}) {  // off = 1: misaligned for 16-byte packs
        INFO(name(t) << " n=" << n << " offset=" << off);
        Twin tw;
        Pair x = tw.rand(t, n + off, 60, 2.f), d = tw.rand(t, n + off, 61);
        Pair y = tw.poisoned(t, n + off), dx = tw.poisoned(t, n + off), r = tw.poisoned(t, n + off);
        auto sl = [&](Pair p) { return Pair{p.cpu.slice(off, n), p.gpu.slice(off, n)}; };
        tw.cpu->gelu_forward(sl(y).cpu, sl(x).cpu, n);
        tw.gpu->gelu_forward(sl(y).gpu, sl(x).gpu, n);
        CHECK(tw.err(sl(y)) < tol(t));
        tw.cpu->gelu_backward(sl(dx).cpu, sl(x).cpu, sl(d).cpu, n);
        tw.gpu->gelu_backward(sl(dx).gpu, sl(x).gpu, sl(d).gpu, n);
        CHECK(tw.err(sl(dx)) < tol(t));
        tw.cpu->residual_forward(sl(r).cpu, sl(x).cpu, sl(d).cpu, n);
        tw.gpu->residual_forward(sl(r).gpu, sl(x).gpu, sl(d).gpu, n);
        CHECK(tw.same_bits(sl(r)));
      }
    }
  }
}

TEST_CASE("cuda: fused classifier (softmax, cross-entropy, dlogits over the logits' rows)") {
  TG_REQUIRE_GPU();
  for (auto sh : {std::array<int, 3>{9, 100, 128}, {4, 50257, 50304}}) {
    const int N = sh[0], V = sh[1], Vp = sh[2];
    for (DType t : kAllTypes)
      for (float dloss : {0.f, 0.25f}) {
        INFO("N=" << N << " V=" << V << " dloss=" << dloss << " dlogits " << name(t));
        Twin tw;
        std::vector<float> z = randn(size_t(N) * Vp, 70, 3.f);
        for (int n = 0; n < N; n++)
          for (int i = V; i < Vp; i++) z[size_t(n) * Vp + i] = 1e4f;  // padding must be ignored
        Pair logits = tw.make(DType::F32, z);
        Pair tgt = tw.ints(random_tokens(N, V, 71));
        Pair losses = tw.poisoned(DType::F32, N);
        Pair dl{tg::dlogits_view(logits.cpu, t), tg::dlogits_view(logits.gpu, t)};
        tw.cpu->classifier(logits.cpu, losses.cpu, tgt.cpu, dl.cpu, dloss, N, V, Vp);
        tw.gpu->classifier(logits.gpu, losses.gpu, tgt.gpu, dl.gpu, dloss, N, V, Vp);
        // The CPU sums the row's exponentials in order in fp32: over V = 50257 terms that sum
        // carries about sqrt(V) 2^-24 = 1.3e-5 of relative rounding, which a block's tree
        // reduction does not share (the emulation measured 1.02e-5 on the dlogits). 16-bit
        // dlogits are those values rounded once: they differ by an ulp where the two fp32
        // values straddle a rounding boundary, rarely.
        const double bound = V > 1000 ? 3e-5 : 1e-5;
        CHECK(tw.err(losses) < bound);
        if (dloss == 0.f) {
          CHECK(tw.same_bits(logits));  // untouched
          continue;
        }
        const auto rows = dlogits_rows(tw, dl, N, Vp);
        CHECK(rel(rows.first, rows.second) < (t == DType::F32 ? bound : 1e-3));
        size_t pad = 0;
        for (int n = 0; n < N; n++)
          for (int i = V; i < Vp; i++) pad += rows.second[size_t(n) * Vp + i] != 0.0;
        CHECK(pad == 0);
      }
  }
}

TEST_CASE("cuda: AdamW with fp32 master weights, nearest and stochastic rounding") {
  TG_REQUIRE_GPU();
  const size_t n = 5000;
  for (DType t : kAllTypes) {
    for (bool sr : {false, true}) {
      if (sr && t == DType::F32) continue;
      INFO(name(t) << " stochastic=" << sr);
      Twin tw;
      Pair master = tw.rand(DType::F32, n, 80, 0.1f), m = tw.rand(DType::F32, n, 81, 1e-3f);
      std::vector<float> vv = randn(n, 82, 1e-4f);
      for (auto& x : vv) x = std::fabs(x);
      Pair v = tw.make(DType::F32, vv);
      Pair grads = tw.rand(t, n, 83, 0.05f);
      Pair params = t == DType::F32 ? master : tw.poisoned(t, n);
      tg::AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7, tg::Rounding{sr, 1234, 99}};
      tw.cpu->adamw(params.cpu, master.cpu, grads.cpu, m.cpu, v.cpu, a);
      tw.gpu->adamw(params.gpu, master.gpu, grads.gpu, m.gpu, v.gpu, a);
      CHECK(tw.err(master) < 1e-6);
      CHECK(tw.err(m) < 1e-6);
      CHECK(tw.err(v) < 1e-6);
      CHECK(tw.err(params) < (t == DType::F32 ? 1e-6 : 1e-2));
    }
  }
}

TEST_CASE("cuda: conversions are bit-exact (nearest and stochastic)") {
  TG_REQUIRE_GPU();
  const size_t n = 3000;
  Twin tw;
  std::vector<float> src = randn(n, 90, 100.f);
  src[0] = 1e-42f;  // subnormals, overflow and specials too
  src[1] = 1e6f;
  src[2] = INFINITY;
  src[3] = -INFINITY;
  src[4] = NAN;
  src[5] = 7e4f;
  Pair s = tw.make(DType::F32, src);
  for (DType t : {DType::BF16, DType::F16}) {
    for (bool sr : {false, true}) {
      INFO(name(t) << " stochastic=" << sr);
      Pair d = tw.poisoned(t, n);
      tg::Rounding r{sr, 77, 5};
      tw.cpu->convert(d.cpu, s.cpu, r);
      tw.gpu->convert(d.gpu, s.gpu, r);
      CHECK(tw.same_bits(d));
      Pair back = tw.poisoned(DType::F32, n);
      tw.cpu->convert(back.cpu, d.cpu, tg::Rounding{});
      tw.gpu->convert(back.gpu, d.gpu, tg::Rounding{});
      auto c = tw.get(*tw.cpu, back.cpu), g = tw.get(*tw.gpu, back.gpu);
      bool same = true;
      for (size_t i = 0; i < n; i++)
        if (!(c[i] == g[i] || (std::isnan(c[i]) && std::isnan(g[i])))) same = false;
      CHECK(same);
    }
  }
}

TEST_CASE("cuda: sum of squares, the fused unscale/finite/norm check, stats") {
  TG_REQUIRE_GPU();
  for (DType t : kAllTypes) {
    INFO(name(t));
    Twin tw;
    const size_t n = 300001;
    Pair g = tw.rand(t, n, 100, 3.f);
    const double sc = tw.cpu->sum_squares(g.cpu), sg = tw.gpu->sum_squares(g.gpu);
    CHECK(std::fabs(sg / sc - 1) < 1e-5);
    tg::GradCheck cc = tw.cpu->unscale_check_norm(g.cpu, 1024.0);
    tg::GradCheck cg = tw.gpu->unscale_check_norm(g.gpu, 1024.0);
    CHECK(cc.finite);
    CHECK(cg.finite);
    CHECK(std::fabs(cg.norm / cc.norm - 1) < 1e-5);
    tg::TensorStats a = tw.cpu->stats(g.cpu), b = tw.gpu->stats(g.gpu);
    CHECK(a.amax == b.amax);
    CHECK(a.zeros == b.zeros);
    CHECK(a.nonfinite == b.nonfinite);
    // One infinity anywhere is found.
    std::vector<char> inf_bytes = encode({INFINITY}, t);
    tw.gpu->upload(g.gpu.slice(n / 2, 1), inf_bytes.data());
    CHECK_FALSE(tw.gpu->unscale_check_norm(g.gpu, 1.0).finite);
    CHECK(tw.gpu->stats(g.gpu).nonfinite == 1);
  }
}

// The loss-scale decision on the device (kernels/loss_scale.cuh) against LossScaler on the host
// over a sequence of finite and non-finite steps; AdamW reading its factor and skip flag from
// that state gives adamw_kernel's bits with the same factor, and changes nothing when skipped;
// both take the weights' amax (two segments of one range: kernels/amax.cuh's SegmentAmax) of
// what they wrote, the skipped step of the weights as they stand.
TEST_CASE("cuda: device loss scaler and AdamW with the device's factor and skip flag") {
  TG_REQUIRE_GPU();
  tg::LossScaler host =
      tg::LossScaler::make(tg::LossScaling::Dynamic, 65536, 3, 2.0, 0.5, 1, 1 << 24, 2);
  tg::LossScaleDevice init;
  init.state = host.state();
  tg::LossScaleDevice* d = nullptr;
  float* check = nullptr;
  REQUIRE(cudaMalloc(&d, sizeof(init)) == cudaSuccess);
  REQUIRE(cudaMalloc(&check, 2 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(d, &init, sizeof(init), cudaMemcpyHostToDevice) == cudaSuccess);
  const size_t n = 1000;
  std::vector<float> g = randn(n, 70), w = randn(n, 71), m0(n, 0.f), v0(n, 0.f);
  float *dg, *dw1, *dw2, *dm1, *dm2, *dv1, *dv2;
  for (float** p : {&dg, &dw1, &dw2, &dm1, &dm2, &dv1, &dv2})
    REQUIRE(cudaMalloc(p, n * sizeof(float)) == cudaSuccess);
  unsigned* words = nullptr;  // two for each kernel
  REQUIRE(cudaMalloc(&words, 4 * sizeof(unsigned)) == cudaSuccess);
  tg::gpu::SegmentAmax amax1, amax2;
  amax1.n = amax2.n = 1;
  amax1.lo[0] = amax2.lo[0] = 100, amax1.hi[0] = amax2.hi[0] = 900;
  amax1.seg_len[0] = amax2.seg_len[0] = 400;
  amax1.words[0] = words, amax2.words[0] = words + 2;
  cudaMemcpy(dg, g.data(), n * 4, cudaMemcpyHostToDevice);
  for (float* p : {dw1, dw2}) cudaMemcpy(p, w.data(), n * 4, cudaMemcpyHostToDevice);
  for (float* p : {dm1, dm2, dv1, dv2}) cudaMemcpy(p, m0.data(), n * 4, cudaMemcpyHostToDevice);
  int applied = 0;
  for (int step = 0; step < 40; step++) {
    const bool bad = step % 7 == 3 || step % 11 == 5;
    const float c[2] = {float(0.5 + step), bad ? 1.f : 0.f};
    cudaMemcpy(check, c, sizeof(c), cudaMemcpyHostToDevice);
    const double scale = host.scale;
    tg::gpu::launch(tg::gpu::loss_scale_step_kernel, 1, 32, 0, nullptr, d, check, host.params(),
                    2.0);
    const bool skip = host.update(bad);
    applied += skip ? 0 : 1;
    tg::gpu::AdamWParams a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.f, 0.5f, 0.25f,
                           false, 0,    0,     {},    {},   0,   0};
    const double norm = std::sqrt(double(c[0]));
    a.grad_scale = float((norm > 2.0 ? 2.0 / norm : 1.0) / scale);
    REQUIRE(cudaMemset(words, 0, 4 * sizeof(unsigned)) == cudaSuccess);
    if (!skip)
      tg::gpu::launch(tg::gpu::adamw_kernel<float, float, float>, 4, 256, 0, nullptr, dw1,
                      tg::gpu::MasterPtrs{dw1, nullptr}, dg, dm1, dv1, n, a, amax1);
    a.grad_scale = 0.f;  // must not be used
    tg::gpu::launch(tg::gpu::adamw_device_kernel<float, float, float>, 4, 256, 0, nullptr, dw2,
                    tg::gpu::MasterPtrs{dw2, nullptr}, dg, dm2, dv2, n, a, amax2, d);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    tg::LossScaleDevice got;
    cudaMemcpy(&got, d, sizeof(got), cudaMemcpyDeviceToHost);
    INFO("step " << step);
    CHECK(bool(got.step.skip) == skip);
    CHECK(got.state.scale == host.scale);
    CHECK(got.state.good_steps == host.good_steps);
    CHECK(got.state.hysteresis_left == host.hysteresis_left);
    CHECK(got.applied == applied);
    std::vector<float> w1(n), w2(n);
    cudaMemcpy(w1.data(), dw1, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(w2.data(), dw2, n * 4, cudaMemcpyDeviceToHost);
    CHECK(w1 == w2);
    unsigned got_words[4];
    cudaMemcpy(got_words, words, sizeof(got_words), cudaMemcpyDeviceToHost);
    for (int s = 0; s < 2; s++) {
      unsigned want = 0;
      for (size_t i = 100 + 400 * size_t(s); i < 500 + 400 * size_t(s); i++)
        want = std::max(want, tg::f32_bits(w2[i]) & 0x7fffffffu);
      CHECK(got_words[2 + s] == want);
      if (!skip) CHECK(got_words[s] == want);
    }
  }
  for (void* p : {(void*)d, (void*)check, (void*)dg, (void*)dw1, (void*)dw2, (void*)dm1, (void*)dm2,
                  (void*)dv1, (void*)dv2, (void*)words})
    cudaFree(p);
}
