// The materialised attention twin (cpu::attention_forward / attention_backward) rounds each
// score q_t . k_u * scale and each dP = dout_t . v_u to the compute type, where the CUDA
// backend's cuBLAS path stores them (its GEMMs' fp32 sums rounded once to bf16 or fp16). The
// inputs make that rounding dominate: keys and values are a large common vector plus small
// differences, so each score and dP is large (bf16's spacing there is 1/8 to 1/4) while what the
// softmax and its backward use is the differences between them. The twin's att and dq are
// compared, in fp64, with the same formulas with and without that rounding.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/backends/cpu/ops.h"

using namespace tg::cpu;

namespace {

constexpr int kT = 12, kHs = 4;  // one head: qkv is (T, 3 hs)
constexpr float kDout = 2.03125f;   // 2 (1 + 2^-6)

// |a - b| / |b| over the vectors (2-norms).
double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// x rounded to T and widened, or x itself when `round` is false.
template <typename T>
double maybe_round(double x, bool round) {
  return round ? double(ld(st<T>(float(x)))) : x;
}

// q near 2, k and v near 4 (each element a multiple of 1/16 within 1/2 of it), dout kDout (exact
// in both types, its last bit making each dP's last bits finer than either type keeps): scores
// q . k / 2 and dP = dout . v near 16 and 32, apart by a few units.
template <typename T>
std::vector<T> inputs(std::vector<T>* dout) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<T> qkv(size_t(kT) * 3 * kHs);
  for (int t = 0; t < kT; t++)
    for (int i = 0; i < kHs; i++) {
      qkv[size_t(t) * 3 * kHs + i] = st<T>(2.f + d(rng) / 16.f);
      qkv[size_t(t) * 3 * kHs + kHs + i] = st<T>(4.f + d(rng) / 16.f);
      qkv[size_t(t) * 3 * kHs + 2 * kHs + i] = st<T>(4.f + d(rng) / 16.f);
    }
  dout->assign(size_t(kT) * kHs, st<T>(kDout));
  return qkv;
}

double el(const std::vector<double>& x, int t, int part, int i) {
  return x[size_t(t) * 3 * kHs + part * kHs + i];
}

// att (T x T) from the widened qkv, each score rounded to T when `round`.
template <typename T>
std::vector<double> model_att(const std::vector<double>& x, bool round) {
  std::vector<double> att(size_t(kT) * kT, 0.0), s(kT);
  for (int t = 0; t < kT; t++) {
    double m = -INFINITY, sum = 0;
    for (int u = 0; u <= t; u++) {
      double dot = 0;
      for (int i = 0; i < kHs; i++) dot += el(x, t, 0, i) * el(x, u, 1, i);
      s[u] = maybe_round<T>(dot * 0.5, round);  // scale 1/sqrt(4)
      m = std::max(m, s[u]);
    }
    for (int u = 0; u <= t; u++) sum += std::exp(s[u] - m);
    for (int u = 0; u <= t; u++) att[size_t(t) * kT + u] = std::exp(s[u] - m) / sum;
  }
  return att;
}

// dq (T x hs) from the widened qkv, dout and att, each dP rounded to T when `round`.
template <typename T>
std::vector<double> model_dq(const std::vector<double>& x, double dout,
                             const std::vector<double>& att, bool round) {
  std::vector<double> dq(size_t(kT) * kHs, 0.0), dp(kT);
  for (int t = 0; t < kT; t++) {
    double dot = 0;
    for (int u = 0; u <= t; u++) {
      double s = 0;
      for (int i = 0; i < kHs; i++) s += dout * el(x, u, 2, i);
      dp[u] = maybe_round<T>(s, round);
      dot += att[size_t(t) * kT + u] * dp[u];
    }
    for (int u = 0; u <= t; u++) {
      const double ds = att[size_t(t) * kT + u] * (dp[u] - dot) * 0.5;
      for (int i = 0; i < kHs; i++) dq[size_t(t) * kHs + i] += ds * el(x, u, 1, i);
    }
  }
  return dq;
}

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> w(v.size());
  for (size_t i = 0; i < v.size(); i++) w[i] = ld(v[i]);
  return w;
}

template <typename T>
void check_rounding(const char* type) {
  CAPTURE(type);
  std::vector<T> dout;
  const std::vector<T> qkv = inputs<T>(&dout);
  std::vector<T> out(size_t(kT) * kHs), att(size_t(kT) * kT), dqkv(qkv.size());
  attention_forward(out.data(), att.data(), qkv.data(), 1, kT, kHs, 1);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), 1, kT, kHs, 1);
  const std::vector<double> x = widen(qkv), a = widen(att), d = widen(dqkv);
  // The twin's att: within its own rounding to T of the rounded scores' softmax, far from the
  // unrounded one.
  const double att_rounded = rel(a, model_att<T>(x, true)),
               att_exact = rel(a, model_att<T>(x, false));
  CAPTURE(att_rounded);
  CAPTURE(att_exact);
  CHECK(att_rounded < 4e-3);
  CHECK(att_exact > 4 * att_rounded);
  // Its dq, from the same att: likewise with dP.
  std::vector<double> dq(size_t(kT) * kHs);
  for (int t = 0; t < kT; t++)
    for (int i = 0; i < kHs; i++) dq[size_t(t) * kHs + i] = el(d, t, 0, i);
  const double dq_rounded = rel(dq, model_dq<T>(x, kDout, a, true)),
               dq_exact = rel(dq, model_dq<T>(x, kDout, a, false));
  CAPTURE(dq_rounded);
  CAPTURE(dq_exact);
  CHECK(dq_rounded < 4e-3);
  CHECK(dq_exact > 4 * dq_rounded);
}

}  // namespace

TEST_CASE("attention: the materialised twin rounds scores and dP to the compute type") {
  check_rounding<bf16>("bf16");
  check_rounding<f16>("f16");
}

TEST_CASE("attention: fp32's scores and dP stay fp32 (the rounding is the identity)") {
  std::vector<float> dout;
  const std::vector<float> qkv = inputs<float>(&dout);
  std::vector<float> out(size_t(kT) * kHs), att(size_t(kT) * kT);
  attention_forward(out.data(), att.data(), qkv.data(), 1, kT, kHs, 1);
  const std::vector<double> x = widen(qkv), a = widen(att);
  CHECK(rel(a, model_att<float>(x, false)) < 1e-6);
}
