// cli_helpers.h: what the end-to-end tests of the binary share (tests/cli/test_*.cpp): text
// search, step-by-step loss comparison of two run directories, mpirun.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace tgt {

inline bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// The train losses of two run directories are bit-identical, step by step (n steps each).
inline void check_same_losses(const std::string& dir_a, const std::string& dir_b, size_t n) {
  auto a = read_metrics(dir_a + "/metrics.jsonl", "train");
  auto b = read_metrics(dir_b + "/metrics.jsonl", "train");
  REQUIRE(a.size() == n);
  REQUIRE(b.size() == n);
  for (size_t i = 0; i < n; i++) {
    INFO("step " << i + 1);
    CHECK(b[i]["loss"].get<double>() == a[i]["loss"].get<double>());
  }
}

// Largest |loss_a / loss_b - 1| over the steps of two train-metric lists of equal length.
inline double max_relative_loss_gap(const std::vector<nlohmann::json>& a,
                                    const std::vector<nlohmann::json>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); i++)
    worst = std::max(worst, std::fabs(a[i]["loss"].get<double>() / b[i]["loss"].get<double>() - 1));
  return worst;
}

// `compare` arguments for the tiny model on toy_dir() (2 val batches every 4 steps, no
// samples, 2 threads): add the steps, modes, seeds and --out.
inline std::string tiny_compare_args() {
  const std::string& d = toy_dir();
  return "compare --model.n_layer=1 --model.n_head=2 --model.n_embd=16 "
         "--model.max_seq_len=32 --data.seq_len=32 --data.batch_size=4 "
         "--data.train='" +
         d + "/toy_train_*.bin' --data.val='" + d +
         "/toy_val_*.bin' --eval.batches=2 --eval.every=4 --sample.tokens=0 "
         "--train.threads=2 ";
}

// Runs train_gpt under mpirun with np processes (one thread each). Under the sanitizers,
// leak checking is off for these processes only: OpenMPI's own libraries and plugins keep
// allocations past MPI_Finalize, which LeakSanitizer would report as ours.
inline int run_mpi(int np, const std::string& args, std::string* out) {
  return run_shell(
      "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np " +
          std::to_string(np) + " " + binary() + " " + args + " --train.threads=1",
      out);
}

}  // namespace tgt
