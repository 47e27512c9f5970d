// test_report.cpp: `train_gpt report` on hand-made run directories: runs grouped by mode,
// spread and verdicts from known final losses, every picture written, clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/report/compare.h"
#include "tests/test_util.h"

using json = nlohmann::json;

namespace {

// A finished run directory: config.json of `mode` (fp16 loss scaling `scale`), a val curve
// that ends at `final_val`, two numerics records with one slice per layer, summary.json
// (with the val loss in bits per byte at `tokens_per_byte` where that is given).
void make_run(const std::string& dir, const std::string& mode, const std::string& scale,
              int64_t seed, double final_val, double tokens_per_byte = NAN) {
  tg::Config c;
  c.precision.mode = tg::parse_mode(mode, "test");
  c.precision.loss_scale.kind = scale;
  c.train.seed = seed;
  c.train.steps = 100;
  c.train.out_dir = dir;
  tg::make_dirs(dir);
  tg::write_text_atomic(dir + "/config.json", tg::config_to_json(c).dump(2));
  std::string m;
  for (int s = 0; s <= 100; s += 25) {
    const double v = 2.0 - (2.0 - final_val) * s / 100.0;
    m += json({{"kind", "val"}, {"step", s}, {"val_loss", v}}).dump() + "\n";
    m +=
        json({{"kind", "train"}, {"step", s}, {"loss", v}, {"loss_scale", 1.0}, {"skipped", false}})
            .dump() +
        "\n";
    const double zero = mode == "fp16" && scale == "none" ? 0.9 : 0.01;
    json layer = {{"amax", {1.0, 2.0}},
                  {"zero_frac", {zero, zero}},
                  {"subnormal_frac", {0.0, 0.0}},
                  {"nonfinite_frac", {0.0, 0.0}}};
    json agg = {
        {"amax", 2.0}, {"zero_frac", zero}, {"subnormal_frac", 0.0}, {"nonfinite_frac", 0.0}};
    if (s > 0)
      m += json({{"kind", "numerics"},
                 {"step", s},
                 {"tensors", {{"grad/qkvw", agg}, {"grad/wte", agg}}},
                 {"layers", {{"grad/qkvw", layer}}}})
               .dump() +
           "\n";
  }
  tg::write_text_atomic(dir + "/metrics.jsonl", m);
  json summary = {{"final_val_loss", final_val},
                  {"tokens_per_second", 1000.0},
                  {"peak_memory_bytes", 1 << 20},
                  {"steps", 100},
                  {"wall_seconds", 10.0},
                  {"skipped_steps", 0},
                  {"loss_floor", 1.0}};
  if (std::isfinite(tokens_per_byte)) {
    summary["final_val_bpb"] = final_val * tokens_per_byte / std::log(2.0);
    summary["bpb_tokens_per_byte"] = tokens_per_byte;
    summary["bpb_source"] = "meta.json val_tokens_per_byte";
  }
  // The summary's numerics: fp16 without scaling flushes a sixth of its activation gradients.
  const bool noscale = mode == "fp16" && scale == "none";
  summary["numerics"] = {
      {"dact",
       {{"zero_frac", noscale ? 0.159 : 0.0006},
        {"subnormal_frac", noscale ? 0.788 : 0.0},
        {"nonfinite_frac", 0.0}}},
      {"grad",
       {{"zero_frac", noscale ? 0.073 : 0.0}, {"subnormal_frac", 0.0}, {"nonfinite_frac", 0.0}}},
      {"act", {{"zero_frac", 0.0}, {"subnormal_frac", 0.0}, {"nonfinite_frac", 0.0}}}};
  tg::write_text_atomic(dir + "/summary.json", summary.dump(2));
}

const json* find_mode(const json& cmp, const std::string& name) {
  for (const auto& m : cmp["modes"])
    if (m["name"] == name) return &m;
  return nullptr;
}

}  // namespace

TEST_CASE("report: groups hand-made runs by mode, with spread, verdicts and pictures") {
  tgt::TempDir runs, out;
  // fp32 and bf16 agree within noise; fp16 without scaling is clearly worse.
  const double fp32[] = {1.10, 1.12, 1.11}, bf16[] = {1.11, 1.10, 1.12},
               noscale[] = {1.60, 1.62, 1.61};
  for (int k = 0; k < 3; k++) {
    // As if on GPT-2 tokens: 0.25 tokens per byte of the val split.
    make_run(runs / ("a/fp32-" + std::to_string(k)), "fp32", "dynamic", 7 + k, fp32[k], 0.25);
    make_run(runs / ("a/bf16-" + std::to_string(k)), "bf16", "dynamic", 7 + k, bf16[k], 0.25);
    make_run(runs / ("b/noscale-" + std::to_string(k)), "fp16", "none", 7 + k, noscale[k], 0.25);
  }
  std::string log;
  // Directories above run directories and single runs alike.
  const int rc = tgt::run_binary(
      "report '" + runs.path + "/a' '" + runs.path + "/b' --out '" + out.path + "'", &log);
  INFO(log);
  REQUIRE(rc == 0);
  const json cmp = json::parse(tgt::slurp(out / "compare.json"));
  REQUIRE(cmp["modes"].size() == 3);
  CHECK(cmp["reference"] == "fp32");
  const json* b = find_mode(cmp, "bf16");
  const json* n = find_mode(cmp, "fp16-noscale");
  REQUIRE(b);
  REQUIRE(n);
  CHECK((*b)["runs"].size() == 3);
  CHECK((*b)["stats"]["verdict"] == "same");
  CHECK((*n)["stats"]["verdict"] == "worse");
  CHECK((*n)["stats"]["val_mean"].get<double>() == doctest::Approx(1.61));
  CHECK((*n)["stats"]["val_std"].get<double>() == doctest::Approx(0.01));
  CHECK((*n)["stats"]["val_min"].get<double>() == doctest::Approx(1.60));
  // Bits per byte beside the val loss: in the statistics, compare.json and both tables.
  const double k = 0.25 / std::log(2.0);
  CHECK((*n)["stats"]["bpb_mean"].get<double>() == doctest::Approx(1.61 * k));
  CHECK((*n)["stats"]["bpb_std"].get<double>() == doctest::Approx(0.01 * k));
  CHECK(cmp["bpb_tokens_per_byte"] == 0.25);
  CHECK(cmp["bpb_source"] == "meta.json val_tokens_per_byte");
  CHECK((*n)["runs"][0]["summary"]["final_val_bpb"].get<double>() == doctest::Approx(1.60 * k));
  // Within 2% of the floor 1.0 (val <= 1.02): never; the quality column says so.
  CHECK((*b)["stats"]["quality_reached"] == 0);
  const std::string md = tgt::slurp(out / "report.md");
  for (const char* row : {"| fp32 |", "| bf16 |", "| fp16-noscale |"})
    CHECK(md.find(row) != std::string::npos);
  CHECK(md.find("worse than fp32") != std::string::npos);
  CHECK(
      md.find("| mode | final val loss (mean ± std) | final val bpb (mean ± std) | min / max |") !=
      std::string::npos);
  CHECK(md.find(tg::strf("| fp16-noscale | 1.6100 ± 0.0100 | %.4f ± %.4f | 1.6000 / 1.6200 |",
                         1.61 * k, 0.01 * k)) != std::string::npos);
  CHECK(md.find("| final val loss | final val bpb |") != std::string::npos);
  CHECK(md.find(tg::strf("| 1.6000 | %.4f |", 1.60 * k)) != std::string::npos);
  CHECK(md.find("x 0.25 tokens per byte / ln 2; tokens per byte from meta.json "
                "val_tokens_per_byte.") != std::string::npos);
  // Only fp16-noscale is flagged for underflow, both gradient kinds, with the reference's zeros.
  CHECK((*b)["stats"].value("underflow", json::array()).empty());
  REQUIRE((*n)["stats"]["underflow"].size() == 2);
  CHECK((*n)["stats"]["underflow"][0]["tensors"] == "dact");
  CHECK((*n)["stats"]["underflow"][0]["reference_zero_frac"].get<double>() ==
        doctest::Approx(0.0006));
  CHECK(md.find("**fp16-noscale**: gradient underflow: 15.9% of the activation gradients stored "
                "as zero (fp32: 0.06%), 78.8% subnormal; 7.3% of the weight gradients") !=
        std::string::npos);
  CHECK(md.find("**bf16**: gradient underflow") == std::string::npos);
  for (const char* png :
       {"loss.png", "numerics_fp32.png", "numerics_bf16.png", "numerics_fp16-noscale.png"}) {
    INFO(png);
    CHECK(tgt::slurp(out / png).size() > 1000);
    CHECK(md.find(png) != std::string::npos);
  }

  // Another reference, and a looser quality target that every run reaches.
  tgt::TempDir out2;
  REQUIRE(tgt::run_binary(
              "report '" + runs.path + "' --reference bf16 --quality 0.7 --out '" + out2.path + "'",
              &log) == 0);
  const json cmp2 = json::parse(tgt::slurp(out2 / "compare.json"));
  CHECK(cmp2["reference"] == "bf16");
  CHECK((*find_mode(cmp2, "fp32"))["stats"]["quality_reached"] == 3);
  // val(step) = 2 - (2 - final) * step / 100 first reaches 1.7 at step 50 for every run
  // (1.775 at step 25), 5 s into a 10 s run of 100 steps.
  CHECK((*find_mode(cmp2, "fp32"))["stats"]["steps_to_quality_median"] == 50);
  CHECK((*find_mode(cmp2, "fp32"))["stats"]["seconds_to_quality_median"] == doctest::Approx(5.0));

  // The report of a report: compare.json's runs are found again.
  tgt::TempDir out3;
  REQUIRE(tgt::run_binary("report '" + out.path + "' --out '" + out3.path + "'", &log) == 0);
  CHECK(json::parse(tgt::slurp(out3 / "compare.json"))["modes"].size() == 3);
}

TEST_CASE("report: runs of one mode trained differently are told apart; unfinished runs shown") {
  tgt::TempDir runs, out;
  make_run(runs / "x", "fp32", "dynamic", 1, 1.2);
  make_run(runs / "y", "fp32", "dynamic", 1, 1.3);
  // y was trained with another learning rate.
  json cfg = json::parse(tgt::slurp(runs / "y/config.json"));
  cfg["optim"]["lr"] = 0.01;
  tg::write_text_atomic(runs / "y/config.json", cfg.dump(2));
  make_run(runs / "z", "bf16", "dynamic", 1, 1.2);
  tg::remove_tree(runs / "z/summary.json");
  std::string log;
  REQUIRE(tgt::run_binary("report '" + runs.path + "' --out '" + out.path + "'", &log) == 0);
  const json cmp = json::parse(tgt::slurp(out / "compare.json"));
  REQUIRE(cmp["modes"].size() == 3);
  CHECK(cmp["modes"][1]["name"] == "fp32 (optim.lr=0.01)");
  CHECK(cmp["modes"][2]["runs"][0]["error"] == "unfinished (no summary.json)");
  const std::string md = tgt::slurp(out / "report.md");
  CHECK(md.find("| bf16 | failed: unfinished") != std::string::npos);
  // Runs that do not know their tokens per byte: no bits per byte anywhere.
  CHECK(md.find("bpb") == std::string::npos);
  CHECK(!cmp.contains("bpb_tokens_per_byte"));
}

TEST_CASE("report: bad arguments are usage errors naming the problem") {
  tgt::TempDir empty;
  std::string out;
  CHECK(tgt::run_binary("report", &out) == 2);
  CHECK(out.find("at least one run directory") != std::string::npos);
  CHECK(tgt::run_binary("report /nonexistent-dir", &out) == 2);
  CHECK(out.find("/nonexistent-dir is not a directory") != std::string::npos);
  CHECK(tgt::run_binary("report '" + empty.path + "'", &out) == 2);
  CHECK(out.find("holds no run") != std::string::npos);
  make_run(empty / "r", "fp32", "dynamic", 1, 1.0);
  CHECK(tgt::run_binary("report '" + empty.path + "' --reference fp9", &out) == 2);
  CHECK(out.find("--reference fp9 names no group (groups: fp32)") != std::string::npos);
  CHECK(tgt::run_binary("report '" + empty.path + "' --quality x", &out) == 2);
  CHECK(tgt::run_binary("report '" + empty.path + "' --bogus", &out) == 2);
}

TEST_CASE("compare: every mode's config is named back as that mode, from any starting config") {
  // report names a run by the mode whose keys its config has: an ablation or an outlier
  // handling must not be taken for the plain recipe it changes, nor the other way round.
  tg::Config smoothing_on;
  smoothing_on.precision.recipe.smooth = true;
  for (const tg::Config& base : {tg::Config(), smoothing_on})
    for (const std::string& name : tg::compare_mode_names()) {
      tg::Config c = base;
      tg::apply_compare_mode(c, name);
      // Smoothing on from the start turns these two into the modes that add it.
      std::string want = name;
      if (base.precision.recipe.smooth && name == "fp8-rowwise") want = "fp8-rowwise-smooth";
      if (base.precision.recipe.smooth && name == "nvfp4-no-bf16last") want = "nvfp4-smooth";
      INFO("mode ", name);
      CHECK(tg::compare_mode_of(c) == want);
    }
  tg::Config c;
  CHECK_THROWS_WITH_AS(tg::apply_compare_mode(c, "nvfp4-foo"),
                       doctest::Contains("unknown mode 'nvfp4-foo'"), tg::UsageError);
}
