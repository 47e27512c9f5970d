// Finite-difference gradient checks, in fp64, of every CPU op's backward against its
// forward. Each check uses the scalar L = sum(out * R) for a random R, so dout = R.
#include <doctest/doctest.h>

#include <cmath>

#include "src/backends/cpu/ops.h"
#include "tests/test_util.h"

using namespace tg::cpu;
using tgt::dot;
using tgt::fd_max_error;
using tgt::randn;
using Vec = std::vector<double>;

namespace {
constexpr double kTol = 1e-6;
}

TEST_CASE("grad: encoder") {
  const int B = 2, T = 5, C = 6, V = 7;
  std::vector<int32_t> tok = {0, 3, 3, 6, 1, 2, 3, 0, 0, 5};  // repeats on purpose
  Vec wte = randn(V * C, 1), wpe = randn(T * C, 2), R = randn(B * T * C, 3), out(B * T * C);
  auto loss = [&] {
    encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, R);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  encoder_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
  CHECK(fd_max_error(loss, wte, dwte) < kTol);
  CHECK(fd_max_error(loss, wpe, dwpe) < kTol);
}

TEST_CASE("grad: layernorm") {
  const int N = 6, C = 10;
  Vec x = randn(N * C, 4, 2.0), w = randn(C, 5), b = randn(C, 6), R = randn(N * C, 7);
  Vec out(N * C), mean(N), rstd(N);
  for (auto& v : x) v += 0.7;  // a non-zero mean
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  loss();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  CHECK(fd_max_error(loss, x, dx) < kTol);
  CHECK(fd_max_error(loss, w, dw) < kTol);
  CHECK(fd_max_error(loss, b, db) < kTol);
  // Gradients of the input accumulate (+=) into what is there.
  Vec dx2(N * C, 1.0), dw2(C, 0.0), db2(C, 0.0);
  layernorm_backward(dx2.data(), dw2.data(), db2.data(), R.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  for (int i = 0; i < N * C; i++) CHECK(dx2[i] == doctest::Approx(dx[i] + 1.0).epsilon(1e-12));
}

TEST_CASE("grad: matmul with and without bias") {
  const int N = 5, C = 7, OC = 4;
  for (bool with_bias : {true, false}) {
    Vec x = randn(N * C, 8), w = randn(OC * C, 9), b = randn(OC, 10), R = randn(N * OC, 11);
    Vec out(N * OC);
    auto loss = [&] {
      matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
      return dot(out, R);
    };
    Vec dx(N * C, 123.0), dw(OC * C, 0.0), db(OC, 0.0);  // dx is overwritten, not added to
    matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(), x.data(),
                    w.data(), N, C, OC);
    CHECK(fd_max_error(loss, x, dx) < kTol);
    CHECK(fd_max_error(loss, w, dw) < kTol);
    if (with_bias) CHECK(fd_max_error(loss, b, db) < kTol);
  }
}

TEST_CASE("grad: attention") {
  const int B = 2, T = 6, C = 8, NH = 2;
  Vec qkv = randn(B * T * 3 * C, 12), R = randn(B * T * C, 13);
  Vec out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, R);
  };
  loss();
  // Causality: the softmax rows sum to one over u <= t and are zero beyond.
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < T; t++) {
      double s = 0;
      for (int u = 0; u < T; u++) {
        double a = att[(size_t(bh) * T + t) * T + u];
        if (u > t) CHECK(a == 0.0);
        s += a;
      }
      CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
    }
  Vec dqkv(B * T * 3 * C, 77.0);
  attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
  CHECK(fd_max_error(loss, qkv, dqkv) < kTol);
}

TEST_CASE("grad: attention output at t depends only on tokens <= t") {
  const int B = 1, T = 5, C = 4, NH = 1;
  Vec qkv = randn(B * T * 3 * C, 14), out(B * T * C), out2(B * T * C), att(T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < 3 * C; i++) qkv[(T - 1) * 3 * C + i] += 1.0;  // change the last token
  attention_forward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < (T - 1) * C; i++) CHECK(out[i] == out2[i]);
  bool changed = false;
  for (int i = (T - 1) * C; i < T * C; i++) changed |= out[i] != out2[i];
  CHECK(changed);
}

TEST_CASE("grad: gelu") {
  const size_t n = 50;
  Vec x = randn(n, 15, 2.0), R = randn(n, 16), out(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(out, R);
  };
  Vec dx(n);
  gelu_backward(dx.data(), x.data(), R.data(), n);
  CHECK(fd_max_error(loss, x, dx) < kTol);
  // Reference values of the tanh approximation.
  Vec y(3), in = {-1.0, 0.5, 3.0};
  gelu_forward(y.data(), in.data(), 3);
  CHECK(y[0] == doctest::Approx(-0.15880800939172324).epsilon(1e-12));
  CHECK(y[1] == doctest::Approx(0.34571400982514394).epsilon(1e-12));
  CHECK(y[2] == doctest::Approx(2.996362607918227).epsilon(1e-12));
}

TEST_CASE("grad: residual") {
  const size_t n = 20;
  Vec a = randn(n, 17), b = randn(n, 18), R = randn(n, 19), out(n);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), n);
    return dot(out, R);
  };
  CHECK(fd_max_error(loss, a, R) < kTol);
  CHECK(fd_max_error(loss, b, R) < kTol);
}

TEST_CASE("grad: classifier (softmax cross-entropy) over the unpadded vocabulary") {
  const int N = 4, V = 6, Vp = 8;
  std::vector<int32_t> tgt = {0, 5, 2, 2};
  Vec z = randn(N * Vp, 20, 3.0);
  const double dloss = 0.25;
  auto loss = [&] {
    Vec zz = z, losses(N);
    classifier(zz.data(), losses.data(), tgt.data(), zz.data(), Vp, 0.0f, N, V, Vp);
    double s = 0;
    for (double l : losses) s += l;
    return s * dloss;
  };
  // Direct value: -log softmax.
  {
    Vec zz = z, losses(N);
    classifier(zz.data(), losses.data(), tgt.data(), zz.data(), Vp, 0.0f, N, V, Vp);
    for (int n = 0; n < N; n++) {
      double m = -1e300, s = 0;
      for (int i = 0; i < V; i++) m = std::max(m, z[n * Vp + i]);
      for (int i = 0; i < V; i++) s += std::exp(z[n * Vp + i] - m);
      CHECK(losses[n] == doctest::Approx(m + std::log(s) - z[n * Vp + tgt[n]]).epsilon(1e-12));
    }
    CHECK(zz == z);  // dloss = 0 leaves the logits alone
  }
  Vec g = z, losses(N);
  classifier(g.data(), losses.data(), tgt.data(), g.data(), Vp, float(dloss), N, V, Vp);
  CHECK(fd_max_error(loss, z, g) < kTol);
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++) CHECK(g[n * Vp + i] == 0.0);
}

TEST_CASE("grad: adamw matches the closed form") {
  // One step from m = v = 0: the update is lr * (sign-ish g / (|g| + eps') + wd * w).
  const size_t n = 5;
  Vec w = {1.0, -2.0, 0.5, 0.0, 3.0}, g = {0.1, -0.2, 0.0, 4.0, -1e-3};
  Vec p = w, master = w, m(n, 0.0), v(n, 0.0);
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  tg::AdamWArgs args{lr, b1, b2, eps, wd, 0.5f, 1, tg::Rounding{}};
  adamw(p.data(), master.data(), g.data(), m.data(), v.data(), n, args);
  for (size_t i = 0; i < n; i++) {
    double gs = g[i] * 0.5;
    double mh = (1 - double(b1)) * gs / (1 - double(b1));
    double vh = (1 - double(b2)) * gs * gs / (1 - double(b2));
    double expect = w[i] - double(lr) * (mh / (std::sqrt(vh) + double(eps)) + double(wd) * w[i]);
    CHECK(master[i] == doctest::Approx(expect).epsilon(1e-7));
    CHECK(p[i] == master[i]);
    CHECK(m[i] == doctest::Approx((1 - double(b1)) * gs).epsilon(1e-7));
    CHECK(v[i] == doctest::Approx((1 - double(b2)) * gs * gs).epsilon(1e-7));
  }
}

TEST_CASE("grad: sum of squares") {
  Vec x = randn(1001, 21);
  double expect = 0;
  for (double v : x) expect += v * v;
  CHECK(sum_squares(x.data(), x.size()) == doctest::Approx(expect).epsilon(1e-12));
}
