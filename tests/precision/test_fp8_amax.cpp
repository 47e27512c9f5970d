// The model's side of the per-tensor linears' amaxes (Backend::take_amaxes, what keeps a device
// from waiting once per linear), checked on the CPU: the model reads them once per pass, never
// per GEMM, applies them to the histories of the layers that ran quantized (training passes
// only), and a backend that wraps the CPU one trains bit-identically to it; checkpoints carry
// the histories and the scales they give.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/model.h"
#include "tests/test_util.h"

using namespace tg;

namespace {

// Everything forwards to the CPU backend; the quantized linears' calls and the amax reads are
// counted.
class CountingBackend final : public Backend {
 public:
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  int takes = 0, scaled_calls = 0;

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
  void layernorm_forward(Tensor o, Tensor m, Tensor r, Tensor i, Tensor w, Tensor b, int N, int C,
                         InputAmax x) override {
    cpu->layernorm_forward(o, m, r, i, w, b, N, C, x);
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
  bool has_block_scaled_linears() const override { return true; }
  void matmul_forward_scaled(Tensor o, Tensor i, Tensor w, Tensor b, int N, int C, int OC,
                             const ScaledLinear& q) override {
    scaled_calls++;
    cpu->matmul_forward_scaled(o, i, w, b, N, C, OC, q);
  }
  void matmul_backward_scaled(Tensor di, Tensor dw, Tensor db, Tensor d, Tensor i, Tensor w, int N,
                              int C, int OC, const ScaledLinear& q) override {
    scaled_calls++;
    cpu->matmul_backward_scaled(di, dw, db, d, i, w, N, C, OC, q);
  }
  std::vector<float> take_amaxes(int n) override {
    takes++;
    return cpu->take_amaxes(n);
  }
  void attention_forward(Tensor o, Tensor a, Tensor q, int B, int T, int C, int NH,
                         InputAmax x) override {
    cpu->attention_forward(o, a, q, B, T, C, NH, x);
  }
  void attention_backward(Tensor dq, Tensor d, Tensor q, Tensor a, int B, int T, int C,
                          int NH) override {
    cpu->attention_backward(dq, d, q, a, B, T, C, NH);
  }
  void gelu_forward(Tensor o, Tensor i, size_t n, InputAmax x) override {
    cpu->gelu_forward(o, i, n, x);
  }
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

TEST_CASE("fp8: amaxes read once per pass train as the CPU does (both recipes, kept layer)") {
  const GPTConfig cfg = gpt_config(3, 2, 32, 60, 16);
  const int B = 2, T = 16;
  for (ScaleSource recipe : {ScaleSource::Delayed, ScaleSource::Current}) {
    INFO(enum_name(recipe));
    Fp8Config fc;
    fc.recipe = recipe;
    fc.history_len = 3;
    fc.keep_bf16 = {1};
    auto eager = make_cpu_backend();
    CountingBackend counted;
    LinearQuantizers se(fc, cfg.n_layer), sl(fc, cfg.n_layer);
    GPT me(cfg, *eager, DType::BF16), ml(cfg, counted, DType::BF16);
    me.set_quantizers(&se);
    ml.set_quantizers(&sl);
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
    // 5 steps of 3 forwards and 2 backwards: one read each; 8 quantized linears (layer 1 kept)
    CHECK(counted.takes == 5 * 5);
    CHECK(counted.scaled_calls == 5 * 5 * 8);
    // Histories of the quantized layers only: training passes, at most history_len entries.
    const nlohmann::json j = sl.to_json();
    for (int l = 0; l < cfg.n_layer; l++)
      for (int x = 0; x < 12; x++)
        CHECK(j["amax_history"][l * 12 + x].size() == (l == 1 ? 0u : 3u));
    // Checkpoints carry the histories and the scales they give (layer, linear, operand).
    REQUIRE(j.at("scales").size() == size_t(cfg.n_layer) * 12);
    const float s = sl.scale(2, LinearQuantizers::FC, LinearQuantizers::GRAD);
    CHECK(j["scales"][(2 * 4 + LinearQuantizers::FC) * 3 + LinearQuantizers::GRAD].get<float>() ==
          s);
    if (recipe == ScaleSource::Delayed) CHECK(s != 1.0f);
  }
}

// A checkpoint's fp8 section as the fp8 mode wrote it before per-tensor FP8 ran as a recipe
// (tests/fixtures/fp8_state_e75acd3.json: main at e75acd3, history 4, two layers): it loads,
// and the scales derived from its histories are the ones that code wrote beside them, bit for
// bit, so a run resumed from such a checkpoint quantizes as it would have.
TEST_CASE("fp8: a checkpoint written before per-tensor FP8 ran as a recipe loads, same scales") {
  const nlohmann::json fx =
      nlohmann::json::parse(tgt::slurp("tests/fixtures/fp8_state_e75acd3.json"));
  const nlohmann::json& old = fx.at("fp8");
  Fp8Config fc;
  fc.history_len = old.at("history_len").get<int>();
  LinearQuantizers s(fc, 2);
  s.from_json(old, "fp8_state_e75acd3.json");
  const nlohmann::json now = s.to_json();
  CHECK(now.at("amax_history") == old.at("amax_history"));
  REQUIRE(now.at("scales").size() == old.at("scales").size());
  for (size_t i = 0; i < old.at("scales").size(); i++) {
    CAPTURE(i);
    CHECK(now["scales"][i].get<float>() == old["scales"][i].get<float>());
  }
  // What a linear hands the backend comes from the same histories.
  const ScaledLinear q = s.scaled(1, LinearQuantizers::FC, false);
  CHECK(q.tensor.scale[kTensorInput] == old["scales"][(4 + LinearQuantizers::FC) * 3].get<float>());
  CHECK(old.at("recipe") == "delayed");
  // A model with other layers refuses it by name.
  LinearQuantizers three(fc, 3);
  CHECK_THROWS_AS(three.from_json(old, "x"), Error);
}
