// test_report.cpp: `train_gpt report` on hand-made run directories: runs grouped by mode,
// spread and verdicts from known final losses, every picture written, clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/model/model.h"
#include "src/precision/quant_memory.h"
#include "src/report/compare.h"
#include "src/report/runs_file.h"
#include "tests/test_util.h"

using json = nlohmann::json;

namespace {

// What a run's optimizer-state records say: none, a bf16 master that lost updates (fp32
// moments, nothing underflowed), or a bf16 master that lost nothing.
enum class StateRecords { None, Lossy, Lossless };

// One state record: one parameter of one layer, a bf16 master and fp32 moments.
json state_record(int step, bool lossy) {
  json layer = {{"stagnation", {lossy ? 0.02 * step / 100 : 0.0}},
                {"update_ratio", {1e-3}},
                {"m_underflow", {0.0}},
                {"v_underflow", {0.0}},
                {"m_saturation", {0.0}},
                {"v_saturation", {0.0}}};
  return {{"kind", "state"},
          {"step", step},
          {"master", "bf16"},
          {"adam_m", "fp32"},
          {"adam_v", "fp32"},
          {"layers", {{"qkvw", layer}}}};
}

// A finished run directory: config.json of `mode` (fp16 loss scaling `scale`), a val curve
// that ends at `final_val`, two numerics records with one slice per layer, optimizer-state
// records as `state` says, summary.json (with the val loss in bits per byte at
// `tokens_per_byte` where that is given).
void make_run(const std::string& dir, const std::string& mode, const std::string& scale,
              int64_t seed, double final_val, double tokens_per_byte = NAN,
              StateRecords state = StateRecords::None) {
  tg::Config c;
  c.precision.mode = tg::parse_mode(mode, "test");
  tg::config_set(c, "precision.loss_scale.kind", scale);
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
    if (s > 0 && state != StateRecords::None)
      m += state_record(s, state == StateRecords::Lossy).dump() + "\n";
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

// The runs of group `name` in a report's runs.jsonl, whole.
std::vector<json> runs_of(const std::string& runs_file, const std::string& name) {
  std::vector<json> runs;
  for (const json& r : tg::read_runs_file(runs_file).runs)
    if (r["group"] == name) runs.push_back(r);
  return runs;
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
    make_run(runs / ("a/bf16-" + std::to_string(k)), "bf16", "dynamic", 7 + k, bf16[k], 0.25,
             StateRecords::Lossy);
    make_run(runs / ("b/noscale-" + std::to_string(k)), "fp16", "none", 7 + k, noscale[k], 0.25,
             StateRecords::Lossless);
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
  CHECK(runs_of(out / "runs.jsonl", "bf16").size() == 3);
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
  CHECK(runs_of(out / "runs.jsonl", "fp16-noscale")[0]["summary"]["final_val_bpb"].get<double>() ==
        doctest::Approx(1.60 * k));
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
  // Pictures only of what differs: fp32's numerics as they are; fp16-noscale's as its
  // difference from fp32's; bf16's equal fp32's, so not drawn but said. bf16's state lost
  // updates to its master (the moments' empty panel left out); fp16-noscale's lost nothing.
  for (const char* png :
       {"loss.png", "numerics_fp32.png", "numerics_fp16-noscale.png", "state_bf16.png"}) {
    INFO(png);
    CHECK(tgt::slurp(out / png).size() > 1000);
    CHECK(md.find(png) != std::string::npos);
  }
  CHECK(md.find("fp16-noscale: numerics per layer and tensor over steps, minus fp32's (the same "
                "seed)") != std::string::npos);
  for (const char* png : {"numerics_bf16.png", "state_fp16-noscale.png", "state_fp32.png"}) {
    INFO(png);
    CHECK_FALSE(tg::file_exists(out / png));
  }
  CHECK(md.find("Not drawn:\n\n- bf16's numerics telemetry is fp32's at every sampled step") !=
        std::string::npos);
  CHECK(md.find("- bf16: no Adam moment (m fp32, v fp32) underflowed to zero or saturated at any "
                "sampled step (panel left out of state_bf16.png)") != std::string::npos);
  CHECK(md.find("- fp16-noscale: its narrowed optimizer state lost nothing at any sampled step "
                "(no state_fp16-noscale.png)") != std::string::npos);

  // Another reference, and a looser quality target that every run reaches.
  tgt::TempDir out2;
  REQUIRE(tgt::run_binary(
              "report '" + runs.path + "' --reference bf16 --quality 0.7 --out '" + out2.path + "'",
              &log) == 0);
  const json cmp2 = json::parse(tgt::slurp(out2 / "compare.json"));
  CHECK(cmp2["reference"] == "bf16");
  CHECK((*find_mode(cmp2, "fp32"))["stats"]["quality_reached"] == 3);
  // val(step) = 2 - (2 - final) * step / 100 crosses 1.7 between the evaluations at steps 25
  // and 50, at step 30 / (2 - final): 33.7 for the middle run (final 1.11), 3.37 s into a
  // 10 s run of 100 steps. Interpolated, not the evaluation's step 50.
  CHECK((*find_mode(cmp2, "fp32"))["stats"]["steps_to_quality_median"].get<double>() ==
        doctest::Approx(30 / 0.89));
  CHECK((*find_mode(cmp2, "fp32"))["stats"]["seconds_to_quality_median"].get<double>() ==
        doctest::Approx(3 / 0.89));

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
  CHECK(runs_of(out / "runs.jsonl", "bf16")[0]["error"] == "unfinished (no summary.json)");
  const std::string md = tgt::slurp(out / "report.md");
  CHECK(md.find("| bf16 | failed: unfinished") != std::string::npos);
  // Runs that do not know their tokens per byte: no bits per byte anywhere.
  CHECK(md.find("bpb") == std::string::npos);
  CHECK(!cmp.contains("bpb_tokens_per_byte"));
}

namespace {
// Edits a run's summary.json: the machine's load as summary.json records it (others' share of
// the cores), no loss floor.
void set_run_facts(const std::string& dir, double others_share, double tokens_per_second) {
  json s = json::parse(tgt::slurp(dir + "/summary.json"));
  s.erase("loss_floor");
  s["device"] = "cpu";
  s["tokens_per_second"] = tokens_per_second;
  s["machine"] = {{"cpu", "Test CPU"},
                  {"cpus", 2},
                  {"others_cpu_share", others_share},
                  {"shared", others_share > 0.10}};
  tg::write_text_atomic(dir + "/summary.json", s.dump(2));
}
}  // namespace

TEST_CASE("report: the device, shared speed figures, planned GPU memory, set targets only") {
  tgt::TempDir runs, out;
  // fp32's runs had their cores; nvfp4's seed 2 shared them (half of the cores' time), and
  // bf16's runs all did.
  for (int k = 0; k < 3; k++) {
    const std::string f = runs / ("fp32-" + std::to_string(k));
    const std::string n = runs / ("nvfp4-" + std::to_string(k));
    const std::string b = runs / ("bf16-" + std::to_string(k));
    make_run(f, "fp32", "dynamic", 1 + k, 1.10 + 0.01 * k);
    make_run(n, "nvfp4", "dynamic", 1 + k, 1.13 + 0.01 * k);
    make_run(b, "bf16", "dynamic", 1 + k, 1.10 + 0.01 * k);
    set_run_facts(f, 0.02, 1000);
    set_run_facts(n, k == 1 ? 0.5 : 0.01, k == 1 ? 300 : 900);
    set_run_facts(b, 0.4, 700);
  }
  std::string log;
  REQUIRE(tgt::run_binary("report '" + runs.path + "' --out '" + out.path + "'", &log) == 0);
  const json cmp = json::parse(tgt::slurp(out / "compare.json"));
  const std::string md = tgt::slurp(out / "report.md");
  INFO(md);
  CHECK(md.find("Device: the CPU (Test CPU, 2 cores): the formats are emulated "
                "bit-faithfully") != std::string::npos);
  // nvfp4's speed is its unshared runs' mean, with a ratio; bf16's is flagged, without one.
  const json& nst = (*find_mode(cmp, "nvfp4"))["stats"];
  const json& bst = (*find_mode(cmp, "bf16"))["stats"];
  CHECK(nst["tokens_per_second"].get<double>() == doctest::Approx(900));
  CHECK(nst["speed_runs_shared"] == 1);
  CHECK(nst["speed_from_shared"] == false);
  CHECK(bst["speed_from_shared"] == true);
  CHECK(md.find("| 900 | 0.90x |") != std::string::npos);
  CHECK(md.find("| 700 (shared, 3/3 runs) | n/a (shared) |") != std::string::npos);
  CHECK(md.find("Speed: 4 of 9 runs shared their cores") != std::string::npos);
  CHECK(md.find("| 50% |") != std::string::npos);  // the run table's share of the cores
  // The planned GPU memory: nvfp4's native path holds less than fp32's tensors, bf16's plan
  // is the memory planner's bf16 plan.
  const double gpu32 = (*find_mode(cmp, "fp32"))["stats"]["planned_gpu_bytes"].get<double>();
  const double gpu4 = nst["planned_gpu_bytes"].get<double>();
  const double gpu16 = bst["planned_gpu_bytes"].get<double>();
  CHECK(gpu32 > 0);
  CHECK(gpu16 < gpu32);
  CHECK(gpu4 < gpu32);
  tg::Config c16 = tg::Config();
  c16.precision.mode = tg::Mode::BF16;
  CHECK(gpu16 == double(tg::planned_gpu_bytes(c16, tg::model_config(c16), 1)));
  CHECK(md.find("| peak memory, this CPU | planned GPU memory | vs fp32 |") != std::string::npos);
  // No floor and no --quality_loss: no quality column, no "not reached".
  CHECK(md.find("steps to quality") == std::string::npos);
  CHECK(md.find("not reached") == std::string::npos);
  CHECK(!runs_of(out / "runs.jsonl", "fp32")[0].contains("steps_to_quality"));
  // With a target it is back, interpolated: val 2 - 0.9 s / 100 crosses 1.5 at step 55.6.
  tgt::TempDir out2;
  REQUIRE(tgt::run_binary(
              "report '" + runs.path + "' --quality_loss 1.5 --out '" + out2.path + "'", &log) ==
          0);
  const json cmp2 = json::parse(tgt::slurp(out2 / "compare.json"));
  CHECK(runs_of(out2 / "runs.jsonl", "fp32")[0]["steps_to_quality"].get<double>() ==
        doctest::Approx(50 / 0.9));
  CHECK(tgt::slurp(out2 / "report.md").find("steps (s) to val 1.5000") != std::string::npos);
}

TEST_CASE("report: with two seeds a mode the verdict says they are too few") {
  tgt::TempDir runs, out;
  make_run(runs / "a1", "fp32", "dynamic", 1, 1.100);
  make_run(runs / "a2", "fp32", "dynamic", 2, 1.101);
  make_run(runs / "b1", "bf16", "dynamic", 1, 1.130);
  make_run(runs / "b2", "bf16", "dynamic", 2, 1.133);
  std::string log;
  REQUIRE(tgt::run_binary("report '" + runs.path + "' --out '" + out.path + "'", &log) == 0);
  const std::string md = tgt::slurp(out / "report.md");
  INFO(md);
  CHECK(md.find("worse than fp32 by 0.0310, but 2 seeds are too few for a t-test to mean much "
                "(Welch, df ") != std::string::npos);
  CHECK(md.find("sigma (Welch t-test") == std::string::npos);
  const json cmp = json::parse(tgt::slurp(out / "compare.json"));
  CHECK((*find_mode(cmp, "bf16"))["stats"]["few_seeds"] == true);
}

TEST_CASE("report: bad arguments are usage errors naming the problem") {
  tgt::TempDir empty;
  std::string out;
  CHECK(tgt::run_binary("report", &out) == 2);
  CHECK(out.find("at least one run directory") != std::string::npos);
  CHECK(tgt::run_binary("report /nonexistent-dir", &out) == 2);
  CHECK(out.find("/nonexistent-dir is neither a runs file nor a directory") != std::string::npos);
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
