#include "compare.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/data/prepare.h"
#include "src/precision/precision.h"
#include "src/training/run_dir.h"
#include "src/training/train.h"
#include "stats.h"

namespace tg {
using json = nlohmann::json;

namespace {

// A study's runs are a list of precision presets (--modes) times a list of state presets
// (--states), from the one registry (src/config/presets.h).
const Preset& find_study_preset(PresetFamily family, const std::string& name) {
  if (const Preset* p = find_preset(family, name)) return *p;
  throw UsageError(strf("compare: unknown %s '%s' (one of %s)",
                        family == PresetFamily::Precision ? "mode" : "state choice", name.c_str(),
                        preset_names_text(family).c_str()));
}
const Preset& find_compare_mode(const std::string& name) {
  return find_study_preset(PresetFamily::Precision, name);
}
const Preset& find_state_study(const std::string& name) {
  return find_study_preset(PresetFamily::State, name);
}
const std::vector<Preset>& compare_modes() { return presets(PresetFamily::Precision); }
const std::vector<Preset>& state_studies() { return presets(PresetFamily::State); }

// The config a run directory was trained with, without the keys that only say how a run
// was started (so a resumed run matches the one it continues).
json comparable_config(json c) {
  if (c.contains("checkpoint")) c["checkpoint"].erase("resume");
  // The state keys a preset sets say what it did (runs from before presets have none).
  if (c.contains("precision") && c["precision"].contains("state"))
    c["precision"]["state"].erase("preset");
  if (c.contains("train")) {
    c["train"].erase("overwrite");
    c["train"].erase("stop_at_step");
  }
  return c;
}

// Re-running the same compare continues it: a finished run is reused (its summary is
// returned), an interrupted one resumes from its checkpoint, and a directory trained with
// another config is moved aside (train.overwrite) rather than mixed in.
json prepare_mode_run(Config& c, const std::string& name) {
  const std::string dir = c.train.out_dir;
  if (earlier_run_files(dir).empty()) return nullptr;
  const json old_cfg = read_json_or_null(join_path(dir, "config.json"));
  const bool same =
      !old_cfg.is_null() && comparable_config(old_cfg) == comparable_config(config_to_json(c));
  if (!same) {
    printf("compare: %s holds a run with another config; it is moved aside\n", dir.c_str());
    c.train.overwrite = true;
    return nullptr;
  }
  const json summary = read_json_or_null(join_path(dir, "summary.json"));
  if (summary.is_object() && summary.contains("final_val_loss") &&
      summary.value("steps", -1) == c.train.steps) {
    printf("compare: %s finished earlier with this config; reusing %s/summary.json\n", name.c_str(),
           dir.c_str());
    return summary;
  }
  printf("compare: %s was interrupted; resuming it from %s\n", name.c_str(), dir.c_str());
  c.checkpoint.resume = true;
  return nullptr;
}

// The state choice whose keys c has; "" for fp32 state (nothing to name: a plain mode's run)
// or a combination no choice names.
std::string state_study_of(const Config& c) {
  // The keys decide (runs from before presets have none).
  auto state_keys = [](const Config& x) {
    json st = config_to_json(x)["precision"]["state"];
    st.erase("preset");
    return st;
  };
  const json have = state_keys(c);
  Config fp32 = c;
  apply_preset(fp32, state_studies()[0]);
  if (state_keys(fp32) == have) return "";
  for (const Preset& st : state_studies()) {
    Config x = c;
    apply_preset(x, st);
    if (state_keys(x) == have) return st.name;
  }
  return "";
}

// Why mode `mode` cannot keep state choice st with the base config over `world` ranks (the
// run's own refusal, e.g. bf16 master weights in an fp32 mode, or fp8 weight gathers without
// ZeRO-1); "" when it can.
std::string state_misfit(const Config& base, const std::string& mode, const Preset* st,
                         int world) {
  Config c = base;
  apply_preset(c, find_compare_mode(mode));
  if (st) apply_preset(c, *st);
  try {
    config_validate_run(c, world);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// A run's name: the mode's, and "+<state>" for a state choice other than fp32 state (which is
// the plain mode's run, sharing its directory).
std::string run_name(const std::string& mode, const std::string& state) {
  return state.empty() || state == state_studies()[0].name ? mode : mode + "+" + state;
}

// How much of the config a mode sets beyond precision.mode: a run is named after the most
// specific mode that reproduces its precision keys (plain nvfp4 keeps whatever the config
// says, so it would also match every ablation; an ablation with smoothing added matches the
// ablation too).
size_t mode_specificity(const Preset& m) { return m.keys.size(); }

// One mode x state x seed run (state null: the config's own state): reuses a finished run,
// resumes an interrupted one, else trains.
json run_one(const Config& base, const std::string& out, const Preset& spec,
             const Preset* state, int64_t seed, int nseeds) {
  Config c = base;
  apply_preset(c, spec);
  if (state) apply_preset(c, *state);
  const std::string name = run_name(spec.name, state ? state->name : "");
  c.train.seed = seed;
  c.train.out_dir = nseeds > 1 ? join_path(join_path(out, name), strf("seed%lld", (long long)seed))
                               : join_path(out, name);
  c.checkpoint.resume = false;
  c.train.overwrite = false;
  json r = {{"seed", seed}, {"dir", c.train.out_dir}};
  try {
    const json earlier = prepare_mode_run(c, name);
    // Several ranks (mpirun): every rank has looked at the run directory before any writes to
    // it, so that all decide alike whether to reuse, resume or start the run.
    if (comm_world() > 1) comm().barrier();
    r["summary"] = earlier.is_null() ? run_training(c) : earlier;
    if (!earlier.is_null()) r["reused"] = true;
  } catch (const Error& e) {
    // A mode that cannot train (fp16 without scaling may diverge) is a result, not a crash;
    // its config goes into the runs file, whether or not the run wrote its config.json.
    r["error"] = e.what();
    r["config"] = config_to_json(c);
    printf("compare: %s seed %lld failed: %s\n", name.c_str(), (long long)seed, e.what());
  }
  return r;
}

}  // namespace

std::string compare_mode_of(const Config& c) {
  const json have = config_to_json(c)["precision"];
  std::vector<const Preset*> by_specificity;
  for (const Preset& m : compare_modes()) by_specificity.push_back(&m);
  std::stable_sort(by_specificity.begin(), by_specificity.end(),
                   [](const Preset* a, const Preset* b) {
                     return mode_specificity(*a) > mode_specificity(*b);
                   });
  // The state keys are the state choice's, matched apart.
  const std::string state = state_study_of(c);
  for (const Preset* m : by_specificity) {
    Config x = c;
    apply_preset(x, *m);
    if (config_to_json(x)["precision"] == have) return run_name(m->name, state);
  }
  return "";
}

std::string compare_mode_what(const std::string& name) {
  const size_t plus = name.find('+');
  if (plus == std::string::npos) return find_compare_mode(name).what;
  std::string mode = find_compare_mode(name.substr(0, plus)).what;
  const Preset& st = find_state_study(name.substr(plus + 1));
  // A state choice with master weights of its own replaces what the mode says of them.
  const std::string fp32_master =
      "; " + std::string(master_format_info(MasterFormat::FP32).summary);
  const bool own_master = std::any_of(st.keys.begin(), st.keys.end(), [](const auto& kv) {
    return kv.first == "precision.state.master" &&
           kv.second != master_format_name(MasterFormat::FP32);
  });
  if (own_master && mode.size() > fp32_master.size() &&
      mode.compare(mode.size() - fp32_master.size(), fp32_master.size(), fp32_master) == 0)
    mode.resize(mode.size() - fp32_master.size());
  return mode + "; " + st.what;
}

std::vector<std::string> compare_mode_names() {
  std::vector<std::string> names;
  for (const Preset& m : compare_modes()) names.push_back(m.name);
  return names;
}

void apply_compare_mode(Config& c, const std::string& name) {
  const size_t plus = name.find('+');
  apply_preset(c, find_compare_mode(name.substr(0, plus)));
  if (plus != std::string::npos) apply_preset(c, find_state_study(name.substr(plus + 1)));
}

std::string compare_mode_names_text() { return preset_names_text(PresetFamily::Precision); }
std::string compare_state_names_text() { return preset_names_text(PresetFamily::State); }
std::string compare_default_modes() {
  std::string names;
  for (const Preset* p : default_mode_study()) names += (names.empty() ? "" : ",") + p->name;
  return names;
}
void check_compare_mode(const std::string& name) { find_compare_mode(name); }
void check_compare_state(const std::string& name) { find_state_study(name); }

namespace {

// Runs finished so far, for the progress lines' ETA.
struct Progress {
  int total = 0, done = 0, reused = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};

// A finished run in its progress line: its final val loss (and bits per byte), or failed.
std::string run_result(const json& run) {
  const json sm = run.value("summary", json::object());
  if (!sm.value("final_val_loss", json(nullptr)).is_number()) return "failed";
  std::string r = strf("val %.4f", sm["final_val_loss"].get<double>());
  if (sm.value("final_val_bpb", json(nullptr)).is_number())
    r += strf(" (%.3f bpb)", sm["final_val_bpb"].get<double>());
  return r;
}

// Every seed of one mode and state, one progress line per finished run; their entry of the
// results.
json run_mode(const CompareRequest& a, const std::string& mode, const Preset* state,
              Progress* p) {
  const Preset& spec = find_compare_mode(mode);
  const std::string name = run_name(mode, state ? state->name : "");
  const std::string what = compare_mode_what(name);
  json runs = json::array();
  for (int k = 0; k < a.nseeds; k++) {
    const int64_t seed = a.base.train.seed + k;
    printf("\n===== compare: %s (%s), seed %lld =====\n", name.c_str(), what.c_str(),
           (long long)seed);
    fflush(stdout);
    runs.push_back(run_one(a.base, a.out, spec, state, seed, a.nseeds));
    p->done++;
    const double el =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - p->t0).count();
    json& last = runs.back();
    // The ETA counts the runs trained here, not the ones reused from an earlier compare.
    if (last.value("reused", false)) p->reused++;
    const int trained = p->done - p->reused;
    const std::string eta =
        trained > 0 ? fmt_duration(el / trained * (p->total - p->done)) : std::string("?");
    last.erase("reused");
    printf("compare: run %d/%d done (%s seed %lld: %s) | elapsed %s | eta %s\n", p->done, p->total,
           name.c_str(), (long long)seed, run_result(last).c_str(), fmt_duration(el).c_str(),
           eta.c_str());
    fflush(stdout);
  }
  return {{"name", name}, {"what", what}, {"runs", runs}};
}

}  // namespace

void run_compare(const CompareRequest& a) {
  config_validate(a.base);
  make_dirs(a.out);
  const json meta = read_dataset_meta(a.base.data.train);
  const double floor = dataset_loss_floor(meta, a.base.data.seq_len);

  // Every mode x state x seed (the states a mode cannot keep skipped, said).
  std::vector<std::pair<std::string, const Preset*>> plan;
  std::vector<const Preset*> states;
  std::string first_misfit;  // why the first skipped run was refused
  for (const std::string& name : a.states) states.push_back(&find_state_study(name));
  if (states.empty()) states.push_back(nullptr);
  for (const std::string& mode : a.modes)
    for (const Preset* st : states) {
      const std::string misfit = state_misfit(a.base, mode, st, comm_world());
      if (misfit.empty()) {
        plan.push_back({mode, st});
        continue;
      }
      printf("compare: %s skipped: %s\n", run_name(mode, st ? st->name : "").c_str(),
             misfit.c_str());
      if (first_misfit.empty()) first_misfit = misfit;
    }
  if (plan.empty()) throw UsageError("compare: no run can start: " + first_misfit);
  Progress progress;
  progress.total = int(plan.size()) * a.nseeds;
  json results = json::array();
  for (const auto& [mode, st] : plan) results.push_back(run_mode(a, mode, st, &progress));
  if (comm_rank() != 0) return;
  ReportSpec spec;
  spec.out = a.out;
  for (const auto& r : results) spec.groups.push_back({r["name"], r["what"], r["runs"]});
  spec.config = config_to_json(a.base);
  spec.floor = floor;
  spec.plateau = dataset_plateau_loss(meta, a.base.data.seq_len);
  spec.quality = a.quality;
  spec.quality_loss = a.quality_loss;
  // The reference: fp32 (or the first mode) in the first state it keeps.
  const bool has_fp32 =
      std::find(a.modes.begin(), a.modes.end(), mode_name(Mode::FP32)) != a.modes.end();
  const std::string ref_mode = has_fp32 ? mode_name(Mode::FP32) : a.modes[0];
  auto plan_name = [](const auto& entry) {
    return run_name(entry.first, entry.second ? entry.second->name : "");
  };
  spec.reference = plan_name(plan[0]);
  for (const auto& entry : plan)
    if (entry.first == ref_mode) {
      spec.reference = plan_name(entry);
      break;
    }
  const std::string md = write_report(spec);
  printf("\n%s\nwrote %s/report.md\n", md.c_str(), a.out.c_str());
}

}  // namespace tg
