#include "stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"

namespace tg {

Sample describe_sample(const std::vector<double>& x) {
  Sample s;
  s.n = x.size();
  if (x.empty()) return s;
  double sum = 0;
  for (double v : x) sum += v;
  s.mean = sum / double(x.size());
  double ss = 0;
  for (double v : x) ss += (v - s.mean) * (v - s.mean);
  s.stddev = x.size() > 1 ? std::sqrt(ss / double(x.size() - 1)) : 0.0;
  s.min = *std::min_element(x.begin(), x.end());
  s.max = *std::max_element(x.begin(), x.end());
  return s;
}

namespace {

// The continued fraction of I_x(a, b), evaluated by the modified Lentz method; converges
// for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double f = d;
  for (int m = 1; m <= 10000; m++) {
    // The even step, then the odd step of the fraction.
    double num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
    d = 1 + num * d;
    c = 1 + num / c;
    d = 1 / (std::fabs(d) < tiny ? tiny : d);
    c = std::fabs(c) < tiny ? tiny : c;
    f *= c * d;
    num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
    d = 1 + num * d;
    c = 1 + num / c;
    d = 1 / (std::fabs(d) < tiny ? tiny : d);
    c = std::fabs(c) < tiny ? tiny : c;
    const double step = c * d;
    f *= step;
    if (std::fabs(step - 1) < eps) break;
  }
  return f;
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  // x^a (1-x)^b / (a B(a, b)), in logs.
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
  // The symmetry I_x(a, b) = 1 - I_{1-x}(b, a) keeps the fraction in its fast region.
  return 1 - std::exp(log_front) * beta_continued_fraction(b, a, 1 - x) / b;
}

double student_t_two_sided_p(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return NAN;
  if (std::isinf(t)) return 0;
  return incomplete_beta(df / 2, 0.5, df / (df + t * t));
}

WelchResult welch_t_test(const std::vector<double>& a, const std::vector<double>& b) {
  WelchResult r;
  if (a.size() < 2 || b.size() < 2) return r;
  const Sample sa = describe_sample(a), sb = describe_sample(b);
  const double va = sa.stddev * sa.stddev / double(sa.n), vb = sb.stddev * sb.stddev / double(sb.n);
  r.valid = true;
  r.diff = sa.mean - sb.mean;
  r.se = std::sqrt(va + vb);
  if (r.se == 0) {
    // No spread at all: equal means are the same, any difference is certain.
    r.t = r.diff == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), r.diff);
    r.df = double(sa.n + sb.n - 2);
    r.p = r.diff == 0 ? 1 : 0;
    return r;
  }
  r.t = r.diff / r.se;
  r.df = (va + vb) * (va + vb) / (va * va / double(sa.n - 1) + vb * vb / double(sb.n - 1));
  r.p = student_t_two_sided_p(r.t, r.df);
  return r;
}

Verdict loss_verdict(const std::vector<double>& mode, const std::vector<double>& reference,
                     const std::string& reference_name, double alpha) {
  Verdict v;
  v.test = welch_t_test(mode, reference);
  if (!v.test.valid) {
    v.kind = "n/a";
    v.text = "n/a (needs at least 2 seeds on each side)";
    return v;
  }
  const WelchResult& w = v.test;
  const std::string stat = strf("Welch t-test, p = %.3g", w.p);
  if (!(w.p < alpha)) {
    v.kind = "same";
    v.text = strf("same as %s within seed noise (%s)", reference_name.c_str(), stat.c_str());
    return v;
  }
  v.kind = w.diff > 0 ? "worse" : "better";
  v.text = std::isinf(w.t) ? strf("%s than %s (no spread over seeds; %s)", v.kind.c_str(),
                                  reference_name.c_str(), stat.c_str())
                           : strf("%s than %s by %.1f sigma (%s)", v.kind.c_str(),
                                  reference_name.c_str(), std::fabs(w.t), stat.c_str());
  return v;
}

}  // namespace tg
