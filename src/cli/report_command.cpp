// report_command.cpp: `train_gpt report RUNS...`: the runs named on the command line (run
// directories, compare outputs, folders above run directories, runs files), grouped by the
// config they were trained with, handed to write_report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/data/prepare.h"
#include "src/precision/precision.h"
#include "src/report/compare.h"
#include "src/report/report.h"
#include "src/report/runs_file.h"

namespace tg {
using json = nlohmann::json;
namespace {

double number_arg(const std::string& name, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  const double x = strtod(text.c_str(), &end);
  if (text.empty() || *end || !(x >= lo && x <= hi))
    throw UsageError(
        strf("report: --%s: '%s' is not a number in [%g, %g]", name.c_str(), text.c_str(), lo, hi));
  return x;
}

struct FoundRun {
  std::string dir;
  std::string config_from;  // where its config was read (DIR/config.json, or a runs file's line)
  json config, summary;     // summary null: unfinished
  // From a runs file: what its report recorded beside the summary (the error of a run that
  // failed, the steps to quality and off the plateau, measured from metrics.jsonl).
  json recorded = json::object();
  bool from_runs_file = false;
};

// The runs found, and the report facts of the first runs file among them (the options its
// report was made with: the defaults of this one).
struct FoundRuns {
  std::vector<FoundRun> runs;
  json facts;  // null: no runs file
  std::string facts_from;
};

// The runs of a runs file (runs.jsonl), each with its config; Error naming the line otherwise.
void read_runs_into(const std::string& path, FoundRuns& found) {
  const RunsFile file = read_runs_file(path);
  if (found.facts.is_null()) {
    found.facts = file.report;
    found.facts_from = path;
  }
  for (size_t i = 0; i < file.runs.size(); i++) {
    const json& r = file.runs[i];
    FoundRun f;
    f.config_from = strf("%s line %zu", path.c_str(), i + 2);
    if (!r.value("config", json(nullptr)).is_object())
      throw Error("report: " + f.config_from + ": a run without its config");
    f.config = r["config"];
    f.dir = r.value("dir", f.config.value("train", json::object()).value("out_dir", std::string()));
    f.summary = r.value("summary", json(nullptr));
    for (const char* k : {"error", "steps_to_quality", "plateau_left_step"})
      if (r.contains(k)) f.recorded[k] = r[k];
    f.from_runs_file = true;
    found.runs.push_back(f);
  }
}

// A runs file, a folder holding one (a report's or a compare's output: runs.jsonl), a run
// directory (config.json + metrics.jsonl), a compare output from before runs files
// (compare.json naming its runs) or a directory above run directories (searched two levels
// down).
void find_runs(const std::string& dir, int depth, FoundRuns& found) {
  if (file_exists(join_path(dir, kRunsFileName))) {
    read_runs_into(join_path(dir, kRunsFileName), found);
    return;
  }
  const json cmp = read_json_or_null(join_path(dir, "compare.json"));
  if (cmp.is_object() && cmp.contains("modes")) {
    for (const auto& m : cmp["modes"]) {
      // A compare from before seeds: one run per mode, in dir/<mode>.
      if (!m.contains("runs")) find_runs(join_path(dir, m.value("name", std::string())), 0, found);
      for (const auto& r : m.value("runs", json::array())) {
        std::string d = r.value("dir", std::string());
        // compare.json names its runs as the compare command saw them; a copied report
        // directory still finds them beside compare.json.
        const std::string rel = join_path(join_path(dir, m.value("name", std::string())),
                                          strf("seed%lld", (long long)r.value("seed", 0LL)));
        if (!dir_exists(d))
          d = dir_exists(rel) ? rel : join_path(dir, m.value("name", std::string()));
        find_runs(d, 0, found);
      }
    }
    return;
  }
  if (file_exists(join_path(dir, "config.json")) && file_exists(join_path(dir, "metrics.jsonl"))) {
    const json cfg = read_json_or_null(join_path(dir, "config.json"));
    if (!cfg.is_object()) throw Error(strf("report: %s/config.json cannot be read", dir.c_str()));
    FoundRun f;
    f.dir = dir;
    f.config_from = dir + "/config.json";
    f.config = cfg;
    f.summary = read_json_or_null(join_path(dir, "summary.json"));
    found.runs.push_back(f);
    return;
  }
  if (depth <= 0 || !dir_exists(dir)) return;
  std::vector<std::string> subs;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_directory()) subs.push_back(e.path().string());
  std::sort(subs.begin(), subs.end());
  for (const auto& s : subs) find_runs(s, depth - 1, found);
}

// What decides a group: the config without the keys that only say where and how a run
// ran (seed, directory, threads, logging, checkpoints).
json group_key(json c) {
  for (const char* k : {"seed", "out_dir", "threads", "adapt_threads", "overwrite", "stop_at_step",
                        "log_every", "device"})
    if (c.contains("train")) c["train"].erase(k);
  c.erase("checkpoint");
  c.erase("sample");
  return c;
}

// The first keys (section.key=value) where two configs differ, to tell apart groups of one
// mode that were trained differently.
std::string config_difference(const json& a, const json& b) {
  std::string out;
  for (const auto& [sec, vals] : a.items()) {
    if (!vals.is_object() || !b.contains(sec)) continue;
    for (const auto& [k, v] : vals.items())
      if (!b[sec].contains(k) || b[sec][k] != v) {
        if (!out.empty()) out += " ";
        out += sec + "." + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
        if (out.size() > 40) return out;
      }
  }
  return out;
}

std::vector<RunGroup> group_runs(const std::vector<FoundRun>& found, json* first_config) {
  std::vector<RunGroup> groups;
  std::vector<json> keys;
  for (const FoundRun& r : found) {
    Config c;
    config_apply_json(c, r.config, r.config_from);
    const json key = group_key(r.config);
    size_t i = 0;
    while (i < keys.size() && keys[i] != key) i++;
    if (i == keys.size()) {
      std::string name = compare_mode_of(c);
      const char* mode = mode_name(precision_spec(c).mode);
      const std::string what =
          name.empty() ? "precision.mode=" + std::string(mode) : compare_mode_what(name);
      if (name.empty()) name = mode;
      for (size_t j = 0; j < groups.size(); j++)
        if (groups[j].name == name) name += " (" + config_difference(key, keys[j]) + ")";
      groups.push_back({name, what});
      keys.push_back(key);
      if (first_config->is_null()) *first_config = r.config;
    }
    json run = {{"seed", c.train.seed}, {"dir", r.dir}, {"config", r.config}};
    if (r.summary.is_object() && r.summary.contains("final_val_loss"))
      run["summary"] = r.summary;
    else
      run["error"] = r.recorded.value("error", std::string("unfinished (no summary.json)"));
    for (const char* k : {"steps_to_quality", "plateau_left_step"})
      if (r.recorded.contains(k)) run[k] = r.recorded[k];
    groups[i].runs.push_back(run);
  }
  return groups;
}

void print_report_help() {
  printf(
      "Usage:\n  train_gpt report RUNS... [--out DIR] [--reference MODE] "
      "[--quality F] [--quality_loss L]\n\n"
      "The precision report (report.md, compare.json, runs.jsonl, plots) for any set of\n"
      "runs: run directories, compare outputs, directories above run directories, or a\n"
      "study's runs.jsonl (every run's config and summary; its report's options are the\n"
      "defaults). Runs whose configs differ only in seed, directory or threads form one\n"
      "group (mode).\n\n"
      "  --out DIR          where the report goes (default: report)\n"
      "  --reference MODE   the group the others are compared with (default: fp32 if\n"
      "                     present, else the first)\n"
      "  --quality F        time to quality: within F of the loss floor (default 0.02)\n"
      "  --quality_loss L   time to quality as a val loss, for data without a floor\n");
}

// The options given on the command line (the others may come from a runs file).
struct ReportArgs {
  std::vector<std::string> inputs;
  bool quality = false, quality_loss = false;
};

// The command line into spec's options and args; false after --help.
bool parse_report_args(int argc, char** argv, ReportSpec* spec, ReportArgs* args) {
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&](const std::string& name) {
      const std::string eq = "--" + name + "=";
      if (a.rfind(eq, 0) == 0) return a.substr(eq.size());
      if (i + 1 >= argc) throw UsageError("report: --" + name + " needs a value");
      return std::string(argv[++i]);
    };
    auto is = [&](const std::string& name) {
      return a == "--" + name || a.rfind("--" + name + "=", 0) == 0;
    };
    if (a == "-h" || a == "--help") {
      print_report_help();
      return false;
    }
    if (is("out")) {
      spec->out = value("out");
    } else if (is("reference")) {
      spec->reference = value("reference");
    } else if (is("quality")) {
      spec->quality = number_arg("quality", value("quality"), 0, 10);
      args->quality = true;
    } else if (is("quality_loss")) {
      spec->quality_loss = number_arg("quality_loss", value("quality_loss"), 0, 1e6);
      args->quality_loss = true;
    } else if (a.rfind("-", 0) == 0) {
      throw UsageError("report: unknown option " + a + " (see train_gpt report --help)");
    } else {
      args->inputs.push_back(a);
    }
  }
  return true;
}

// The runs in the runs files and directories named; each must hold at least one.
FoundRuns find_report_runs(const std::vector<std::string>& inputs) {
  FoundRuns found;
  for (const auto& d : inputs) {
    const size_t before = found.runs.size();
    if (file_exists(d) && !dir_exists(d))
      read_runs_into(d, found);
    else if (!dir_exists(d))
      throw UsageError("report: " + d + " is neither a runs file nor a directory");
    else
      find_runs(d, 2, found);
    if (found.runs.size() == before)
      throw UsageError("report: " + d +
                       " holds no run (config.json + metrics.jsonl), runs.jsonl, compare.json or "
                       "run directories below it");
  }
  return found;
}

// A runs file's report facts as this report's defaults: its title, reference, quality target
// and plateau; its folder's pictures where they cannot be drawn.
void apply_runs_file_facts(const FoundRuns& found, const ReportArgs& args, ReportSpec* spec) {
  const json& f = found.facts;
  if (!f.is_object()) return;
  spec->title = f.value("title", spec->title);
  if (spec->reference.empty()) spec->reference = f.value("reference", std::string());
  if (!args.quality) spec->quality = f.value("quality", spec->quality);
  if (!args.quality_loss) spec->quality_loss = f.value("quality_loss", spec->quality_loss);
  if (f.value("plateau_loss", json(nullptr)).is_number())
    spec->plateau = f["plateau_loss"].get<double>();
  spec->pictures_from = dirname_of(found.facts_from);
}

// The val loss that the steps to quality are measured to: within `quality` of the floor, or
// (no floor) `quality_loss`; NAN: none.
double target_of(double floor, double quality, double quality_loss) {
  if (std::isfinite(floor)) return floor * (1 + quality);
  return quality_loss > 0 ? quality_loss : NAN;
}

// A runs file's runs carry their steps to quality measured for its report's target; another
// target needs their metrics.jsonl, which a study does not keep.
void check_recorded_target(const FoundRuns& found, const ReportSpec& spec) {
  const json& f = found.facts;
  if (!f.is_object()) return;
  const double q = f.value("quality", 0.02), ql = f.value("quality_loss", 0.0);
  const double recorded = target_of(spec.floor, q, ql);
  const double asked = target_of(spec.floor, spec.quality, spec.quality_loss);
  if (recorded == asked || (std::isnan(recorded) && std::isnan(asked))) return;
  for (const FoundRun& r : found.runs)
    if (r.from_runs_file && !file_exists(join_path(r.dir, "metrics.jsonl")))
      throw Error(strf(
          "report: %s holds the steps to quality measured for --quality %g --quality_loss %g; "
          "measuring them for --quality %g --quality_loss %g needs each run's metrics.jsonl, "
          "and %s has none",
          found.facts_from.c_str(), q, ql, spec.quality, spec.quality_loss, r.dir.c_str()));
}

// The reference group: --reference's (which must name a group), else fp32, else the first;
// it goes first, the others stay in the order found.
void choose_reference(ReportSpec* spec) {
  bool have_ref = false;
  for (const auto& g : spec->groups) have_ref |= g.name == spec->reference;
  if (!spec->reference.empty() && !have_ref)
    throw UsageError("report: --reference " + spec->reference + " names no group (groups: " + [&] {
      std::string s;
      for (const auto& g : spec->groups) s += (s.empty() ? "" : ", ") + g.name;
      return s;
    }() + ")");
  if (spec->reference.empty()) {
    spec->reference = spec->groups[0].name;
    for (const auto& g : spec->groups)
      if (g.name == mode_name(Mode::FP32)) spec->reference = g.name;
  }
  std::stable_partition(spec->groups.begin(), spec->groups.end(),
                        [&](const RunGroup& g) { return g.name == spec->reference; });
}

// The loss levels the report measures against: the floor the runs' summaries give, and the
// toy task's plateau, from the dataset's meta.json where it is still there, unless a runs file
// said it (its runs' steps off the plateau were measured for that plateau, or none).
void find_loss_levels(ReportSpec* spec, bool plateau_given) {
  for (const auto& g : spec->groups)
    for (const auto& r : g.runs)
      if (r.contains("summary") && r["summary"].value("loss_floor", json(nullptr)).is_number()) {
        spec->floor = r["summary"]["loss_floor"].get<double>();
        break;
      }
  if (plateau_given) return;
  try {
    const json d = spec->config.value("data", json::object());
    spec->plateau = dataset_plateau_loss(read_dataset_meta(d.value("train", std::string())),
                                         d.value("seq_len", 0));
  } catch (const std::exception&) {
  }
}

}  // namespace

int cmd_report(int argc, char** argv) {
  ReportSpec spec;
  spec.reference.clear();
  spec.title = "Precision report";
  ReportArgs args;
  if (!parse_report_args(argc, argv, &spec, &args)) return 0;
  if (args.inputs.empty())
    throw UsageError("report: name at least one run directory or runs file (see --help)");
  if (spec.out.empty()) spec.out = "report";
  const FoundRuns found = find_report_runs(args.inputs);
  apply_runs_file_facts(found, args, &spec);
  spec.groups = group_runs(found.runs, &spec.config);
  choose_reference(&spec);
  find_loss_levels(&spec, found.facts.is_object());
  check_recorded_target(found, spec);
  const std::string md = write_report(spec);
  printf("%s\nwrote %s/report.md (%zu runs in %zu groups)\n", md.c_str(), spec.out.c_str(),
         found.runs.size(), spec.groups.size());
  return 0;
}

}  // namespace tg
