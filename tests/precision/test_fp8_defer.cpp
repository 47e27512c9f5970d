// The model's side of deferred FP8 reports (Backend::fp8_defer_reports, what the CUDA backend
// does to avoid one wait per linear), checked on the CPU: a backend that wraps the CPU one and
// defers its reports like a device would (returning garbage at call time, the real reports at
// fp8_take_reports) must train bit-identically to the CPU backend with eager reports, and be
// handed the setup (linears, shapes, the logits as scratch) before the first FP8 matmul.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/model.h"

using namespace tg;

namespace {

// Everything forwards to the CPU backend; FP8 reports are held back until taken.
class DeferringBackend final : public Backend {
 public:
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::vector<Fp8Report> held;
  bool defer = false;
  int prepares = 0, takes = 0, fp8_calls_before_prepare = 0;
  Fp8Setup setup;

  std::string name() const override { return "cpu"; }  // host memory, as the model expects
  Tensor alloc(DType d, size_t n) override { return cpu->alloc(d, n); }
  void free(Tensor t) override { cpu->free(t); }
  void upload(Tensor d, const void* h) override { cpu->upload(d, h); }
  void download(void* h, Tensor s) override { cpu->download(h, s); }
  void zero(Tensor t) override { cpu->zero(t); }
  size_t bytes_in_use() const override { return cpu->bytes_in_use(); }
  size_t peak_bytes() const override { return cpu->peak_bytes(); }
  void encoder_forward(Tensor o, Tensor t, Tensor we, Tensor wp, int B, int T, int C) override {
    cpu->encoder_forward(o, t, we, wp, B, T, C);
  }
  void encoder_backward(Tensor dwe, Tensor dwp, Tensor d, Tensor t, int B, int T, int C) override {
    cpu->encoder_backward(dwe, dwp, d, t, B, T, C);
  }
  void layernorm_forward(Tensor o, Tensor m, Tensor r, Tensor i, Tensor w, Tensor b, int N,
                         int C) override {
    cpu->layernorm_forward(o, m, r, i, w, b, N, C);
  }
  void layernorm_backward(Tensor di, Tensor dw, Tensor db, Tensor d, Tensor i, Tensor w, Tensor m,
                          Tensor r, int N, int C) override {
    cpu->layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  void matmul_forward(Tensor o, Tensor i, Tensor w, Tensor b, int N, int C, int OC) override {
    cpu->matmul_forward(o, i, w, b, N, C, OC);
  }
  void matmul_backward(Tensor di, Tensor dw, Tensor db, Tensor d, Tensor i, Tensor w, int N, int C,
                       int OC) override {
    cpu->matmul_backward(di, dw, db, d, i, w, N, C, OC);
  }
  void lm_head_backward(Tensor di, Tensor dw, Tensor d, Tensor i, Tensor w, int N, int C,
                        int Vp) override {
    cpu->lm_head_backward(di, dw, d, i, w, N, C, Vp);
  }
  Fp8Report hold(const Fp8Report& r) {
    if (!defer) return r;
    held.push_back(r);
    Fp8Report junk;
    junk.amax[0] = junk.amax[1] = junk.scale[0] = junk.scale[1] = NAN;
    return junk;
  }
  Fp8Report matmul_forward_fp8(Tensor o, Tensor i, Tensor w, Tensor b, int N, int C, int OC,
                               const Fp8Quant q[2]) override {
    if (prepares == 0) fp8_calls_before_prepare++;
    return hold(cpu->matmul_forward_fp8(o, i, w, b, N, C, OC, q));
  }
  Fp8Report matmul_backward_fp8(Tensor di, Tensor dw, Tensor db, Tensor d, Tensor i, Tensor w,
                                int N, int C, int OC, const Fp8Quant& gq, float is,
                                float ws) override {
    return hold(cpu->matmul_backward_fp8(di, dw, db, d, i, w, N, C, OC, gq, is, ws));
  }
  void fp8_prepare(const Fp8Setup& s) override {
    prepares++;
    setup = s;
  }
  bool fp8_defer_reports(bool on) override {
    defer = on;
    return on;
  }
  std::vector<Fp8Report> fp8_take_reports() override {
    takes++;
    std::vector<Fp8Report> r;
    r.swap(held);
    return r;
  }
  void attention_forward(Tensor o, Tensor a, Tensor q, int B, int T, int C, int NH) override {
    cpu->attention_forward(o, a, q, B, T, C, NH);
  }
  void attention_backward(Tensor dq, Tensor d, Tensor q, Tensor a, int B, int T, int C,
                          int NH) override {
    cpu->attention_backward(dq, d, q, a, B, T, C, NH);
  }
  void gelu_forward(Tensor o, Tensor i, size_t n) override { cpu->gelu_forward(o, i, n); }
  void gelu_backward(Tensor di, Tensor i, Tensor d, size_t n) override {
    cpu->gelu_backward(di, i, d, n);
  }
  void residual_forward(Tensor o, Tensor a, Tensor b, size_t n) override {
    cpu->residual_forward(o, a, b, n);
  }
  void classifier(Tensor l, Tensor ls, Tensor t, Tensor dl, float d, int N, int V,
                  int Vp) override {
    cpu->classifier(l, ls, t, dl, d, N, V, Vp);
  }
  double sum_squares(Tensor t) override { return cpu->sum_squares(t); }
  GradCheck unscale_check_norm(Tensor g, double s) override {
    return cpu->unscale_check_norm(g, s);
  }
  void adamw(Tensor p, Tensor m, Tensor g, Tensor a, Tensor v, const AdamWArgs& args) override {
    cpu->adamw(p, m, g, a, v, args);
  }
  TensorStats stats(Tensor t) override { return cpu->stats(t); }
  void convert(Tensor d, Tensor s, const Rounding& r) override { cpu->convert(d, s, r); }
};

std::vector<int32_t> tokens(size_t n, int V, uint64_t seed) {
  std::vector<int32_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& t : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = int32_t(x % uint64_t(V));
  }
  return v;
}

}  // namespace

TEST_CASE("fp8: deferred reports train bit-identically to eager ones (both recipes, kept layer)") {
  const GPTConfig cfg = gpt_config(3, 2, 32, 60, 16);
  const int B = 2, T = 16;
  for (const char* recipe : {"delayed", "current"}) {
    INFO(recipe);
    Fp8Config fc;
    fc.recipe = recipe;
    fc.history_len = 3;
    fc.keep_bf16 = {1};
    auto eager = make_cpu_backend();
    DeferringBackend lazy;
    QuantState se(fc, cfg.n_layer), sl(fc, cfg.n_layer);
    GPT me(cfg, *eager, DType::BF16), ml(cfg, lazy, DType::BF16);
    me.set_quant_state(&se);
    ml.set_quant_state(&sl);
    me.init_random(9);
    ml.init_random(9);
    for (int step = 1; step <= 5; step++) {
      const auto in = tokens(size_t(B) * T, cfg.vocab_size, 10 + step);
      const auto tg = tokens(size_t(B) * T, cfg.vocab_size, 50 + step);
      double loss[2];
      GPT* ms[2] = {&me, &ml};
      for (int k = 0; k < 2; k++) {
        ms[k]->zero_grad();
        // two micro-batches, and an evaluation forward in between (no amax recorded)
        loss[k] = ms[k]->forward(in.data(), tg.data(), B, T, 0.5f);
        ms[k]->backward();
        ms[k]->forward(tg.data(), in.data(), B, T, 0.0f);
        ms[k]->forward(tg.data(), in.data(), B, T, 0.5f);
        ms[k]->backward();
        const double n = ms[k]->check_grads(1.0).norm;
        ms[k]->adamw_step(
            {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, n > 1 ? float(1 / n) : 1.f, step, Rounding{}});
      }
      CHECK(loss[0] == loss[1]);
    }
    CHECK(me.params_f32() == ml.params_f32());
    CHECK(se.to_json() == sl.to_json());
    // Checkpoints carry the histories and the scales they give (layer, linear, operand).
    const nlohmann::json j = sl.to_json();
    REQUIRE(j.at("scales").size() == size_t(cfg.n_layer) * 12);
    const Fp8Quant q = sl.quant(2, QuantState::FC, QuantState::GRAD);
    CHECK(j["scales"][(2 * 4 + QuantState::FC) * 3 + QuantState::GRAD].get<float>() ==
          (q.current ? 1.0f : q.scale));
    if (!q.current) CHECK(q.scale != 1.0f);
    CHECK(lazy.held.empty());
    CHECK(lazy.fp8_calls_before_prepare == 0);
    CHECK(lazy.takes > 0);
    // The setup: 4 linears per FP8 layer (layer 1 kept), the four shapes, the logits.
    CHECK(lazy.setup.n_linears == 8);
    REQUIRE(lazy.setup.shapes.size() == 4);
    CHECK(lazy.setup.shapes[2].N == B * T);
    CHECK(lazy.setup.shapes[2].C == cfg.n_embd);
    CHECK(lazy.setup.shapes[2].OC == 4 * cfg.n_embd);
    CHECK(lazy.setup.shapes[3].C == 4 * cfg.n_embd);
    CHECK(lazy.setup.scratch.data == ml.logits().data);
    // the logits and the losses after them
    CHECK(lazy.setup.scratch.bytes() == size_t(B) * T * (cfg.padded_vocab_size + 1) * 4);
  }
}
