// The CPU AdamW with bf16 master weights (precision.state.master, src/numerics/master_format.h;
// src/backends/cpu/adamw.cpp's adamw_bf16_master): bf16-kahan's pair keeps the weight to about
// 16 bits and tracks an fp32 master over many small updates; bf16-sr is the fp32-master update
// stochastically rounded, unbiased over seeds, where nearest rounding stagnates.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/numerics/adamw_math.h"

using tg::cpu::bf16;

namespace {

tg::AdamWArgs args(int t, tg::MasterFormat master, uint64_t seed) {
  tg::AdamWArgs a{};
  a.lr = 1e-4f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.f;
  a.grad_scale = 1.f;
  a.step = t;
  a.rounding.stochastic = master == tg::MasterFormat::BF16SR;
  a.rounding.seed = seed * 1000003u + uint64_t(t);
  a.master = master;
  return a;
}

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> out;
  for (float v : x) out.push_back(bf16{tg::f32_to_bf16(v)});
  return out;
}

// Weights near 1 (a layernorm gain) where bf16's step is 2^-7 = 0.0078: updates of lr = 1e-4
// are 1/78 of a step, so nearest rounding never moves them.
struct Problem {
  std::vector<float> w0;
  std::vector<std::vector<float>> grads;  // per step
};
Problem make_problem(size_t n, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Problem p;
  for (size_t i = 0; i < n; i++) p.w0.push_back(tg::bf16_to_f32(tg::f32_to_bf16(1.f + 0.05f * nd(rng))));
  for (int t = 0; t < steps; t++) {
    std::vector<float> g;
    // A consistent sign per element (a drift) plus noise.
    // bf16 values, so that every run sees the same gradients.
    for (size_t i = 0; i < n; i++)
      g.push_back(tg::bf16_to_f32(
          tg::f32_to_bf16((i % 2 ? 1.f : -1.f) * 0.01f + 0.003f * nd(rng))));
    p.grads.push_back(g);
  }
  return p;
}

// `steps` updates with the fp32 master weights.
std::vector<float> run_fp32(const Problem& p) {
  const size_t n = p.w0.size();
  std::vector<float> w = p.w0, m(n, 0.f), v(n, 0.f);
  for (size_t t = 0; t < p.grads.size(); t++)
    tg::cpu::adamw(w.data(), w.data(), p.grads[t].data(), m.data(), v.data(), n,
                   args(int(t) + 1, tg::MasterFormat::FP32, 0));
  return w;
}

// The same with bf16 master weights; returns the master's value (p + c for bf16-kahan).
std::vector<float> run_bf16(const Problem& p, tg::MasterFormat master, uint64_t seed) {
  const size_t n = p.w0.size();
  std::vector<bf16> w = to_bf16(p.w0), comp(n, bf16{0});
  std::vector<float> m(n, 0.f), v(n, 0.f);
  const bool kahan = master == tg::MasterFormat::BF16Kahan;
  for (size_t t = 0; t < p.grads.size(); t++) {
    std::vector<bf16> g = to_bf16(p.grads[t]);
    tg::cpu::adamw_bf16_master(w.data(), kahan ? comp.data() : nullptr, g.data(), m.data(),
                               v.data(), n, args(int(t) + 1, master, seed));
  }
  std::vector<float> out;
  for (size_t i = 0; i < n; i++)
    out.push_back(kahan ? tg::kahan_load(w[i].bits, comp[i].bits) : tg::bf16_to_f32(w[i].bits));
  return out;
}

double mean_abs_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += std::fabs(double(a[i]) - double(b[i]));
  return s / double(a.size());
}

}  // namespace

TEST_CASE("master: the Kahan pair holds a weight to about 16 bits; its residual is exact") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int k = 0; k < 100000; k++) {
    const float w = nd(rng) * std::ldexp(1.f, int(k % 40) - 20);
    uint16_t p, c;
    tg::kahan_store(w, p, c);
    CHECK(p == tg::f32_to_bf16(w));
    // c is w - p (exact in fp32) rounded to bf16: within 2^-8 of it (relative), and the pair
    // within 2^-16 of w (relative, plus the fp32 add's rounding), where p alone is within 2^-8.
    const double r = double(w) - double(tg::bf16_to_f32(p));
    REQUIRE(std::fabs(double(tg::bf16_to_f32(c)) - r) <= std::ldexp(std::fabs(r), -8));
    CHECK(std::fabs(double(tg::kahan_load(p, c)) - double(w)) <=
          std::ldexp(std::fabs(w), -16) * (1 + 0x1p-7));
  }
  // Zero and exact bf16 values have no compensation.
  uint16_t p, c;
  tg::kahan_store(1.5f, p, c);
  CHECK(c == 0);
  tg::kahan_store(0.f, p, c);
  CHECK((p == 0 && c == 0));
}

TEST_CASE("master: updates below half a bf16 step land with bf16-kahan and bf16-sr, not nearest") {
  const Problem prob = make_problem(2048, 1000, 7);
  const std::vector<float> ref = run_fp32(prob);
  // How far the fp32 master moved the weights: about 1000 x lr = 0.1.
  const double moved = mean_abs_gap(ref, prob.w0);
  CHECK(moved > 0.05);
  // bf16-kahan follows the fp32 master to within a small share of what it moved.
  const double kahan = mean_abs_gap(run_bf16(prob, tg::MasterFormat::BF16Kahan, 0), ref);
  CHECK(kahan < moved * 1e-2);
  // bf16-sr: each seed lands within a few bf16 steps; the mean over seeds is unbiased.
  const int seeds = 16;
  std::vector<double> mean(ref.size(), 0.0);
  double one = 0;
  for (int s = 0; s < seeds; s++) {
    std::vector<float> w = run_bf16(prob, tg::MasterFormat::BF16SR, uint64_t(s) + 1);
    if (s == 0) one = mean_abs_gap(w, ref);
    for (size_t i = 0; i < w.size(); i++) mean[i] += double(w[i]) / seeds;
  }
  std::vector<float> mean_f(mean.begin(), mean.end());
  CHECK(one < moved * 0.5);
  CHECK(mean_abs_gap(mean_f, ref) < one * 0.5);
  // Nearest rounding of the weights with no master (what bf16-sr is without its randomness):
  // every update is 1/78 of a step, so nothing moves at all.
  const size_t n = prob.w0.size();
  std::vector<bf16> w = to_bf16(prob.w0);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  for (size_t t = 0; t < prob.grads.size(); t++) {
    std::vector<bf16> g = to_bf16(prob.grads[t]);
    tg::AdamWArgs a = args(int(t) + 1, tg::MasterFormat::BF16SR, 0);
    a.rounding.stochastic = false;
    tg::cpu::adamw_bf16_master(w.data(), nullptr, g.data(), m.data(), v.data(), n, a);
  }
  size_t moved_any = 0;
  for (size_t i = 0; i < n; i++) moved_any += tg::bf16_to_f32(w[i].bits) != prob.w0[i];
  CHECK(moved_any == 0);
}

TEST_CASE("master: bf16-sr is the fp32-master update of the bf16 weights, stochastically rounded") {
  // One step from bf16 weights: an fp32 master holding those weights, updated and rounded
  // stochastically into the bf16 copy, gives the very bits bf16-sr stores.
  const Problem prob = make_problem(1001, 1, 9);
  const size_t n = prob.w0.size();
  std::vector<bf16> w = to_bf16(prob.w0), copy(n), g = to_bf16(prob.grads[0]);
  std::vector<float> master = prob.w0, m(n, 0.f), v(n, 0.f), m2(n, 0.f), v2(n, 0.f);
  const tg::AdamWArgs a = args(1, tg::MasterFormat::BF16SR, 5);
  tg::cpu::adamw_bf16_master(w.data(), nullptr, g.data(), m.data(), v.data(), n, a);
  tg::AdamWArgs b = a;
  b.master = tg::MasterFormat::FP32;
  tg::cpu::adamw(copy.data(), master.data(), g.data(), m2.data(), v2.data(), n, b);
  size_t diff = 0;
  for (size_t i = 0; i < n; i++) diff += w[i].bits != copy[i].bits;
  CHECK(diff == 0);
  CHECK(m == m2);
  CHECK(v == v2);
}
