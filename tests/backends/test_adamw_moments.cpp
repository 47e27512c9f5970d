// The CPU AdamW with Adam's moments stored in each precision.state.* format
// (src/backends/cpu/adamw.cpp, src/numerics/moment_format.h): one step against a
// double-precision reference, within the format's rounding; bf16-sr's stores unbiased over
// seeds; each element's random bits fixed by its index, however the update is split.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/numerics/state_format.h"

using tg::MomentFormat;
using tg::StateFormat;

namespace {

// A moment stored per format f: fp32 values, or 16-bit codes.
struct Stored {
  MomentFormat f;
  std::vector<float> wide;
  std::vector<uint16_t> codes;
  float at(size_t i) const {
    return tg::moment_is_plain(f) ? wide[i] : tg::moment_decode16(codes[i], f);
  }
};

Stored store(const std::vector<float>& x, const MomentFormat& f) {
  Stored s{f, {}, {}};
  if (tg::moment_is_plain(f)) {
    s.wide = x;
    return s;
  }
  MomentFormat nearest = f;
  nearest.stochastic = false;
  for (float xi : x) s.codes.push_back(tg::moment_encode16(xi, nearest, 0));
  return s;
}

// One AdamW step over fp32 weights with moments m and v as stored, on [lo, hi).
void step(std::vector<float>& w, const std::vector<float>& g, Stored& m, Stored& v,
          const tg::AdamWArgs& a, size_t lo, size_t hi) {
  tg::AdamWArgs b = a;
  b.m_format = m.f;
  b.v_format = v.f;
  b.rounding.offset = a.rounding.offset + lo;
  const size_t n = hi - lo;
  auto with = [&](Stored& s, auto&& fn) {
    if (tg::moment_is_plain(s.f))
      fn(s.wide.data() + lo);
    else
      fn(s.codes.data() + lo);
  };
  with(m, [&](auto* pm) {
    with(v, [&](auto* pv) {
      tg::cpu::adamw(w.data() + lo, w.data() + lo, g.data() + lo, pm, pv, n, b);
    });
  });
}

struct Problem {
  std::vector<float> w, g, m, v;
};

// Gradients over 7 decades, moments consistent with them (v >= m^2 as a running mean of
// squares makes it), weights of GPT-2's size.
Problem make_problem(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Problem p;
  for (size_t i = 0; i < n; i++) {
    const float scale = std::pow(10.f, -6.f + 6.f * u(rng));
    p.g.push_back(nd(rng) * scale);
    p.w.push_back(nd(rng) * 0.05f);
    const float m = nd(rng) * scale * 0.3f;
    p.m.push_back(m);
    p.v.push_back(m * m * (1.f + 3.f * u(rng)) + 1e-3f * scale * scale);
  }
  return p;
}

tg::AdamWArgs args(int t) {
  tg::AdamWArgs a{};
  a.lr = 3e-3f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.7f;
  a.step = t;
  a.rounding.offset = 1000;
  a.m_seed = 11;
  a.v_seed = 12;
  return a;
}

// The largest error a store in format f may make at moment value x (in the quantity the
// format stores: x itself, or sqrt(x) for fp16's v): half a step to nearest, a whole one
// stochastically; fp16's absolute floor is its subnormal spacing 2^-36 in moment units.
double store_tolerance(const MomentFormat& f, double x) {
  if (tg::moment_is_plain(f)) return 0;
  const int bits = f.dtype == tg::DType::BF16 ? 8 : 11;
  const double rel = std::ldexp(1.0, -bits) * (f.stochastic ? 2 : 1);
  const double floor = f.dtype == tg::DType::F16 ? std::ldexp(1.0, -36) : 0.0;
  return rel * std::fabs(x) + floor;
}

}  // namespace

TEST_CASE("adamw moments: one step in each format against fp64, within the format's rounding") {
  const size_t n = 20011;
  for (StateFormat fm :
       {StateFormat::FP32, StateFormat::BF16, StateFormat::BF16SR, StateFormat::FP16})
    for (StateFormat fv :
         {StateFormat::FP32, StateFormat::BF16, StateFormat::BF16SR, StateFormat::FP16})
      for (int t : {1, 7}) {
        CAPTURE(tg::state_format_name(fm));
        CAPTURE(tg::state_format_name(fv));
        CAPTURE(t);
        Problem p = make_problem(n, 5 + t);
        Stored m = store(p.m, tg::moment_format(fm, false));
        Stored v = store(p.v, tg::moment_format(fv, true));
        std::vector<float> w = p.w;
        const tg::AdamWArgs a = args(t);
        // The reference starts from the moments as stored (exact values) and runs in fp64.
        std::vector<double> m0(n), v0(n);
        for (size_t i = 0; i < n; i++) {
          m0[i] = m.at(i);
          v0[i] = v.at(i);
        }
        step(w, p.g, m, v, a, 0, n);
        const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, eps = a.eps, wd = a.weight_decay;
        const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
        size_t bad_m = 0, bad_v = 0, bad_w = 0;
        for (size_t i = 0; i < n; i++) {
          const double g = double(float(p.g[i] * a.grad_scale));
          const double md = b1 * m0[i] + (1 - b1) * g, vd = b2 * v0[i] + (1 - b2) * g * g;
          const double q = (md / c1) / (std::sqrt(vd / c2) + eps);
          const double wref = p.w[i] - lr * (q + wd * p.w[i]);
          // fp32's own rounding of the fused updates (a few units of 2^-24 of their terms).
          const double am =
              4 * std::ldexp(1.0, -24) * (b1 * std::fabs(m0[i]) + (1 - b1) * std::fabs(g));
          const double av = 4 * std::ldexp(1.0, -24) * vd;
          if (v.f.sqrt) {
            const double s = std::sqrt(double(v.at(i))), sd = std::sqrt(vd);
            bad_v += std::fabs(s - sd) > store_tolerance(v.f, sd) + av / (2 * sd + 1e-300);
          } else {
            bad_v += std::fabs(v.at(i) - vd) > store_tolerance(v.f, vd) + av;
          }
          bad_m += std::fabs(m.at(i) - md) > store_tolerance(m.f, md) + am;
          // The weight uses this step's fp32 moments, before their store: fp32 accuracy.
          const double aw = std::ldexp(1.0, -21) * (std::fabs(p.w[i]) + lr * (std::fabs(q) + 1));
          bad_w += std::fabs(w[i] - wref) > aw;
        }
        CHECK(bad_m == 0);
        CHECK(bad_v == 0);
        CHECK(bad_w == 0);
      }
}

TEST_CASE("adamw moments: the weights do not depend on the moments' format in the step itself") {
  // The update reads this step's fp32 moments: from the same stored state, every format gives
  // the fp32 format's weights, bit for bit.
  const size_t n = 4099;
  Problem p = make_problem(n, 3);
  const MomentFormat f32m = tg::moment_format(StateFormat::FP32, false),
                     f32v = tg::moment_format(StateFormat::FP32, true);
  for (StateFormat f : {StateFormat::BF16, StateFormat::BF16SR, StateFormat::FP16}) {
    CAPTURE(tg::state_format_name(f));
    Stored m = store(p.m, tg::moment_format(f, false)), v = store(p.v, tg::moment_format(f, true));
    std::vector<float> m_as_stored(n), v_as_stored(n);
    for (size_t i = 0; i < n; i++) {
      m_as_stored[i] = m.at(i);
      v_as_stored[i] = v.at(i);
    }
    Stored mw = store(m_as_stored, f32m), vw = store(v_as_stored, f32v);
    std::vector<float> w1 = p.w, w2 = p.w;
    step(w1, p.g, m, v, args(3), 0, n);
    step(w2, p.g, mw, vw, args(3), 0, n);
    CHECK(w1 == w2);
  }
}

TEST_CASE("adamw moments: bf16-sr stores are unbiased over seeds and fixed by the element index") {
  const size_t n = 512;
  Problem p = make_problem(n, 9);
  const MomentFormat sr_m = tg::moment_format(StateFormat::BF16SR, false),
                     sr_v = tg::moment_format(StateFormat::BF16SR, true),
                     f32m = tg::moment_format(StateFormat::FP32, false),
                     f32v = tg::moment_format(StateFormat::FP32, true);
  // The exact fp32 moments after one step, from states bf16 holds exactly.
  Stored m0 = store(p.m, tg::moment_format(StateFormat::BF16, false));
  Stored v0 = store(p.v, tg::moment_format(StateFormat::BF16, true));
  std::vector<float> mx(n), vx(n);
  for (size_t i = 0; i < n; i++) {
    mx[i] = m0.at(i);
    vx[i] = v0.at(i);
  }
  Stored me = store(mx, f32m), ve = store(vx, f32v);
  std::vector<float> w = p.w;
  step(w, p.g, me, ve, args(2), 0, n);
  // 4096 seeds: the mean of the stored m (and v) is the fp32 value, within the sampling error.
  const int seeds = 4096;
  std::vector<double> sum_m(n, 0.0), sum_v(n, 0.0);
  for (int s = 0; s < seeds; s++) {
    Stored m{sr_m, {}, m0.codes}, v{sr_v, {}, v0.codes};
    std::vector<float> ws = p.w;
    tg::AdamWArgs a = args(2);
    a.m_seed = uint64_t(s) * 2 + 1;
    a.v_seed = uint64_t(s) * 2 + 2;
    step(ws, p.g, m, v, a, 0, n);
    for (size_t i = 0; i < n; i++) {
      sum_m[i] += m.at(i);
      sum_v[i] += v.at(i);
    }
  }
  double worst = 0, bias = 0;
  for (size_t i = 0; i < n; i++) {
    for (int k = 0; k < 2; k++) {
      const double exact = k ? ve.wide[i] : me.wide[i], mean = (k ? sum_v[i] : sum_m[i]) / seeds;
      if (exact == 0) continue;
      const double ulp = std::ldexp(1.0, std::ilogb(exact) - 7);
      worst = std::max(worst, std::fabs(mean - exact) / ulp);
      bias += (mean - exact) / ulp;
    }
  }
  // Per element: within 5 standard errors of a Bernoulli mean (0.5 / sqrt(4096) ulp each);
  // over all 1024: their mean within 5 standard errors of 0.
  CHECK(worst < 5 * 0.5 / 64);
  CHECK(std::fabs(bias / (2 * n)) < 5 * 0.5 / 64 / std::sqrt(2.0 * n));
  // Split in two at any point, the update draws the same bits (ZeRO-1 shards split it so).
  for (size_t cut : {size_t(1), size_t(200), size_t(511)}) {
    Stored ma{sr_m, {}, m0.codes}, va{sr_v, {}, v0.codes}, mb = ma, vb = va;
    std::vector<float> wa = p.w, wb = p.w;
    step(wa, p.g, ma, va, args(4), 0, n);
    step(wb, p.g, mb, vb, args(4), 0, cut);
    step(wb, p.g, mb, vb, args(4), cut, n);
    CHECK(ma.codes == mb.codes);
    CHECK(va.codes == vb.codes);
    CHECK(wa == wb);
  }
}
