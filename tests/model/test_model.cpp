// Whole-model tests on the CPU backend: fp64 finite-difference gradients of the full GPT,
// the untrained loss, and that padding stays inert.
#include <doctest/doctest.h>

#include <cmath>

#include "src/backends/cpu/cpu_backend.h"
#include "src/model/model.h"
#include "tests/test_util.h"

using namespace tg;

namespace {
GPTConfig tiny_config() { return gpt_config(2, 2, 8, 11, 6); }
}  // namespace

TEST_CASE("model: fp64 finite-difference gradient of the whole GPT") {
  auto be = make_cpu_backend();
  GPTConfig c = tiny_config();
  GPT model(c, *be, DType::F64);
  model.init_random(7);
  // Larger weights than the GPT-2 init so every path carries a visible gradient.
  std::vector<double> p = model.params_f64();
  auto sizes = param_sizes(c);
  tg::Rng r(99);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    size_t n = i == WTE ? size_t(c.vocab_size) * c.n_embd : sizes[i];
    for (size_t k = 0; k < n; k++) p[off + k] += 0.3 * r.normal();
    off += sizes[i];
  }
  model.set_params(p);
  const int B = 2, T = 5;
  std::vector<int32_t> in = {1, 4, 4, 9, 0, 10, 2, 3, 3, 7};
  std::vector<int32_t> tg = {4, 4, 9, 0, 10, 2, 3, 3, 7, 1};
  model.zero_grad();
  double loss = model.forward(in.data(), tg.data(), B, T, 1.0f);
  model.backward();
  std::vector<double> g = model.grads_f64();
  auto f = [&] {
    model.set_params(p);
    return model.forward(in.data(), tg.data(), B, T, 0.0f);
  };
  CHECK(f() == doctest::Approx(loss).epsilon(1e-14));
  // Check every tensor separately so a failure names it.
  off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    std::vector<double> sub(p.begin() + off, p.begin() + off + sizes[i]);
    std::vector<double> gsub(g.begin() + off, g.begin() + off + sizes[i]);
    auto fi = [&] {
      std::copy(sub.begin(), sub.end(), p.begin() + off);
      return f();
    };
    double err = tgt::fd_max_error(fi, sub, gsub, 1e-6, 60);
    std::copy(sub.begin(), sub.end(), p.begin() + off);
    INFO("tensor " << param_name(i));
    CHECK(err < 1e-6);
    off += sizes[i];
  }
  // The padded rows of wte never receive gradient.
  for (size_t k = size_t(c.vocab_size) * c.n_embd; k < sizes[WTE]; k++) CHECK(g[k] == 0.0);
}

TEST_CASE("model: gradient accumulation over micro-batches equals one big batch") {
  auto be = make_cpu_backend();
  GPTConfig c = tiny_config();
  GPT model(c, *be, DType::F64);
  model.init_random(3);
  std::vector<int32_t> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, tg = {2, 3, 4, 5, 6, 7, 8, 9, 10, 0};
  model.zero_grad();
  model.forward(in.data(), tg.data(), 2, 5, 1.0f);
  model.backward();
  std::vector<double> whole = model.grads_f64();
  model.zero_grad();
  model.forward(in.data(), tg.data(), 1, 5, 0.5f);
  model.backward();
  model.forward(in.data() + 5, tg.data() + 5, 1, 5, 0.5f);
  model.backward();
  std::vector<double> split = model.grads_f64();
  double maxdiff = 0;
  for (size_t i = 0; i < whole.size(); i++)
    maxdiff = std::max(maxdiff, std::fabs(whole[i] - split[i]));
  CHECK(maxdiff < 1e-12);
}

TEST_CASE("model: untrained loss is close to ln(V)") {
  auto be = make_cpu_backend();
  GPTConfig c = gpt_config(2, 4, 32, 1000, 32);
  CHECK(c.padded_vocab_size == 1024);
  GPT model(c, *be);
  model.init_random(1);
  const int B = 4, T = 32;
  std::vector<int32_t> in(B * T), tg(B * T);
  tg::Rng r(5);
  for (int i = 0; i < B * T; i++) {
    in[i] = int32_t(r.below(1000));
    tg[i] = int32_t(r.below(1000));
  }
  double loss = model.forward(in.data(), tg.data(), B, T, 0.0f);
  CHECK(std::fabs(loss - std::log(1000.0)) < 0.05);
}

TEST_CASE("model: parameter count and layout match GPT-2 124M") {
  GPTConfig c = gpt_config(12, 12, 768, 50257, 1024);
  CHECK(c.padded_vocab_size == 50304);
  // 124,475,904 with the padded vocabulary (llm.c's count).
  CHECK(num_parameters(c) == 124475904);
}
