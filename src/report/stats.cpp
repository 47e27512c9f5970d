// stats.cpp: the statistics of a precision verdict (stats.h): a sample's summary, Welch's
// t-test, and the verdict's words. Student's t distribution is Boost.Math's (header only:
// Debian's libboost-dev; scripts/gpu/gpu_deps.sh copies the headers it needs for the GPU machine).
#include "stats.h"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <limits>

#include "src/base/common.h"

namespace tg {

namespace {
// A report must not throw on odd input: Boost's errors give NaN (domain) or the nearest
// value it has (evaluation) instead of exceptions; student_t_two_sided_p screens the
// inputs anyway.
using ReturnNotThrow = boost::math::policies::policy<
    boost::math::policies::domain_error<boost::math::policies::ignore_error>,
    boost::math::policies::pole_error<boost::math::policies::ignore_error>,
    boost::math::policies::overflow_error<boost::math::policies::ignore_error>,
    boost::math::policies::evaluation_error<boost::math::policies::ignore_error>>;
}  // namespace

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

double student_t_two_sided_p(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return NAN;
  if (std::isinf(t)) return 0;
  // 2 P(T >= |t|) from the upper tail itself (Boost computes it through the incomplete beta
  // function, without the cancellation of 1 - cdf for a small p).
  const boost::math::students_t_distribution<double, ReturnNotThrow> dist(df);
  return 2 * boost::math::cdf(boost::math::complement(dist, std::fabs(t)));
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
  v.few_seeds = std::min(mode.size(), reference.size()) < kFewSeeds;
  v.kind = !(w.p < alpha) ? "same" : w.diff > 0 ? "worse" : "better";
  if (v.few_seeds) {
    // Two runs a side leave the test one to two degrees of freedom: a large t is common by
    // chance and a p under alpha says little, so the words say so before the numbers.
    const std::string what =
        v.kind == "same" ? "no difference from " + reference_name + " seen"
                         : strf("%s than %s by %.4f", v.kind.c_str(), reference_name.c_str(),
                                std::fabs(w.diff));
    v.text = strf(
        "%s, but %zu seeds are too few for a t-test to mean much (Welch, df %.1f, p = %.3g); "
        "run at least %zu",
        what.c_str(), std::min(mode.size(), reference.size()), w.df, w.p, kFewSeeds + 2);
    return v;
  }
  const std::string stat = strf("Welch t-test, p = %.3g", w.p);
  if (v.kind == "same") {
    v.text = strf("same as %s within seed noise (%s)", reference_name.c_str(), stat.c_str());
    return v;
  }
  v.text = std::isinf(w.t) ? strf("%s than %s (no spread over seeds; %s)", v.kind.c_str(),
                                  reference_name.c_str(), stat.c_str())
                           : strf("%s than %s by %.1f sigma (%s)", v.kind.c_str(),
                                  reference_name.c_str(), std::fabs(w.t), stat.c_str());
  return v;
}

}  // namespace tg
