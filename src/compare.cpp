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

#include "common.h"
#include "config.h"
#include "fileio.h"
#include "prepare.h"
#include "report.h"
#include "run_dir.h"
#include "stats.h"
#include "train.h"

namespace tg {
using json = nlohmann::json;

namespace {

// NVFP4's ingredients (arXiv 2509.25149), switched off one at a time by the ablation modes
// below so that a study shows what each buys.
enum Nvfp4Ingredients {
  kKeepRecipe = -1,  // the config's precision.recipe.* keys as they are
  kSr = 1,           // stochastic rounding of the output gradients
  kRht = 2,          // 16-point random Hadamard transform of the wgrad operands
  kTiles2d = 4,      // 16x16 weight tiles
  kBf16Last = 8,     // the last layer's linears in bf16
  kAllIngredients = kSr | kRht | kTiles2d | kBf16Last,
};

// What each name on --modes means, as config changes.
struct ModeSpec {
  const char* name;
  const char* mode;
  const char* loss_scale;  // "" keeps the config's
  bool stochastic;
  const char* what;
  int ingredients = kKeepRecipe;        // nvfp4 ablations: the ingredients left on
  void (*outliers)(Config&) = nullptr;  // the outlier-handling studies: their keys
};

// Outlier handling (docs/precision.md: Adaptive precision; docs/outlier-study): the same uniform NVFP4 in
// every layer as nvfp4-no-bf16last, with the outlier channels of the forward GEMMs split out
// into bf16 (auto's machinery with NVFP4 as its only candidate), or every channel smoothed.
void nvfp4_split(Config& c) {
  c.precision.auto_.candidates = {"nvfp4"};
  c.precision.auto_.priors = false;
  c.precision.auto_.outliers = "split";
}
void smoothed(Config& c) { c.precision.recipe.smooth = true; }
void auto_no_split(Config& c) { c.precision.auto_.outliers = "none"; }
void auto_smoothed(Config& c) { c.precision.auto_.outliers = "smooth"; }
const ModeSpec kModes[] = {
    {"fp32", "fp32", "", false, "fp32 everywhere"},
    {"bf16", "bf16", "", false, "bf16 weights, activations and gradients; fp32 master weights"},
    {"bf16-sr", "bf16", "", true, "bf16 with stochastic rounding of the weight copy"},
    {"fp16", "fp16", "dynamic", false, "fp16 with dynamic loss scaling"},
    {"fp16-noscale", "fp16", "none", false, "fp16 without loss scaling"},
    {"fp8", "fp8", "", false,
     "bf16 with the block linears in FP8 (E4M3 forward, E5M2 gradients), delayed scaling"},
    {"fp8-current", "fp8", "", false, "fp8 with current (just-in-time) scaling"},
    // The block-scaled recipes (src/recipe.h; options: precision.recipe.*).
    {"fp8-rowwise", "fp8-rowwise", "", false, "block linears in E4M3 with one fp32 scale per row"},
    {"fp8-block", "fp8-block", "", false,
     "block linears in E4M3, fp32 scales per 1x128 block (activations, gradients) and 128x128 "
     "tile (weights)"},
    {"mxfp8", "mxfp8", "", false, "block linears in MXFP8: E4M3 with an E8M0 scale per 32"},
    {"mxfp4", "mxfp4", "", false,
     "block linears in MXFP4: E2M1 with an E8M0 scale per 32, SR gradients, Hadamard wgrad"},
    {"nvfp4", "nvfp4", "", false,
     "block linears in NVFP4: E2M1, UE4M3 per 16 + fp32 tensor scale, 16x16 weights, SR "
     "gradients, Hadamard wgrad, the last precision.recipe.bf16_last layers (default 1) in bf16"},
    // The ablation study of NVFP4's ingredients: each mode takes exactly one away (bare: all).
    {"nvfp4-no-sr", "nvfp4", "", false,
     "nvfp4 without stochastic rounding of the gradients (round to nearest)",
     kAllIngredients & ~kSr},
    {"nvfp4-no-rht", "nvfp4", "", false, "nvfp4 without the random Hadamard transform of wgrad",
     kAllIngredients & ~kRht},
    {"nvfp4-no-2d", "nvfp4", "", false, "nvfp4 with 1x16 weight blocks instead of 16x16 tiles",
     kAllIngredients & ~kTiles2d},
    {"nvfp4-no-bf16last", "nvfp4", "", false, "nvfp4 with the last layer quantized too",
     kAllIngredients & ~kBf16Last},
    {"nvfp4-bare", "nvfp4", "", false,
     "nvfp4 without any of them: E2M1 with UE4M3 scales per 1x16 and the tensor scale, nearest "
     "rounding, every layer quantized",
     0},
    {"auto", "auto", "", false,
     "per GEMM operand, the narrowest of precision.auto.candidates whose measured SQNR meets "
     "precision.auto.threshold_db (src/auto_precision.h)"},
    // The outlier-handling study: each handling beside the plain recipe it changes.
    {"nvfp4-split", "auto", "", false,
     "nvfp4 in every layer with the outlier input channels of the forward GEMMs in bf16 (auto, "
     "nvfp4 its only candidate, precision.auto.outliers=split)",
     kKeepRecipe, nvfp4_split},
    {"nvfp4-smooth", "nvfp4", "", false,
     "nvfp4 in every layer with SmoothQuant smoothing of the forward GEMMs "
     "(precision.recipe.smooth)",
     kAllIngredients & ~kBf16Last, smoothed},
    {"fp8-rowwise-smooth", "fp8-rowwise", "", false,
     "fp8-rowwise with SmoothQuant smoothing of the forward GEMMs (precision.recipe.smooth)",
     kKeepRecipe, smoothed},
    {"auto-nosplit", "auto", "", false,
     "auto with outlier channels only counted (precision.auto.outliers=none)", kKeepRecipe,
     auto_no_split},
    {"auto-smooth", "auto", "", false,
     "auto with every channel smoothed instead of outliers split (precision.auto.outliers=smooth)",
     kKeepRecipe, auto_smoothed},
};

std::string mode_names() {
  std::string all;
  for (const ModeSpec& m : kModes) all += std::string(all.empty() ? "" : ", ") + m.name;
  return all;
}

const ModeSpec& find_mode(const std::string& name) {
  for (const ModeSpec& m : kModes)
    if (name == m.name) return m;
  throw UsageError(
      strf("compare: unknown mode '%s' (one of %s)", name.c_str(), mode_names().c_str()));
}

// The config a run directory was trained with, without the keys that only say how a run
// was started (so a resumed run matches the one it continues).
json comparable_config(json c) {
  if (c.contains("checkpoint")) c["checkpoint"].erase("resume");
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

// Sets the precision keys that mode `spec` means.
void apply_mode(Config& c, const ModeSpec& spec) {
  c.precision.mode = spec.mode;
  if (*spec.loss_scale) c.precision.loss_scale.kind = spec.loss_scale;
  c.precision.stochastic_rounding = spec.stochastic;
  if (std::string(spec.mode) == "fp8")
    c.precision.fp8.recipe = std::string(spec.name) == "fp8-current" ? "current" : "delayed";
  if (spec.ingredients != kKeepRecipe) {
    auto& r = c.precision.recipe;
    r.stochastic_grads = spec.ingredients & kSr;
    r.hadamard = spec.ingredients & kRht;
    r.weight_2d = spec.ingredients & kTiles2d;
    r.bf16_last = (spec.ingredients & kBf16Last) ? -1 : 0;
  }
  if (spec.outliers) spec.outliers(c);
}

// How much of the config a mode sets beyond precision.mode: a run is named after the most
// specific mode that reproduces its precision keys (plain nvfp4 keeps whatever the config
// says, so it would also match every ablation).
int mode_specificity(const ModeSpec& m) {
  return m.outliers ? 2 : m.ingredients != kKeepRecipe ? 1 : 0;
}

// One mode x seed run: reuses a finished run, resumes an interrupted one, else trains.
json run_one(const Config& base, const std::string& out, const ModeSpec& spec, int64_t seed,
             int nseeds) {
  Config c = base;
  apply_mode(c, spec);
  c.train.seed = seed;
  c.train.out_dir = nseeds > 1
                        ? join_path(join_path(out, spec.name), strf("seed%lld", (long long)seed))
                        : join_path(out, spec.name);
  c.checkpoint.resume = false;
  c.train.overwrite = false;
  json r = {{"seed", seed}, {"dir", c.train.out_dir}};
  try {
    const json earlier = prepare_mode_run(c, spec.name);
    r["summary"] = earlier.is_null() ? run_training(c) : earlier;
    if (!earlier.is_null()) r["reused"] = true;
  } catch (const Error& e) {
    // A mode that cannot train (fp16 without scaling may diverge) is a result, not a crash.
    r["error"] = e.what();
    printf("compare: %s seed %lld failed: %s\n", spec.name, (long long)seed, e.what());
  }
  return r;
}

}  // namespace

std::string compare_mode_of(const Config& c) {
  const json have = config_to_json(c)["precision"];
  for (int level : {2, 1, 0})
    for (const ModeSpec& m : kModes) {
      if (mode_specificity(m) != level) continue;
      Config x = c;
      apply_mode(x, m);
      if (config_to_json(x)["precision"] == have) return m.name;
    }
  return "";
}

std::string compare_mode_what(const std::string& name) { return find_mode(name).what; }

std::vector<std::string> compare_mode_names() {
  std::vector<std::string> names;
  for (const ModeSpec& m : kModes) names.push_back(m.name);
  return names;
}

void apply_compare_mode(Config& c, const std::string& name) { apply_mode(c, find_mode(name)); }

int cmd_compare(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"modes", "comma-separated: " + mode_names(), "fp32,bf16,fp16,fp16-noscale,fp8"},
      {"out", "output directory", "runs/compare"},
      int_option("seeds", "runs per mode, seeds train.seed, train.seed+1, ...", "3", 1, 1000),
      number_option("quality",
                    "time-to-quality target: within this fraction of the loss floor "
                    "(datasets with a floor)",
                    "0.02", 0, 10),
      number_option("quality_loss",
                    "time-to-quality target as a val loss (datasets without a "
                    "floor; 0: none)",
                    "0", 0, 1e6)};
  Config base;
  std::vector<std::pair<std::string, std::string>> ex;
  if (!config_parse_args(&base, argc, argv, "train_gpt compare", opts, &ex)) return 0;
  std::string modes_arg, out;
  int nseeds = 3;
  double quality = 0.02, quality_loss = 0;
  for (auto& kv : ex) {
    if (kv.first == "modes") modes_arg = kv.second;
    if (kv.first == "out") out = kv.second;
    if (kv.first == "seeds") nseeds = atoi(kv.second.c_str());
    if (kv.first == "quality") quality = atof(kv.second.c_str());
    if (kv.first == "quality_loss") quality_loss = atof(kv.second.c_str());
  }
  std::vector<std::string> modes;
  for (size_t pos = 0, next; pos <= modes_arg.size(); pos = next + 1) {
    next = modes_arg.find(',', pos);
    if (next == std::string::npos) next = modes_arg.size();
    std::string m = modes_arg.substr(pos, next - pos);
    if (!m.empty()) {
      find_mode(m);
      modes.push_back(m);
    }
  }
  if (modes.empty()) throw UsageError("compare: --modes is empty");
  config_validate(base);
  make_dirs(out);
  const json meta = read_dataset_meta(base.data.train);
  const double floor = dataset_loss_floor(meta, base.data.seq_len);

  // Every mode x seed, with one progress line per finished run.
  const int total = int(modes.size()) * nseeds;
  int done = 0, reused = 0;
  const auto t0 = std::chrono::steady_clock::now();
  json results = json::array();
  for (const std::string& name : modes) {
    const ModeSpec& spec = find_mode(name);
    json runs = json::array();
    for (int k = 0; k < nseeds; k++) {
      const int64_t seed = base.train.seed + k;
      printf("\n===== compare: %s (%s), seed %lld =====\n", name.c_str(), spec.what,
             (long long)seed);
      fflush(stdout);
      runs.push_back(run_one(base, out, spec, seed, nseeds));
      done++;
      const double el =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      json& last = runs.back();
      // The ETA counts the runs trained here, not the ones reused from an earlier compare.
      if (last.value("reused", false)) reused++;
      const int trained = done - reused;
      const std::string eta =
          trained > 0 ? fmt_duration(el / trained * (total - done)) : std::string("?");
      last.erase("reused");
      printf("compare: run %d/%d done (%s seed %lld: %s) | elapsed %s | eta %s\n", done, total,
             name.c_str(), (long long)seed,
             last.contains("summary") && last["summary"]["final_val_loss"].is_number()
                 ? strf("val %.4f", last["summary"]["final_val_loss"].get<double>()).c_str()
                 : "failed",
             fmt_duration(el).c_str(), eta.c_str());
      fflush(stdout);
    }
    results.push_back({{"name", name}, {"what", spec.what}, {"runs", runs}});
  }
  ReportSpec spec;
  spec.out = out;
  for (const auto& r : results) spec.groups.push_back({r["name"], r["what"], r["runs"]});
  spec.config = config_to_json(base);
  spec.floor = floor;
  spec.plateau = dataset_plateau_loss(meta, base.data.seq_len);
  spec.quality = quality;
  spec.quality_loss = quality_loss;
  if (std::find(modes.begin(), modes.end(), "fp32") == modes.end()) spec.reference = modes[0];
  const std::string md = write_report(spec);
  printf("\n%s\nwrote %s/report.md\n", md.c_str(), out.c_str());
  return 0;
}

}  // namespace tg
