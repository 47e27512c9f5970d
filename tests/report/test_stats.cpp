// The statistics of the precision verdicts: Student's t p-values against known values and a
// published t table, Welch's test and the verdicts on synthetic seeds.
#include <doctest/doctest.h>

#include <cmath>

#include "src/base/rng.h"
#include "src/report/stats.h"

using namespace tg;

TEST_CASE("stats: Student's t two-sided p-values") {
  CHECK(student_t_two_sided_p(0.0, 5) == doctest::Approx(1.0));
  CHECK(student_t_two_sided_p(1.0, 1) == doctest::Approx(0.5).epsilon(1e-12));  // Cauchy
  // t = 2 with 10 degrees of freedom: p = 0.0733880 (tables).
  CHECK(student_t_two_sided_p(2.0, 10) == doctest::Approx(0.0733880).epsilon(1e-6));
  // The 97.5% quantile of t(4) is 2.776445: p = 0.05.
  CHECK(student_t_two_sided_p(2.776445, 4) == doctest::Approx(0.05).epsilon(1e-5));
  // Large df approaches the normal: |z| = 1.959964 -> 0.05.
  CHECK(student_t_two_sided_p(1.959964, 1e7) == doctest::Approx(0.05).epsilon(1e-5));
  CHECK(student_t_two_sided_p(-2.0, 10) == student_t_two_sided_p(2.0, 10));
  CHECK(student_t_two_sided_p(INFINITY, 3) == 0.0);
  // df = 2 has the closed form p = 1 - |t| / sqrt(2 + t^2).
  CHECK(student_t_two_sided_p(3.0, 2) == doctest::Approx(1 - 3 / std::sqrt(11.0)).epsilon(1e-12));
  // Far in the tail p is its own size, not lost to 1 - cdf: t = 1000, df = 1 gives
  // p = 1 - 2 atan(1000) / pi = 6.36619e-4.
  CHECK(student_t_two_sided_p(1000.0, 1) == doctest::Approx(6.366195e-4).epsilon(1e-6).scale(0));
  // No p-value for a NaN t or no degrees of freedom.
  CHECK(std::isnan(student_t_two_sided_p(NAN, 3)));
  CHECK(std::isnan(student_t_two_sided_p(2.0, 0)));
}

TEST_CASE("stats: Student's t against a published t table") {
  // Two-sided critical values as printed (3 decimals; e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2,
  // the last row df = infinity, the normal's): the exact quantile lies within 0.0005 of the
  // printed one, so the p-values on either side of it must bracket the table's alpha.
  struct Row {
    double df, t05, t01;
  };
  const Row table[] = {{1, 12.706, 63.657},     {2, 4.303, 9.925},  {5, 2.571, 4.032},
                       {10, 2.228, 3.169},      {30, 2.042, 2.750}, {100, 1.984, 2.626},
                       {INFINITY, 1.960, 2.576}};
  for (const Row& r : table) {
    CAPTURE(r.df);
    CHECK(student_t_two_sided_p(r.t05 + 0.0005, r.df) < 0.05);
    CHECK(student_t_two_sided_p(r.t05 - 0.0005, r.df) > 0.05);
    CHECK(student_t_two_sided_p(r.t01 + 0.0005, r.df) < 0.01);
    CHECK(student_t_two_sided_p(r.t01 - 0.0005, r.df) > 0.01);
  }
}

TEST_CASE("stats: Welch's test and the verdicts on synthetic seeds") {
  Rng r(3);
  auto draw = [&](double mean, double sd, int n) {
    std::vector<double> v;
    for (int i = 0; i < n; i++) v.push_back(mean + sd * r.normal());
    return v;
  };
  const std::vector<double> ref = {1.3210, 1.3216, 1.3213, 1.3219, 1.3212};
  // The same distribution: same within noise.
  Verdict same = loss_verdict({1.3214, 1.3211, 1.3218, 1.3215, 1.3213}, ref, "fp32");
  CHECK(same.kind == "same");
  CHECK(same.text.find("same as fp32 within seed noise") != std::string::npos);
  CHECK(same.text.find("Welch t-test") != std::string::npos);
  // Far worse: many sigma.
  Verdict worse = loss_verdict(draw(2.62, 0.01, 5), ref, "fp32");
  CHECK(worse.kind == "worse");
  CHECK(worse.test.t > 10);
  CHECK(worse.text.find("worse than fp32 by") != std::string::npos);
  Verdict better = loss_verdict(draw(1.20, 0.001, 4), ref, "fp32");
  CHECK(better.kind == "better");
  // A hand-checked case: a = {1,2,3,4}, b = {2,3,4,5,6}: diff -1.5, se sqrt(5/12 + 1/2),
  // df = 0.916667^2 / (0.416667^2 / 3 + 0.5^2 / 4) = 6.98077, t = -1.5667.
  WelchResult w = welch_t_test({1, 2, 3, 4}, {2, 3, 4, 5, 6});
  CHECK(w.diff == doctest::Approx(-1.5));
  CHECK(w.se == doctest::Approx(std::sqrt(5.0 / 12 + 0.5)));
  CHECK(w.t == doctest::Approx(-1.566699).epsilon(1e-5));
  CHECK(w.df == doctest::Approx(6.98077).epsilon(1e-5));
  CHECK(w.p == doctest::Approx(0.161).epsilon(0.01));
  // No spread: equal means are the same, a difference is certain.
  CHECK(loss_verdict({2, 2}, {2, 2}, "fp32").kind == "same");
  CHECK(loss_verdict({2.5, 2.5}, {2, 2}, "fp32").kind == "worse");
  // Two seeds a side: the verdict keeps its kind but says the seeds are too few, before the
  // numbers (a large t with one or two degrees of freedom is common by chance).
  const Verdict two = loss_verdict({1.130, 1.133}, {1.100, 1.101}, "fp32");
  CHECK(two.kind == "worse");
  CHECK(two.few_seeds);
  CHECK(two.text.find("worse than fp32 by 0.0310, but 2 seeds are too few for a t-test to mean "
                      "much (Welch, df 1.") == 0);
  CHECK(two.text.find("run at least 5") != std::string::npos);
  const Verdict two_same = loss_verdict({1.100, 1.102}, {1.101, 1.100}, "fp32");
  CHECK(two_same.kind == "same");
  CHECK(two_same.text.find("no difference from fp32 seen, but 2 seeds are too few") == 0);
  CHECK(!loss_verdict({1, 2, 3}, {1, 2, 3}, "fp32").few_seeds);
  // One seed cannot be tested.
  CHECK(loss_verdict({2.0}, ref, "fp32").kind == "n/a");
  const Sample s = describe_sample({1, 2, 3, 4});
  CHECK(s.mean == 2.5);
  CHECK(s.stddev == doctest::Approx(std::sqrt(5.0 / 3)));
  CHECK(s.min == 1);
  CHECK(s.max == 4);
}
