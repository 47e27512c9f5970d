// test_util.h: helpers shared by the tests: random fills, finite differences, temp dirs,
// and running the train_gpt binary.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/rng.h"

namespace tgt {

inline std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0) {
  tg::Rng r(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = r.normal() * scale;
  return v;
}

// Central differences of f with respect to every element of x (restored afterwards),
// compared with `analytic`. Returns the largest |fd - analytic| / max(1, |fd|, |analytic|)
// scaled error, so both small and large gradients are held to `tol`.
inline double fd_max_error(const std::function<double()>& f, std::vector<double>& x,
                           const std::vector<double>& analytic, double eps = 1e-6,
                           size_t max_checks = 400) {
  double worst = 0;
  size_t stride = x.size() > max_checks ? x.size() / max_checks : 1;
  for (size_t i = 0; i < x.size(); i += stride) {
    double keep = x[i];
    x[i] = keep + eps;
    double fp = f();
    x[i] = keep - eps;
    double fm = f();
    x[i] = keep;
    double fd = (fp - fm) / (2 * eps);
    double denom = std::max({1e-3, std::fabs(fd), std::fabs(analytic[i])});
    worst = std::max(worst, std::fabs(fd - analytic[i]) / denom);
  }
  return worst;
}

// Each column's max |x| of x(rows, cols) (the smoothing tests' channel statistics).
inline std::vector<float> column_amax(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> a(size_t(cols), 0.0f);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      a[size_t(c)] = std::max(a[size_t(c)], std::fabs(x[size_t(r) * cols + c]));
  return a;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// A fresh, empty directory under /tmp, removed by the destructor.
struct TempDir {
  std::string path;
  TempDir();
  ~TempDir();
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// The message of the exception f throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The message of the UsageError f throws ("" when it throws none; another exception's message
// behind "WRONG EXCEPTION TYPE: ", so that a check on the text fails).
inline std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const tg::UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "";
}

// Runs a shell script (sh -c); returns its exit code and collects stdout+stderr into *output.
int run_shell(const std::string& script, std::string* output = nullptr);
// The train_gpt binary under test: $TG_BIN, else ./train_gpt.
std::string binary();
// `train_gpt args` started in a child process (the shell execs into it: the pid is the run's),
// its stdout and stderr in the file log; the caller waits for it (waitpid).
int start_binary(const std::string& args, const std::string& log);
// Waits until the run in out_dir (process pid, started by start_binary) has logged n train
// steps in its metrics.jsonl; false when the process ended first.
bool wait_for_steps(const std::string& out_dir, int pid, size_t n);
// Runs the train_gpt binary with the arguments, as run_shell.
int run_binary(const std::string& args, std::string* output = nullptr);
// A localhost TCP port that was free a moment ago.
int free_port();

// A file's whole contents ("" when it cannot be read).
std::string slurp(const std::string& path);
// The lines of one kind ("train", "val", ...) of a metrics.jsonl file.
std::vector<nlohmann::json> read_metrics(const std::string& path, const std::string& kind);
// A small toy dataset made once per test process (prepare toy, 64K training tokens).
const std::string& toy_dir();
// `train` arguments for a tiny model on toy_dir() writing to out_dir.
std::string tiny_args(const std::string& out_dir);

// This checkout's data/gpt2/ (GPT-2's vocabulary, scripts/setup.sh --gpt2), "" when it has
// no vocab.json; the tests that need it say so with kNoGpt2Vocab and skip.
std::string gpt2_vocab_dir();
constexpr const char* kNoGpt2Vocab =
    "SKIPPED: no data/gpt2/vocab.json (scripts/setup.sh --gpt2 fetches it; .ci/run does)";

// True when the tests that compare with a Python reference (tiktoken, transformers) must run
// rather than skip without it: TG_REQUIRE_ORACLES=1, which .ci/run sets after installing them.
bool oracles_required();

}  // namespace tgt
