// Every precision mode's CPU losses are bit-identical to those recorded in
// tests/fixtures/regression_losses.json by tests/fixtures/record_losses.py: fp32 from main
// before the Trainer/RunState refactor, the 16-bit and fp8 modes since the lm_head's backward
// runs in the compute type (dlogits rounded to bf16/fp16). The runs use cpu.gemm=loops, whose
// rounding is the same on every CPU. g++ contracts a * b + c into one fused multiply-add where
// the target has FMA (the release build's -march=native on this project's machines), which
// rounds once instead of twice: the fixture was recorded so, and holds for builds that do the
// same (a build without FMA, such as SAN=1's, says so and skips). Each case also runs stopped
// half-way and resumed, which must give the same losses.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "src/base/fileio.h"
#include "test_util.h"

using json = nlohmann::json;

namespace {

const char* kFixture = "tests/fixtures/regression_losses.json";

std::string joined(const json& args) {
  std::string s;
  for (const auto& a : args) s += " " + a.get<std::string>();
  return s;
}

// train and val losses of a run directory, in the fixture's layout.
void check_losses(const std::string& dir, const json& want) {
  const auto train = tgt::read_metrics(dir + "/metrics.jsonl", "train");
  const auto val = tgt::read_metrics(dir + "/metrics.jsonl", "val");
  REQUIRE(train.size() == want["train_loss"].size());
  for (size_t i = 0; i < train.size(); i++) {
    INFO("train step " << i + 1);
    CHECK(train[i]["loss"].get<double>() == want["train_loss"][i].get<double>());
  }
  REQUIRE(val.size() == want["val_loss"].size());
  for (size_t i = 0; i < val.size(); i++) {
    INFO("val at step " << val[i]["step"]);
    CHECK(val[i]["step"] == want["val_loss"][i][0]);
    CHECK(val[i]["val_loss"].get<double>() == want["val_loss"][i][1].get<double>());
  }
}

}  // namespace

TEST_CASE("regression: every mode's CPU losses equal the recorded ones, straight and resumed") {
#if !defined(__FMA__) || defined(__SANITIZE_ADDRESS__)
  MESSAGE(
      "regression fixture skipped: it was recorded from a release build with fused "
      "multiply-add contraction (-O3 -march=native on a CPU with FMA); this build has none");
  return;
#endif
  REQUIRE(tg::file_exists(kFixture));
  const json fx = json::parse(tgt::slurp(kFixture));
  tgt::TempDir tmp;
  std::string out;
  REQUIRE(tgt::run_binary("prepare toy --record_len 32 --out " + tmp / "toy", &out) == 0);
  const std::string base = "train --config tests/fixtures/regression_config.json" +
                           joined(fx["common_args"]) + " --data.train='" + tmp / "toy" +
                           "/toy_train_*.bin' --data.val='" + tmp / "toy" +
                           "/toy_val_*.bin' --cpu.gemm=loops";
  const int resume_at = fx["resume_at"].get<int>();
  for (const json& c : fx["cases"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const std::string args = base + joined(c["args"]);
    const std::string straight = tmp / name, resumed = tmp / (name + "-resumed");
    REQUIRE(tgt::run_binary(args + " --train.out_dir=" + straight, &out) == 0);
    check_losses(straight, c);
    const std::string r = args + " --train.out_dir=" + resumed;
    REQUIRE(tgt::run_binary(r + " --train.stop_at_step=" + std::to_string(resume_at), &out) == 0);
    REQUIRE(tgt::run_binary(r + " --checkpoint.resume=true", &out) == 0);
    check_losses(resumed, c);
  }
}
