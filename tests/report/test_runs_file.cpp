// test_runs_file.cpp: runs.jsonl (src/report/runs_file.h): what runs share is written once and
// each run comes back whole and exactly; files that are not runs files are refused by name;
// `train_gpt report` remakes a report from a runs file alone (tests/fixtures/runs.jsonl).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/report/runs_file.h"
#include "tests/test_util.h"

using json = nlohmann::json;

namespace {

// Three runs that agree in most of their config and summary, as a study's runs do; the third
// lacks a key the others have, and one number is written 1.0 in two runs and 1 in the other.
std::vector<json> three_runs() {
  std::vector<json> runs;
  for (int seed = 1; seed <= 3; seed++) {
    json r = {
        {"group", "bf16"},
        {"config",
         {{"model", {{"n_layer", 2}, {"n_embd", 64}}},
          {"train", {{"seed", seed}, {"steps", 100}, {"out_dir", "r/seed" + std::to_string(seed)}}}}},
        {"summary",
         {{"final_val_loss", 1.25 + 0.001 * seed},
          {"machine", {{"cpu", "AMD EPYC"}, {"others_cpu_share", 0.01 * seed}}},
          {"gpu", nullptr},
          {"scale", seed == 2 ? json(1) : json(1.0)}}}};
    if (seed == 3) r["summary"].erase("gpu");
    runs.push_back(r);
  }
  return runs;
}

}  // namespace

TEST_CASE("runs file: what the runs share is written once; every run comes back exactly") {
  const std::vector<json> runs = three_runs();
  const json shared = tg::shared_part(runs);
  CHECK(shared["group"] == "bf16");
  CHECK(shared["config"]["model"] == runs[0]["config"]["model"]);
  CHECK(shared["config"]["train"] == json({{"steps", 100}}));
  CHECK(shared["summary"]["machine"] == json({{"cpu", "AMD EPYC"}}));
  CHECK(!shared["summary"].contains("gpu"));    // one run lacks it
  CHECK(!shared["summary"].contains("scale"));  // 1 and 1.0 are not written alike
  const json line = tg::without_shared(runs[1], shared);
  CHECK(!line.contains("group"));
  CHECK(line["config"] == json({{"train", {{"seed", 2}, {"out_dir", "r/seed2"}}}}));
  CHECK(line["summary"]["scale"].dump() == "1");
  for (const json& r : runs) CHECK(tg::merged_with(tg::without_shared(r, shared), shared) == r);

  tgt::TempDir dir;
  tg::RunsFile file;
  file.report = {{"reference", "bf16"}, {"quality", 0.02}};
  file.runs = runs;
  tg::write_runs_file(dir / "runs.jsonl", file);
  const std::string text = tgt::slurp(dir / "runs.jsonl");
  CHECK(text.rfind("{\"runs_file\":1,\"runs\":3,\"report\":", 0) == 0);
  // The model section is written once, on the first line.
  size_t models = 0;
  for (size_t p = text.find("n_layer"); p != std::string::npos; p = text.find("n_layer", p + 1))
    models++;
  CHECK(models == 1);
  const tg::RunsFile back = tg::read_runs_file(dir / "runs.jsonl");
  CHECK(back.report == file.report);
  REQUIRE(back.runs.size() == 3);
  for (size_t i = 0; i < 3; i++) CHECK(back.runs[i].dump() == runs[i].dump());
  // One run: all of it is shared, its line is empty, and it still comes back.
  file.runs = {runs[2]};
  tg::write_runs_file(dir / "one.jsonl", file);
  CHECK(tg::read_runs_file(dir / "one.jsonl").runs[0].dump() == runs[2].dump());
}

TEST_CASE("runs file: a file that is not one, of another version or cut short is refused") {
  tgt::TempDir dir;
  auto error_reading = [&](const std::string& text) {
    tg::write_text_atomic(dir / "bad.jsonl", text);
    return tgt::error_of([&] { tg::read_runs_file(dir / "bad.jsonl"); });
  };
  const std::string path = dir / "bad.jsonl";
  CHECK(error_reading("") == path + ": empty, not a runs file");
  CHECK(error_reading("{\"kind\":\"train\",\"step\":1}\n") ==
        path + ": not a runs file (its first line has no \"runs_file\" version)");
  CHECK(error_reading("{\"runs_file\":2,\"runs\":0}\n") ==
        path + ": runs file version 2; this train_gpt reads version 1");
  CHECK(error_reading("{\"runs_file\":1,\"runs\":2,\"shared\":{}}\n{}\n") ==
        path + ": holds 1 runs, its first line says 2 (cut short?)");
  CHECK(error_reading("{\"runs_file\":1,\"runs\":1,\"shared\":{}}\n[1]\n") ==
        path + " line 2: not a JSON object");
  CHECK(error_reading("{\"runs_file\":1,\"runs\":1,\"shared\":{}}\n{\"a\":\n")
            .rfind(path + " line 2: not JSON (", 0) == 0);
  CHECK(tgt::error_of([&] { tg::read_runs_file(dir / "missing.jsonl"); }).find("missing.jsonl") !=
        std::string::npos);
}

TEST_CASE("report: a study's runs file alone remakes its report") {
  // tests/fixtures/runs.jsonl: 3 seeds of fp32 and of fp16 without loss scaling on the toy
  // task, as a study keeps them (no run directories, no metrics.jsonl); its first line gives
  // the report's title, reference, quality target and the task's plateau.
  tgt::TempDir out;
  std::string log;
  const int rc = tgt::run_binary("report tests/fixtures/runs.jsonl --out '" + out.path + "'", &log);
  INFO(log);
  REQUIRE(rc == 0);
  const std::string md = tgt::slurp(out / "report.md");
  CHECK(md.rfind("# Fixture study\n", 0) == 0);
  CHECK(md.find("Loss floor of the dataset: 1.2563 nats/token.") != std::string::npos);
  // The statistics, verdict and plateau from the summaries; the steps to quality and off the
  // plateau as the runs file recorded them (medians over the seeds).
  CHECK(md.find("| fp32 | 1.2570 ± 0.0005 | 1.2565 / 1.2575 | +0.0000 | reference |  | 260, "
                "3/3 runs | 540 (5 s), 3/3 runs |") != std::string::npos);
  // Seed by seed beside the verdict: each seed's loss minus fp32's of the same seed.
  CHECK(md.find("p = 5.81e-06) | +0.049 +0.050 +0.050 (3 of 3 higher) |") != std::string::npos);
  CHECK(md.find("| fp16-noscale | 1.3070 ± 0.0010 | 1.3060 / 1.3080 | +0.0500 | worse than fp32 "
                "by ") != std::string::npos);
  CHECK(md.find("| fp16-noscale | 3 | 1 | 1.3080 | 300 | never |") != std::string::npos);
  CHECK(md.find("| fp32 | 1 | 1 | 1.2570 | 250 | 540 |") != std::string::npos);
  // The same runs file again, byte for byte: the fixture is what the report writes.
  CHECK(tgt::slurp(out / "runs.jsonl") == tgt::slurp("tests/fixtures/runs.jsonl"));
  // Another target needs the runs' metrics.jsonl, which a study does not keep.
  CHECK(tgt::run_binary("report tests/fixtures/runs.jsonl --quality 0.05 --out '" + out.path + "'",
                        &log) == 1);
  CHECK(log.find("tests/fixtures/runs.jsonl holds the steps to quality measured for --quality "
                 "0.02") != std::string::npos);
  // With a loss floor a --quality_loss changes no target: the recorded steps stand.
  CHECK(tgt::run_binary("report tests/fixtures/runs.jsonl --quality_loss 1.5 --out '" + out.path +
                            "'",
                        &log) == 0);
  CHECK(tgt::run_binary("report tests/fixtures/regression_config.json --out '" + out.path + "'",
                        &log) == 1);
  CHECK(log.find("regression_config.json: not a runs file") != std::string::npos);
}

TEST_CASE("runs file: scripts/run_config.py gives one run's whole config, to train it again") {
  std::string text;
  if (tgt::run_shell("python3 --version >/dev/null 2>&1", &text) != 0) {
    MESSAGE("skipped: no python3");
    return;
  }
  REQUIRE(tgt::run_shell(
              "python3 scripts/run_config.py tests/fixtures/runs.jsonl fp16-noscale 2 2>&1",
              &text) == 0);
  json want;
  for (const json& r : tg::read_runs_file("tests/fixtures/runs.jsonl").runs)
    if (r["group"] == "fp16-noscale" && r["config"]["train"]["seed"] == 2) want = r["config"];
  REQUIRE(want.is_object());
  CHECK(json::parse(text) == want);
  CHECK(tgt::run_shell("python3 scripts/run_config.py tests/fixtures/runs.jsonl fp8 2 2>&1",
                       &text) != 0);
  CHECK(text.find("no run of group 'fp8' with seed 2 (groups: fp32, fp16-noscale)") !=
        std::string::npos);
}
