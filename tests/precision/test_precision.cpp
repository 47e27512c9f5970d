// Mixed precision on the CPU backend: storage conversions, ops and whole-model gradients in
// bf16/fp16 against fp32, fp16 underflow with and without loss scaling, the loss scaler.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/exp_fp32.h"
#include "src/backends/cpu/ops.h"
#include "src/backends/cpu/storage.h"
#include "src/backends/cpu/tanh_fp32.h"
#include "src/model/model.h"
#include "src/numerics/formats.h"
#include "src/numerics/loss_scaler.h"
#include "tests/test_util.h"

using namespace tg;

namespace {
double rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

struct Batch {
  std::vector<int32_t> in, tg;
};
Batch random_batch(int B, int T, int V, uint64_t seed) {
  Rng r(seed);
  Batch b;
  for (int i = 0; i < B * T; i++) {
    b.in.push_back(int32_t(r.below(V)));
    b.tg.push_back(int32_t(r.below(V)));
  }
  return b;
}
}  // namespace

TEST_CASE("precision: CPU storage conversions equal formats.h on every code") {
  int bad = 0;
  for (uint32_t c = 0; c < 65536; c++) {
    float a = cpu::ld(cpu::f16{uint16_t(c)}), b = f16_to_f32(uint16_t(c));
    bad += f32_bits(a) != f32_bits(b);
    a = cpu::ld(cpu::bf16{uint16_t(c)});
    b = bf16_to_f32(uint16_t(c));
    bad += f32_bits(a) != f32_bits(b);
  }
  CHECK(bad == 0);
  Rng r(11);
  bad = 0;
  for (int i = 0; i < 2000000; i++) {
    // Random bit patterns, and values in fp16's range including subnormals and ties.
    uint32_t bits = i % 2 ? uint32_t(r.next())
                          : f32_bits(float(r.normal() * std::ldexp(1.0, int(r.below(40)) - 26)));
    float x = bits_f32(bits);
    bad += cpu::st<cpu::f16>(x).bits != f32_to_f16(x);
    bad += cpu::st<cpu::bf16>(x).bits != f32_to_bf16(x);
  }
  for (float x : {0.f, -0.f, INFINITY, -INFINITY, NAN, 65504.f, 65520.f, 65519.99f, 5.96e-8f,
                  2.98e-8f, 1e-10f, -1e10f})
    bad += cpu::st<cpu::f16>(x).bits != f32_to_f16(x);
  CHECK(bad == 0);
}

TEST_CASE("precision: 16-bit tensors really are 16-bit") {
  auto be = make_cpu_backend();
  GPTConfig c = gpt_config(2, 2, 32, 256, 32);
  size_t before = be->bytes_in_use();
  { GPT m(c, *be, DType::F32); }
  size_t fp32_bytes = be->peak_bytes() - before;
  auto be2 = make_cpu_backend();
  { GPT m(c, *be2, DType::BF16); }
  size_t bf16_bytes = be2->peak_bytes();
  // fp32: weights, grads, m, v = 16 bytes/param; bf16: 2 + 2 + master 4 + m 4 + v 4 = 16.
  // Equal parameter memory; the saving is in activations, checked next.
  CHECK(bf16_bytes == doctest::Approx(double(fp32_bytes)).epsilon(0.01));
  // Activations are where it shows: after a forward pass the bf16 model holds far less.
  std::vector<int32_t> in(8 * 32, 1), tg(8 * 32, 2);
  {
    GPT a(c, *be, DType::F32);
    a.forward(in.data(), tg.data(), 8, 32, 0.0f);
  }
  {
    GPT b(c, *be2, DType::BF16);
    b.forward(in.data(), tg.data(), 8, 32, 0.0f);
  }
  CHECK(double(be2->peak_bytes()) < 0.8 * double(be->peak_bytes()));
}

TEST_CASE("precision: bf16 and fp16 models track the fp32 model") {
  GPTConfig c = gpt_config(2, 4, 64, 256, 32);
  const int B = 4, T = 32;
  Batch bt = random_batch(B, T, 256, 5);
  auto be = make_cpu_backend();
  GPT ref(c, *be, DType::F32);
  ref.init_random(3);
  ref.zero_grad();
  double ref_loss = ref.forward(bt.in.data(), bt.tg.data(), B, T, 1.0f);
  ref.backward();
  std::vector<double> gref = ref.grads_f64();
  for (DType dt : {DType::BF16, DType::F16}) {
    GPT m(c, *be, dt);
    m.init_random(3);
    m.zero_grad();
    // fp16 gradients of this size need a loss scale; bf16's range does not.
    const float scale = dt == DType::F16 ? 1024.f : 1.f;
    double loss = m.forward(bt.in.data(), bt.tg.data(), B, T, scale);
    m.backward();
    std::vector<double> g = m.grads_f64();
    for (double& x : g) x /= scale;
    INFO(dtype_name(dt));
    CHECK(std::fabs(loss - ref_loss) / ref_loss < 1e-2);
    CHECK(rel_err(g, gref) < (dt == DType::BF16 ? 5e-2 : 1e-2));
    // The compute weights are the master weights rounded to nearest.
    std::vector<double> master = m.params_f64();
    std::vector<double> w = ref.params_f64();
    CHECK(master == w);
  }
}

TEST_CASE("precision: fp16 gradients underflow without loss scaling and survive with it") {
  // A large batch split into many micro-batches makes each micro-batch's gradient small
  // (dloss = 1/1024), as gradient accumulation over many micro-batches does.
  GPTConfig c = gpt_config(2, 4, 64, 256, 32);
  const int B = 2, T = 32;
  Batch bt = random_batch(B, T, 256, 9);
  const float dloss = 1.0f / 1024;
  auto be = make_cpu_backend();
  GPT ref(c, *be, DType::F32), h(c, *be, DType::F16);
  ref.init_random(4);
  h.init_random(4);
  ref.zero_grad();
  ref.forward(bt.in.data(), bt.tg.data(), B, T, dloss);
  ref.backward();
  std::vector<double> gref = ref.grads_f64();
  auto underflow_fraction = [&](const std::vector<double>& g) {
    size_t nonzero = 0, lost = 0;
    for (size_t i = 0; i < g.size(); i++)
      if (gref[i] != 0) {
        nonzero++;
        lost += g[i] == 0;
      }
    return double(lost) / double(nonzero);
  };
  h.zero_grad();
  h.forward(bt.in.data(), bt.tg.data(), B, T, dloss);
  h.backward();
  std::vector<double> g_plain = h.grads_f64();
  const double lost_plain = underflow_fraction(g_plain);
  h.zero_grad();
  const float scale = 65536.f;
  h.forward(bt.in.data(), bt.tg.data(), B, T, dloss * scale);
  h.backward();
  std::vector<double> g_scaled = h.grads_f64();
  for (double& x : g_scaled) x /= scale;
  const double lost_scaled = underflow_fraction(g_scaled);
  MESSAGE("fp16 gradients lost to underflow: " << 100 * lost_plain << "% unscaled, "
                                               << 100 * lost_scaled << "% with scale 65536");
  CHECK(lost_plain > 0.05);
  CHECK(lost_scaled < 0.002);
  CHECK(rel_err(g_plain, gref) > 0.05);
  CHECK(rel_err(g_scaled, gref) < 1e-2);
}

// fp16 dlogits carry the loss scale (dloss = scale / tokens on every entry): a scale so large
// that the target's dlogit (about -dloss) passes fp16's 65504 must give inf there, never a value
// clamped to the largest half, so that the step's gradients are non-finite and the loss scaler
// skips it and halves the scale.
TEST_CASE("precision: an fp16 dlogit beyond the range is inf and the step's gradients non-finite") {
  GPTConfig c = gpt_config(2, 4, 64, 256, 32);
  const int B = 2, T = 32, N = B * T, V = 256, Vp = c.padded_vocab_size;
  Batch bt = random_batch(B, T, 256, 13);
  auto be = make_cpu_backend();
  // The op: dloss 1e5 per token, the logits as the lm_head's forward leaves them.
  Tensor logits = be->alloc(DType::F32, size_t(N) * Vp), losses = be->alloc(DType::F32, N);
  Tensor tgt = be->alloc(DType::I32, N);
  std::vector<float> z(size_t(N) * Vp);
  Rng r(14);
  for (float& x : z) x = float(r.normal());
  be->upload(logits, z.data());
  be->upload(tgt, bt.tg.data());
  const Tensor dl = dlogits_view(logits, DType::F16);
  be->classifier(logits, losses, tgt, dl, 1e5f, N, V, Vp);
  std::vector<uint16_t> h(dl.numel);
  be->download(h.data(), dl);
  int neg_inf = 0, finite = 0;
  for (int n = 0; n < N; n++)
    for (int i = 0; i < V; i++) {
      const uint16_t code = h[size_t(n) * 2 * Vp + i];
      if (i == bt.tg[size_t(n)])
        neg_inf += code == 0xFC00;
      else
        finite += (code & 0x7C00) != 0x7C00;
    }
  CHECK(neg_inf == N);
  CHECK(finite == N * (V - 1));
  // The model: a loss scale of 2^23 (1.3e5 per token) gives non-finite gradients; 2^10 not.
  GPT m(c, *be, DType::F16);
  m.init_random(4);
  for (double scale : {8388608.0, 1024.0}) {
    INFO("loss scale " << scale);
    m.zero_grad();
    m.forward(bt.in.data(), bt.tg.data(), B, T, float(scale));
    m.backward();
    CHECK(m.check_grads(scale).finite == (scale < 1e6));
  }
  for (Tensor t : {logits, losses, tgt}) be->free(t);
}

TEST_CASE("precision: stochastic rounding of the weight copy is unbiased and seeded") {
  auto be = make_cpu_backend();
  const size_t n = 1 << 16;
  Tensor src = be->alloc(DType::F32, n), dst = be->alloc(DType::BF16, n),
         back = be->alloc(DType::F32, n);
  std::vector<float> x(n, 1.0f + 1.0f / 1024);  // a quarter of a bf16 ulp above 1
  be->upload(src, x.data());
  be->convert(dst, src, Rounding{true, 42, 0});
  be->convert(back, dst, Rounding{});
  std::vector<float> y(n);
  be->download(y.data(), back);
  double mean = 0;
  for (float v : y) {
    CHECK((v == 1.0f || v == 1.0078125f));
    mean += v;
  }
  mean /= n;
  CHECK(std::fabs(mean - (1.0 + 1.0 / 1024)) < 2e-4);
  std::vector<uint16_t> a(n), b(n);
  be->download(a.data(), dst);
  be->convert(dst, src, Rounding{true, 42, 0});
  be->download(b.data(), dst);
  CHECK(a == b);
  be->convert(dst, src, Rounding{true, 43, 0});
  be->download(b.data(), dst);
  CHECK(a != b);
  be->convert(dst, src, Rounding{});
  be->download(b.data(), dst);
  for (uint16_t v : b) CHECK(v == 0x3F80);  // to nearest: 1.0
}

TEST_CASE("precision: loss scaler sequences") {
  SUBCASE("backoff on overflow, growth after the interval, bounded") {
    LossScaler s = LossScaler::make(LossScaling::Dynamic, 1024, 3, 2.0, 0.5, 256, 4096, 1);
    CHECK(s.update(true));  // skip, 512
    CHECK(s.scale == 512);
    CHECK(s.update(true));
    CHECK(s.scale == 256);
    CHECK(s.update(true));
    CHECK(s.scale == 256);  // min
    for (int i = 0; i < 2; i++) CHECK_FALSE(s.update(false));
    CHECK(s.scale == 256);
    CHECK_FALSE(s.update(false));  // third clean step: grow
    CHECK(s.scale == 512);
    for (int i = 0; i < 9; i++) s.update(false);
    CHECK(s.scale == 4096);  // 512 -> 1024 -> 2048 -> 4096
    for (int i = 0; i < 6; i++) s.update(false);
    CHECK(s.scale == 4096);  // max
    s.update(false);
    s.update(false);
    s.update(true);  // an overflow resets the clean-step count
    CHECK(s.scale == 2048);
    s.update(false);
    s.update(false);
    CHECK(s.scale == 2048);
    s.update(false);
    CHECK(s.scale == 4096);
  }
  SUBCASE("hysteresis tolerates that many overflows before backing off") {
    LossScaler s = LossScaler::make(LossScaling::Dynamic, 1024, 100, 2.0, 0.5, 1, 1e9, 3);
    CHECK(s.update(true));
    CHECK(s.update(true));
    CHECK(s.scale == 1024);
    CHECK(s.update(true));
    CHECK(s.scale == 512);
    CHECK(s.update(true));
    CHECK(s.scale == 512);
  }
  SUBCASE("static and none never change; both skip non-finite steps") {
    LossScaler st = LossScaler::make(LossScaling::Static, 128, 1, 2, 0.5, 1, 1e9, 1);
    CHECK(st.update(true));
    CHECK_FALSE(st.update(false));
    CHECK(st.update(true));
    CHECK(st.scale == 128);
    LossScaler none = LossScaler::make(LossScaling::None, 128, 1, 2, 0.5, 1, 1e9, 1);
    CHECK(none.scale == 1);
    CHECK(none.update(true));
    CHECK(none.scale == 1);
  }
}

TEST_CASE("precision: the memory plan matches what the model allocates") {
  GPTConfig c = gpt_config(3, 4, 48, 300, 64);
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    auto be = make_cpu_backend();
    {
      GPT m(c, *be, dt);
      m.init_random(1);
      std::vector<int32_t> in(4 * 64, 1), tg(4 * 64, 2);
      m.forward(in.data(), tg.data(), 4, 64, 1.0f);
      m.backward();
    }
    MemoryPlan p = plan_memory(c, dt, 4, 64);
    INFO(dtype_name(dt));
    // Exact up to the 64-byte rounding of each of the (at most 9) buffers.
    CHECK(be->peak_bytes() >= p.total());
    CHECK(be->peak_bytes() <= p.total() + 9 * 64);
  }
  // bf16 halves the compute-type activations; on an activation-heavy shape the whole
  // footprint drops well below 0.65x of fp32.
  GPTConfig wide = gpt_config(2, 4, 64, 256, 256);
  double ratio = double(plan_memory(wide, DType::BF16, 32, 256).total()) /
                 double(plan_memory(wide, DType::F32, 32, 256).total());
  MESSAGE("bf16 / fp32 memory at L2 C64 B32 T256: " << ratio);
  CHECK(ratio < 0.65);
}

// The shared update function (loss_scale_update, also run on the device by
// kernels/loss_scale.cuh) against an independent copy of the state machine as it was written
// before, and loss_scale_step's decision against src/training/train.cpp's.
TEST_CASE("precision: loss_scale_update / loss_scale_step follow the original state machine") {
  struct Ref {
    double scale;
    int good = 0, hyst;
    bool update(bool bad, int interval, double growth, double backoff, double lo, double hi,
                int hysteresis) {
      if (bad) {
        good = 0;
        if (--hyst <= 0) {
          scale = std::max(scale * backoff, lo);
          hyst = hysteresis;
        }
        return true;
      }
      if (++good >= interval) {
        scale = std::min(scale * growth, hi);
        good = 0;
        hyst = hysteresis;
      }
      return false;
    }
  };
  uint64_t x = 12345;
  auto rnd = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return double(x >> 11) / double(1ull << 53);
  };
  for (int hysteresis : {1, 2, 3})
    for (double clip : {0.0, 1.0}) {
      LossScaler s =
          LossScaler::make(LossScaling::Dynamic, 1024, 4, 2.0, 0.5, 64, 8192, hysteresis);
      LossScaleState dev = s.state();  // what the device kernel would hold
      Ref r{1024, 0, hysteresis};
      for (int step = 0; step < 400; step++) {
        const bool bad = rnd() < 0.3;
        const float sumsq = float(rnd() * 4), nonfinite = bad ? 1.f : 0.f;
        const double scale_before = s.scale;
        const bool skip_ref = r.update(bad, 4, 2.0, 0.5, 64, 8192, hysteresis);
        CHECK(s.update(bad) == skip_ref);
        const LossScaleStep st = loss_scale_step(dev, s.params(), sumsq, nonfinite, clip);
        CHECK(bool(st.skip) == skip_ref);
        CHECK(s.scale == r.scale);
        CHECK(s.good_steps == r.good);
        CHECK(s.hysteresis_left == r.hyst);
        CHECK(dev.scale == s.scale);
        CHECK(dev.good_steps == s.good_steps);
        CHECK(dev.hysteresis_left == s.hysteresis_left);
        if (!skip_ref) {  // src/training/train.cpp's factor
          const double norm = std::sqrt(double(sumsq));
          const double cf = (clip > 0 && norm > clip) ? clip / norm : 1.0;
          CHECK(st.grad_scale == float(cf / scale_before));
          CHECK(st.norm == norm);
        }
      }
    }
  LossScaleState st{8, 0, 1};
  CHECK(loss_scale_step(st, LossScaler::make(LossScaling::Static, 8, 1, 2, 0.5, 1, 1e9, 1).params(),
                        INFINITY, 0.f, 0)
            .skip);
  CHECK(st.scale == 8);
}

// cuda.attention=cudnn: the CPU backend runs its lse twin (the model keeps lse(B,NH,T) in the
// statistics instead of att): the plan still matches, and the step matches the att path.
TEST_CASE("precision: the lse twin's plan and step match the att path") {
  GPTConfig c = gpt_config(2, 4, 64, 300, 48);
  const int B = 3, T = 37;  // T: not a multiple of any tile
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; i++) {
    in[i] = (i * 7 + 3) % 300;
    tg[i] = (i * 13 + 5) % 300;
  }
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    INFO(dtype_name(dt));
    double loss[2];
    std::vector<double> grads[2];
    for (int lse = 0; lse < 2; lse++) {
      BackendOptions o;
      if (lse) o.attention = AttentionRequest::Cudnn;
      auto be = make_cpu_backend(o);
      CHECK(be->attention_saves_lse(16, dt) == bool(lse));
      size_t peak = 0;
      {
        GPT m(c, *be, dt);
        CHECK(m.attention_lse() == bool(lse));
        m.init_random(1);
        loss[lse] = m.forward(in.data(), tg.data(), B, T, 1.0f);
        m.backward();
        peak = be->peak_bytes();  // grads_f64 borrows backend memory of its own
        grads[lse] = m.grads_f64();
      }
      MemoryPlan p = plan_memory(c, dt, B, T, 1, lse);
      CHECK(peak >= p.total());
      CHECK(peak <= p.total() + 9 * 64);
    }
    const double tol = dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : 1e-2;
    CHECK(std::abs(loss[1] - loss[0]) <= tol * std::abs(loss[0]));
    double num = 0, den = 0;
    for (size_t i = 0; i < grads[0].size(); i++) {
      num += (grads[1][i] - grads[0][i]) * (grads[1][i] - grads[0][i]);
      den += grads[0][i] * grads[0][i];
    }
    CHECK(std::sqrt(num / den) < tol);
  }
  // lse instead of att: the plan shrinks by the T x T probabilities
  GPTConfig g = gpt_config(12, 12, 768, 50257, 1024);
  CHECK(plan_memory(g, DType::BF16, 8, 1024, 1, true).total() <
        plan_memory(g, DType::BF16, 8, 1024).total() - size_t(12) * 8 * 12 * 1024 * 1024);
}

namespace {
// Independent quantize-dequantize of one value, from formats.h.
float qdq_ref(float x, float s, bool e4m3) {
  return e4m3 ? e4m3_to_f32(f32_to_e4m3(x * s, true)) / s
              : e5m2_to_f32(f32_to_e5m2(x * s, true)) / s;
}
}  // namespace

TEST_CASE("fp8: the FP8 linear equals quantize-dequantize with fp32 accumulation") {
  auto be = make_cpu_backend();
  const int N = 12, C = 20, OC = 9;
  Rng r(21);
  std::vector<float> x(N * C), w(OC * C), b(OC), g(N * OC);
  for (auto& v : x) v = float(r.normal() * 3);
  for (auto& v : w) v = float(r.normal() * 0.05);
  for (auto& v : b) v = float(r.normal() * 0.1);
  for (auto& v : g) v = float(r.normal() * 1e-3);
  auto upload = [&](const std::vector<float>& v) {
    Tensor f = be->alloc(DType::F32, v.size()), h = be->alloc(DType::BF16, v.size());
    be->upload(f, v.data());
    be->convert(h, f, Rounding{});
    std::vector<float> back(v.size());
    be->convert(f, h, Rounding{});
    be->download(back.data(), f);
    return std::make_pair(h, back);  // the bf16 tensor and its exact values
  };
  auto [X, xv] = upload(x);
  auto [W, wv] = upload(w);
  auto [Bi, bv] = upload(b);
  auto [G, gv] = upload(g);
  Tensor out = be->alloc(DType::BF16, N * OC), outf = be->alloc(DType::F32, N * OC);
  float ag = 0;
  for (float v : gv) ag = std::max(ag, std::fabs(v));
  const float sg = fp8_scale_from_amax(ag, E5M2_MAX, 1);
  for (bool current : {false, true}) {
    // The per-tensor linear (slot 0, margin 1): given delayed scales, or current ones.
    const QuantRecipe rc =
        fp8_tensor_recipe(current ? ScaleSource::Current : ScaleSource::Delayed, 4, 1, {});
    const ScaledLinear q{&rc, 0, {0, {0.5f, 64.0f, sg}, 1}};
    be->matmul_forward_scaled(out, X, W, Bi, N, C, OC, q);
    std::vector<float> amax = be->take_amaxes(1);
    float ax = 0, aw = 0;
    for (float v : xv) ax = std::max(ax, std::fabs(v));
    for (float v : wv) aw = std::max(aw, std::fabs(v));
    CHECK(amax[kTensorInput] == ax);
    CHECK(amax[kTensorWeight] == aw);
    float sx = current ? fp8_scale_from_amax(ax, E4M3_MAX, 1) : 0.5f;
    float sw = current ? fp8_scale_from_amax(aw, E4M3_MAX, 1) : 64.0f;
    be->convert(outf, out, Rounding{});
    std::vector<float> got(N * OC);
    be->download(got.data(), outf);
    double num = 0, den = 0;
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double acc = bv[o];
        for (int c = 0; c < C; c++)
          acc += double(qdq_ref(xv[n * C + c], sx, true)) * qdq_ref(wv[o * C + c], sw, true);
        num += (got[n * OC + o] - acc) * (got[n * OC + o] - acc);
        den += acc * acc;
      }
    INFO("current=" << current);
    CHECK(std::sqrt(num / den) < 4e-3);  // bf16 output rounding only
    // Backward: dW from the E5M2 gradient and the E4M3 input.
    Tensor dw = be->alloc(DType::BF16, OC * C), dx = be->alloc(DType::BF16, N * C),
           db = be->alloc(DType::BF16, OC);
    be->zero(dw);
    be->zero(db);
    // (the input and the weight at the forward's scales: given, or the same current amax)
    be->matmul_backward_scaled(dx, dw, db, G, X, W, N, C, OC, q);
    amax = be->take_amaxes(1);
    CHECK(amax[kTensorGrad] == ag);
    CHECK(amax[kTensorInput] == 0);  // the backward reports the gradient's alone
    std::vector<float> dwv(OC * C);
    Tensor dwf = be->alloc(DType::F32, OC * C);
    be->convert(dwf, dw, Rounding{});
    be->download(dwv.data(), dwf);
    num = den = 0;
    for (int o = 0; o < OC; o++)
      for (int c = 0; c < C; c++) {
        double acc = 0;
        for (int n = 0; n < N; n++)
          acc += double(qdq_ref(gv[n * OC + o], sg, false)) * qdq_ref(xv[n * C + c], sx, true);
        num += (dwv[o * C + c] - acc) * (dwv[o * C + c] - acc);
        den += acc * acc;
      }
    CHECK(std::sqrt(num / den) < 4e-3);
  }
}

TEST_CASE("fp8: an overflowed gradient poisons the FP8 backward so the step is skipped") {
  auto be = make_cpu_backend();
  const int N = 4, C = 8, OC = 4;
  Tensor x = be->alloc(DType::BF16, N * C), w = be->alloc(DType::BF16, OC * C),
         g = be->alloc(DType::BF16, N * OC), dx = be->alloc(DType::BF16, N * C),
         dw = be->alloc(DType::BF16, OC * C);
  std::vector<uint16_t> ones(N * C, 0x3F80), gbits(N * OC, 0x3F80);
  gbits[3] = 0x7F80;  // +inf
  be->upload(x, ones.data());
  be->upload(w, ones.data());
  be->upload(g, gbits.data());
  be->zero(dw);
  const QuantRecipe rc = fp8_tensor_recipe(ScaleSource::Current, 4, 0, {});
  be->matmul_backward_scaled(dx, dw, Tensor{}, g, x, w, N, C, OC,
                             ScaledLinear{&rc, 0, {0, {1.0f, 1.0f, 1.0f}, 0}});
  CHECK(std::isinf(be->take_amaxes(1)[kTensorGrad]));
  CHECK(std::isnan(be->sum_squares(dw)));
}

TEST_CASE("fp8: delayed and current recipes, history window, kept layers") {
  LinearQuantizers d(Fp8Config{ScaleSource::Delayed, 3, 1, {0, -1}}, 4);
  CHECK_FALSE(d.layer_in_fp8(0));
  CHECK(d.layer_in_fp8(1));
  CHECK(d.layer_in_fp8(2));
  CHECK_FALSE(d.layer_in_fp8(3));
  CHECK(d.scale(1, LinearQuantizers::FC, LinearQuantizers::INP) == 1.0f);  // empty history
  d.record(1, LinearQuantizers::FC, LinearQuantizers::INP, 2.0f);
  d.record(1, LinearQuantizers::FC, LinearQuantizers::INP, 7.0f);
  d.record(1, LinearQuantizers::FC, LinearQuantizers::INP, 1.0f);
  CHECK(d.scale(1, LinearQuantizers::FC, LinearQuantizers::INP) == 448.0f / 7.0f / 2.0f);
  d.record(1, LinearQuantizers::FC, LinearQuantizers::INP, 3.0f);
  // The history is [7, 1, 3]:
  CHECK(d.scale(1, LinearQuantizers::FC, LinearQuantizers::INP) == 448.0f / 7.0f / 2.0f);
  d.record(1, LinearQuantizers::FC, LinearQuantizers::INP, 0.5f);  // 7 leaves the window of 3
  CHECK(d.scale(1, LinearQuantizers::FC, LinearQuantizers::INP) == 448.0f / 3.0f / 2.0f);
  d.record(1, LinearQuantizers::FC, LinearQuantizers::GRAD, 1.0f);
  CHECK(d.scale(1, LinearQuantizers::FC, LinearQuantizers::GRAD) == 57344.0f / 2.0f);
  // Histories round-trip through JSON (checkpoints).
  LinearQuantizers e(Fp8Config{ScaleSource::Delayed, 3, 1, {0, -1}}, 4);
  e.from_json(d.to_json(), "test");
  CHECK(e.scale(1, LinearQuantizers::FC, LinearQuantizers::INP) ==
        d.scale(1, LinearQuantizers::FC, LinearQuantizers::INP));
  LinearQuantizers c(Fp8Config{ScaleSource::Current, 3, 0, {}}, 2);
  // current: the scale comes from the operand
  CHECK(c.scale(0, LinearQuantizers::QKV, LinearQuantizers::WEIGHT) == 1.0f);
  CHECK_THROWS_AS(LinearQuantizers(Fp8Config{ScaleSource::Delayed, 3, 0, {4}}, 4), UsageError);
}

TEST_CASE("fp8: the fast round trip equals encode + decode from formats.h") {
  Rng r(77);
  int bad = 0;
  auto check = [&](float x) {
    if (!std::isfinite(x)) return;
    float a = cpu::e4m3_round_trip(x), b = e4m3_to_f32(f32_to_e4m3(x, true));
    float c = cpu::e5m2_round_trip(x), d = e5m2_to_f32(f32_to_e5m2(x, true));
    bad += f32_bits(a) != f32_bits(b);
    bad += f32_bits(c) != f32_bits(d);
  };
  for (int i = 0; i < 4000000; i++) {
    check(bits_f32(uint32_t(r.next())));
    check(float(r.normal() * std::ldexp(1.0, int(r.below(50)) - 25)));
  }
  // Every code's value, the ties between neighbouring codes and the floats around them.
  for (int code = 0; code < 256; code++)
    for (bool e4 : {true, false}) {
      float v = e4 ? e4m3_to_f32(uint8_t(code)) : e5m2_to_f32(uint8_t(code));
      float w = e4 ? e4m3_to_f32(uint8_t(code + 1)) : e5m2_to_f32(uint8_t(code + 1));
      if (!std::isfinite(v)) continue;
      check(v);
      check(std::nextafter(v, INFINITY));
      check(std::nextafter(v, -INFINITY));
      if (std::isfinite(w) && code % 128 != 127) {
        float mid = (v + w) / 2;
        check(mid);
        check(std::nextafter(mid, INFINITY));
        check(std::nextafter(mid, -INFINITY));
      }
    }
  for (float x : {0.f, -0.f, 448.f, 463.99f, 464.f, 465.f, 1e30f, -1e30f, 57344.f, 61439.f, 61440.f,
                  1e-30f, -1e-45f})
    check(x);
  CHECK(bad == 0);
}

namespace {
// The 16-bit GELU tables (src/backends/cpu/gelu.cpp) against the per-element formulas, bit for bit:
// every input code, in a random order, with random output gradients.
template <typename T>
void check_gelu_tables() {
  const size_t n = 65536;
  std::vector<T> x(n), dout(n), got(n), want(n);
  Rng r(5);
  int bad = 0;
  for (int pass = 0; pass < 8; pass++) {
    for (size_t c = 0; c < n; c++) x[c] = T{uint16_t(c * 40503u + pass * 7919u)};  // a permutation
    for (auto& d : dout) d = cpu::st<T>(float(r.normal() * std::ldexp(1.0, int(r.below(30)) - 15)));
    cpu::gelu_backward(got.data(), x.data(), dout.data(), n);
    cpu::gelu_backward_reference(want.data(), x.data(), dout.data(), n);
    for (size_t c = 0; c < n; c++) bad += got[c].bits != want[c].bits;
    cpu::gelu_forward(got.data(), x.data(), n);
    cpu::gelu_forward_reference(want.data(), x.data(), n);
    for (size_t c = 0; c < n; c++) bad += got[c].bits != want[c].bits;
  }
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("gelu: the bf16 and fp16 tables equal the formula for every input code") {
  check_gelu_tables<cpu::bf16>();
  check_gelu_tables<cpu::f16>();
}

namespace {
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Feeds lanes (tanh_fp32, exp_fp32) in chunks and counts the inputs whose result is not the C
// library's bits, lib (a NaN for a NaN is enough).
struct LibmChecker {
  void (*lanes)(float*, size_t);
  float (*lib)(float);
  const char* name;
  std::vector<float> x, got;
  size_t checked = 0, bad = 0;
  LibmChecker(void (*l)(float*, size_t), float (*f)(float), const char* n)
      : lanes(l), lib(f), name(n) {}
  void add(float v) {
    x.push_back(v);
    if (x.size() == 1 << 16) flush();
  }
  void flush() {
    got = x;
    lanes(got.data(), got.size());
    for (size_t i = 0; i < x.size(); i++) {
      const float want = lib(x[i]);
      const bool same = std::isnan(want) ? std::isnan(got[i]) : to_bits(got[i]) == to_bits(want);
      if (!same && bad++ < 5) {
        char line[96];
        std::snprintf(line, sizeof line, "%s(%a) = %a, want %a", name, x[i], got[i], want);
        MESSAGE(line);
      }
    }
    checked += x.size();
    x.clear();
  }
};
float libm_tanh(float x) { return std::tanh(x); }
float libm_exp(float x) { return std::exp(x); }
}  // namespace

// The exhaustive check (all 2^32 inputs) was a one-off run; this is its fast sample.
TEST_CASE("gelu: tanh_fp32 gives glibc's tanhf bits: every 97th pattern, [-10, 10], the edges") {
  if (!cpu::tanh_fp32_vectorized())
    MESSAGE("tanh_fp32 runs the per-element calls here (no AVX-512F): nothing new is checked");
  LibmChecker c(cpu::tanh_fp32, libm_tanh, "tanh");
  for (uint64_t b = 0; b < (1ull << 32); b += 97) c.add(from_bits(uint32_t(b)));
  for (int i = 0; i <= 2000000; i++) c.add(float(-10 + i * 1e-5));
  // The cases' edges in x (tanh's: 2^-55, 1, 22; expm1f's at u = 2|x|: 2^-25, ln2/2, 1.5 ln2,
  // 27 ln2) and where k = round(2|x| / ln2) steps, with their neighbours, both signs.
  std::vector<float> edges = {
      0.f,      from_bits(1), from_bits(0x007fffff), from_bits(0x00800000), from_bits(0x7f7fffff),
      INFINITY, NAN,          from_bits(0x7f800001)};
  for (uint32_t b :
       {0x24000000u, 0x3f800000u, 0x41b00000u, 0x32800000u, 0x3e317218u, 0x3f051592u, 0x4115b844u})
    edges.push_back(from_bits(b));
  for (int k = 1; k <= 64; k++) edges.push_back(float((k - 0.5) * 0.6931471805599453 / 2));
  for (float e : edges)
    for (int d = -64; d <= 64; d++) {
      const float v = from_bits(to_bits(e) + uint32_t(d));
      c.add(v);
      c.add(-v);
    }
  c.flush();
  MESSAGE(c.checked << " inputs checked");
  CHECK(c.bad == 0);
}

// The exhaustive check (all 2^32 inputs) was a one-off run; this is its fast sample.
TEST_CASE(
    "attention: exp_fp32 gives glibc's expf bits: every 97th pattern, [-110, 90], the edges") {
  if (!cpu::exp_fp32_vectorized())
    MESSAGE("exp_fp32 runs the per-element calls here (no AVX-512F): nothing new is checked");
  LibmChecker c(cpu::exp_fp32, libm_exp, "exp");
  for (uint64_t b = 0; b < (1ull << 32); b += 97) c.add(from_bits(uint32_t(b)));
  for (int i = 0; i <= 2000000; i++) c.add(float(-110 + i * 1e-4));
  // The main path's bound (exponent field 0x42a, |x| just under 88), the overflow and underflow
  // thresholds, the smallest and largest floats, and where k = round(32 x / ln2) steps, with
  // their neighbours, both signs.
  std::vector<float> edges = {
      0.f,      from_bits(1), from_bits(0x007fffff), from_bits(0x00800000), from_bits(0x7f7fffff),
      INFINITY, NAN,          from_bits(0x7f800001)};
  for (uint32_t b : {0x42b00000u, 0x42b17217u, 0x42cff1b4u, 0x42ce8ecfu})
    edges.push_back(from_bits(b));
  for (int k = -4800; k <= 4100; k += 7)
    edges.push_back(float((k + 0.5) * 0.6931471805599453 / 32));
  for (float e : edges)
    for (int d = -8; d <= 8; d++) {
      const float v = from_bits(to_bits(e) + uint32_t(d));
      c.add(v);
      c.add(-v);
    }
  c.flush();
  MESSAGE(c.checked << " inputs checked");
  CHECK(c.bad == 0);
}

// The fp32 blocks (tanh_fp32, then the formula) against the per-element loops, bit for bit, on
// inputs of many scales, a partial last block included.
TEST_CASE("gelu: the fp32 passes equal the per-element loops bit for bit") {
  const size_t n = (1 << 20) + 77;
  std::vector<float> x(n), dout(n), got(n), want(n);
  Rng r(17);
  for (size_t i = 0; i < n; i++) {
    x[i] = float(r.normal() * std::ldexp(1.0, int(r.below(16)) - 10));
    dout[i] = float(r.normal() * std::ldexp(1.0, int(r.below(30)) - 15));
  }
  for (float v : {0.f, -0.f, 1e-40f, -1e-40f, 1.f, -1.f, 22.f, -22.f, 1e30f, -1e30f, INFINITY})
    x[r.below(n)] = v;
  size_t bad = 0;
  cpu::gelu_forward(got.data(), x.data(), n);
  cpu::gelu_forward_reference(want.data(), x.data(), n);
  for (size_t i = 0; i < n; i++) bad += to_bits(got[i]) != to_bits(want[i]);
  cpu::gelu_backward(got.data(), x.data(), dout.data(), n);
  cpu::gelu_backward_reference(want.data(), x.data(), dout.data(), n);
  for (size_t i = 0; i < n; i++) bad += to_bits(got[i]) != to_bits(want[i]);
  CHECK(bad == 0);
}

// src/backends/cpu/attention.cpp (dot products in lanes across the keys) against the scalar loops
// it replaced (attention_reference.cpp), bit for bit: both passes, the att path and the lse twin,
// for every element type, on odd sequence lengths and head sizes of every remainder.
namespace {
template <typename T>
std::vector<T> random_codes(size_t n, uint64_t seed, double scale) {
  Rng r(seed);
  std::vector<T> x(n);
  for (auto& v : x) v = cpu::st<T>(cpu::acc_t<T>(r.normal() * scale));
  return x;
}

// Counts the elements of a and b whose bytes differ (element types without padding).
template <typename T>
size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

template <typename T>
size_t attention_lanes_vs_reference(int B, int T_, int hs, int NH, uint64_t seed) {
  using A = cpu::acc_t<T>;
  const int C = hs * NH;
  const size_t n = size_t(B) * T_ * C, na = size_t(B) * NH * T_ * T_;
  // Scores of a few units, so the softmax rows are neither flat nor one-hot.
  const std::vector<T> qkv = random_codes<T>(3 * n, seed, 1.5),
                       dout = random_codes<T>(n, seed + 1, 1);
  std::vector<T> out(n), out_ref(n), att(na), att_ref(na), d(3 * n), d_ref(3 * n);
  size_t bad = 0;
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T_, C, NH);
  cpu::attention_forward_reference(out_ref.data(), att_ref.data(), qkv.data(), B, T_, C, NH);
  bad += differing(out, out_ref) + differing(att, att_ref);
  cpu::attention_backward(d.data(), dout.data(), qkv.data(), att_ref.data(), B, T_, C, NH);
  cpu::attention_backward_reference(d_ref.data(), dout.data(), qkv.data(), att_ref.data(), B, T_, C,
                                    NH);
  bad += differing(d, d_ref);
  std::vector<A> lse(size_t(B) * NH * T_), lse_ref(lse.size());
  cpu::attention_forward_lse(out.data(), lse.data(), qkv.data(), B, T_, C, NH);
  cpu::attention_forward_lse_reference(out_ref.data(), lse_ref.data(), qkv.data(), B, T_, C, NH);
  bad += differing(out, out_ref) + differing(lse, lse_ref);
  cpu::attention_backward_lse(d.data(), dout.data(), qkv.data(), out_ref.data(), lse_ref.data(), B,
                              T_, C, NH);
  cpu::attention_backward_lse_reference(d_ref.data(), dout.data(), qkv.data(), out_ref.data(),
                                        lse_ref.data(), B, T_, C, NH);
  bad += differing(d, d_ref);
  return bad;
}

template <typename T>
void check_attention_shapes(const char* type) {
  uint64_t seed = 100;
  for (int T_ : {1, 7, 64, 129})
    for (int hs : {8, 12, 64})
      for (auto [B, NH] : {std::pair{1, 1}, std::pair{3, 4}}) {
        CAPTURE(type);
        CAPTURE(T_);
        CAPTURE(hs);
        CAPTURE(B * NH);
        CHECK(attention_lanes_vs_reference<T>(B, T_, hs, NH, seed++) == 0);
      }
}

template <typename T>
void check_attention_head_sizes(const char* type) {
  for (int hs = 1; hs <= 70; hs++) {
    CAPTURE(type);
    CAPTURE(hs);
    CHECK(attention_lanes_vs_reference<T>(2, 19, hs, 2, 500 + hs) == 0);
  }
}
}  // namespace

TEST_CASE("attention: lanes equal the reference bit for bit, T 1 to 129, B*NH 1 and 12") {
  check_attention_shapes<float>("float");
  check_attention_shapes<cpu::bf16>("bf16");
  check_attention_shapes<cpu::f16>("f16");
  check_attention_shapes<double>("double");
}

TEST_CASE("attention: lanes equal the reference bit for bit, every head size 1 to 70") {
  check_attention_head_sizes<float>("float");
  check_attention_head_sizes<cpu::bf16>("bf16");
  check_attention_head_sizes<cpu::f16>("f16");
  check_attention_head_sizes<double>("double");
}

TEST_CASE("attention: the lanes run for every element type in this build") {
  // attention.cpp falls back to the reference when its first-use check fails; on x86-64 with
  // AVX-512 and GCC (the build the regression fixtures come from) it must not.
  if (!cpu::cpu_features().avx512f) {
    MESSAGE("no AVX-512F: attention runs the reference loops, nothing new is checked");
    return;
  }
#if !defined(__FMA__) || !defined(__OPTIMIZE__)
  // The reference rounds as the compiler builds it: without FMA and -O3's vectorisation (the
  // SAN=1 build: -O1, no -march=native) its sums differ from the release build's, the lanes'
  // first-use check sees that and the reference runs, as it should.
  MESSAGE("a build without FMA or optimisation: the reference runs, nothing new is checked");
  return;
#endif
  CHECK(cpu::attention_lanes<float>());
  CHECK(cpu::attention_lanes<cpu::bf16>());
  CHECK(cpu::attention_lanes<cpu::f16>());
  CHECK(cpu::attention_lanes<double>());
}
