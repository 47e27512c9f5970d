// report.h: the precision report over groups of runs (report.md, compare.json and the
// plots): per group the spread of the final val loss over its seeds, a verdict against the
// reference group by Welch's t-test, the steps to a quality target, numerics telemetry.
// `compare` writes it for the runs it launched; `train_gpt report RUN_DIR...` for runs made
// anywhere, grouped by precision mode.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/numerics/precision_mode.h"

namespace tg {

// One group of runs that differ only in the seed: runs is
// [{"seed": s, "dir": d, "summary": {...}} or {"seed", "dir", "error": text}, ...], each with
// its "config" where known (else the report reads dir/config.json).
struct RunGroup {
  std::string name, what;
  nlohmann::json runs = nlohmann::json::array();
};

struct ReportSpec {
  std::string out;               // where report.md, compare.json and the plots go
  std::vector<RunGroup> groups;  // in table order
  nlohmann::json config;         // the config of the runs (the report's header)
  // The group the others are compared with.
  std::string reference = mode_name(Mode::FP32);
  double floor = NAN;       // the dataset's loss floor, NAN where it has none
  double plateau = NAN;     // the toy task's copy plateau, NAN where it has none
  double quality = 0.02;    // time to quality: within this fraction of the floor,
  double quality_loss = 0;  // or (no floor) below this val loss; 0: none
  std::string title = "Precision comparison";
  // A runs file's folder, for a report of its runs: the pictures that need the runs'
  // metrics.jsonl (gone from a study's folder) are taken from there when they cannot be drawn.
  std::string pictures_from;
};

// Writes out/compare.json (the statistics), out/runs.jsonl (every run's config and summary:
// runs_file.h), the plots (scripts/plot_compare.py) and out/report.md; returns the report's
// text.
std::string write_report(const ReportSpec& spec);

// The JSON in path, or null when it is missing or unreadable.
nlohmann::json read_json_or_null(const std::string& path);

}  // namespace tg
