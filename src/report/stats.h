// stats.h: the statistics behind a precision verdict over several seeds.
//
// Each mode runs with N seeds; its final val losses are compared with the reference
// mode's (fp32) by Welch's t-test (unequal variances, Welch-Satterthwaite degrees of
// freedom, two-sided p-value from Student's t distribution). A difference is reported in
// units of its standard error ("sigma"); the verdict says "same within seed noise" unless
// p < alpha.
#pragma once
#include <string>
#include <vector>

namespace tg {

struct Sample {
  size_t n = 0;
  double mean = 0, stddev = 0, min = 0, max = 0;  // stddev: sample (n - 1) estimate
};
Sample describe_sample(const std::vector<double>& x);

struct WelchResult {
  double diff = 0;     // mean(a) - mean(b)
  double se = 0;       // standard error of the difference
  double t = 0;        // diff / se (inf when se == 0 and diff != 0)
  double df = 0;       // Welch-Satterthwaite degrees of freedom
  double p = 1;        // two-sided
  bool valid = false;  // false when either side has fewer than 2 values
};
WelchResult welch_t_test(const std::vector<double>& a, const std::vector<double>& b);

// Two-sided p-value of Student's t with df degrees of freedom: P(|T| >= |t|) (Boost.Math's
// distribution; NaN for a NaN t or df <= 0, 0 for an infinite t).
double student_t_two_sided_p(double t, double df);

// Fewer runs than this on either side and a verdict says the seeds are too few for its
// t-test to mean much (with 2 a side Welch's test has 1 to 2 degrees of freedom).
constexpr size_t kFewSeeds = 3;

struct Verdict {
  std::string kind;  // "same", "worse", "better" or "n/a"
  std::string text;  // e.g. "worse than fp32 by 4.1 sigma (Welch t-test, p = 0.003)"
  WelchResult test;
  bool few_seeds = false;  // fewer than kFewSeeds runs on a side: the text says so
};
// The verdict on a mode's final losses against the reference's (lower is better).
Verdict loss_verdict(const std::vector<double>& mode, const std::vector<double>& reference,
                     const std::string& reference_name, double alpha = 0.05);

}  // namespace tg
