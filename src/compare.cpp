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
#include "run_dir.h"
#include "stats.h"
#include "train.h"

namespace tg {
using json = nlohmann::json;

namespace {

// What each name on --modes means, as config changes.
struct ModeSpec {
  const char* name;
  const char* mode;
  const char* loss_scale;  // "" keeps the config's
  bool stochastic;
  const char* what;
};
const ModeSpec kModes[] = {
    {"fp32", "fp32", "", false, "fp32 everywhere (the reference)"},
    {"bf16", "bf16", "", false, "bf16 weights, activations and gradients; fp32 master weights"},
    {"bf16-sr", "bf16", "", true, "bf16 with stochastic rounding of the weight copy"},
    {"fp16", "fp16", "dynamic", false, "fp16 with dynamic loss scaling"},
    {"fp16-noscale", "fp16", "none", false, "fp16 without loss scaling"},
    {"fp8", "fp8", "", false,
     "bf16 with the block linears in FP8 (E4M3 forward, E5M2 gradients), delayed scaling"},
    {"fp8-current", "fp8", "", false, "fp8 with current (just-in-time) scaling"},
    // The block-scaled recipes (src/recipe.h; options: precision.recipe.*), CPU only for now.
    {"fp8-rowwise", "fp8-rowwise", "", false, "block linears in E4M3 with one fp32 scale per row"},
    {"fp8-block", "fp8-block", "", false,
     "block linears in E4M3, fp32 scales per 1x128 block (activations, gradients) and 128x128 "
     "tile (weights)"},
    {"mxfp8", "mxfp8", "", false, "block linears in MXFP8: E4M3 with an E8M0 scale per 32"},
    {"mxfp4", "mxfp4", "", false,
     "block linears in MXFP4: E2M1 with an E8M0 scale per 32, SR gradients, Hadamard wgrad"},
    {"nvfp4", "nvfp4", "", false,
     "block linears in NVFP4: E2M1, UE4M3 per 16 + fp32 tensor scale, 16x16 weights, SR "
     "gradients, Hadamard wgrad, last layer bf16"},
};

const ModeSpec& find_mode(const std::string& name) {
  for (const ModeSpec& m : kModes)
    if (name == m.name) return m;
  std::string all;
  for (const ModeSpec& m : kModes) all += std::string(all.empty() ? "" : ", ") + m.name;
  throw UsageError(strf("compare: unknown mode '%s' (one of %s)", name.c_str(), all.c_str()));
}

std::string scripts_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = 0;
    std::string d = join_path(dirname_of(buf), "scripts");
    if (file_exists(join_path(d, "plot_compare.py"))) return d;
  }
  return "scripts";
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

json read_json_or_null(const std::string& path) {
  if (!file_exists(path)) return nullptr;
  try {
    std::vector<char> b = read_file(path, "run file");
    return json::parse(b.begin(), b.end());
  } catch (const std::exception&) {
    return nullptr;
  }
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

std::string num(const json& j, const char* fmt) {
  return j.is_number() ? strf(fmt, j.get<double>()) : std::string("n/a");
}

}  // namespace

namespace {

// Steps until the val loss first came within `frac` of the floor (or below `threshold`
// where the dataset has no floor); -1 when it never did.
int64_t steps_to_quality(const std::string& dir, double target) {
  const std::string path = join_path(dir, "metrics.jsonl");
  if (!std::isfinite(target) || !file_exists(path)) return -1;
  const std::vector<char> b = read_file(path, "metrics file");
  size_t pos = 0;
  const std::string text(b.begin(), b.end());
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    try {
      const json j = json::parse(text.substr(pos, end - pos));
      if (j.value("kind", "") == "val" && j["val_loss"].get<double>() <= target)
        return j["step"].get<int64_t>();
    } catch (const std::exception&) {
    }
    pos = end + 1;
  }
  return -1;
}

// One mode x seed run: reuses a finished run, resumes an interrupted one, else trains.
json run_one(const Config& base, const std::string& out, const ModeSpec& spec, int64_t seed,
             int nseeds) {
  Config c = base;
  c.precision.mode = spec.mode;
  if (*spec.loss_scale) c.precision.loss_scale.kind = spec.loss_scale;
  c.precision.stochastic_rounding = spec.stochastic;
  if (std::string(spec.name) == "fp8-current") c.precision.fp8.recipe = "current";
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
  } catch (const Error& e) {
    // A mode that cannot train (fp16 without scaling may diverge) is a result, not a crash.
    r["error"] = e.what();
    printf("compare: %s seed %lld failed: %s\n", spec.name, (long long)seed, e.what());
  }
  return r;
}

std::vector<double> finals(const json& runs, const char* key) {
  std::vector<double> v;
  for (const auto& r : runs)
    if (r.contains("summary") && r["summary"].value(key, json(nullptr)).is_number())
      v.push_back(r["summary"][key].get<double>());
  return v;
}

// Per mode: the spread of the final val loss over seeds, the verdict against fp32 and the
// steps to quality.
json mode_stats(const json& runs, const std::vector<double>* ref, double quality_target) {
  const std::vector<double> vals = finals(runs, "final_val_loss");
  const Sample s = describe_sample(vals);
  json st = {{"seeds_finished", vals.size()}, {"seeds", runs.size()}};
  if (!vals.empty())
    st.update(
        {{"val_mean", s.mean}, {"val_std", s.stddev}, {"val_min", s.min}, {"val_max", s.max}});
  const std::vector<double> tps = finals(runs, "tokens_per_second");
  if (!tps.empty()) st["tokens_per_second"] = describe_sample(tps).mean;
  if (ref) {
    const Verdict v = loss_verdict(vals, *ref, "fp32");
    st["verdict"] = v.kind;
    st["verdict_text"] = v.text;
    if (v.test.valid) st.update({{"diff", v.test.diff}, {"t", v.test.t}, {"p", v.test.p}});
  }
  std::vector<double> steps;
  int reached = 0;
  for (const auto& r : runs) {
    const int64_t k = steps_to_quality(r.value("dir", ""), quality_target);
    if (k >= 0) {
      reached++;
      steps.push_back(double(k));
    }
  }
  st["quality_reached"] = reached;
  if (!steps.empty()) {
    std::sort(steps.begin(), steps.end());
    st["steps_to_quality_median"] = steps[steps.size() / 2];
  }
  return st;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"modes",
       "comma-separated: fp32, bf16, bf16-sr, fp16, fp16-noscale, fp8, fp8-current, "
       "fp8-rowwise, fp8-block, mxfp8, mxfp4, nvfp4",
       "fp32,bf16,fp16,fp16-noscale,fp8"},
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
  const double quality_target =
      std::isfinite(floor) ? floor * (1 + quality) : (quality_loss > 0 ? quality_loss : NAN);

  // Every mode x seed, with one progress line per finished run.
  const int total = int(modes.size()) * nseeds;
  int done = 0;
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
      const json& last = runs.back();
      printf("compare: run %d/%d done (%s seed %lld: %s) | elapsed %s | eta %s\n", done, total,
             name.c_str(), (long long)seed,
             last.contains("summary") ? num(last["summary"]["final_val_loss"], "val %.4f").c_str()
                                      : "failed",
             fmt_duration(el).c_str(), fmt_duration(el / done * (total - done)).c_str());
      fflush(stdout);
    }
    results.push_back({{"name", name}, {"what", spec.what}, {"runs", runs}});
  }
  std::vector<double> ref_vals;
  for (const auto& r : results)
    if (r["name"] == "fp32") ref_vals = finals(r["runs"], "final_val_loss");
  for (auto& r : results)
    r["stats"] = mode_stats(r["runs"], ref_vals.empty() ? nullptr : &ref_vals, quality_target);

  json compare = {
      {"modes", results},
      {"seeds", nseeds},
      {"loss_floor", std::isfinite(floor) ? json(floor) : json(nullptr)},
      {"quality_target", std::isfinite(quality_target) ? json(quality_target) : json(nullptr)},
      {"config", config_to_json(base)}};
  write_text_atomic(join_path(out, "compare.json"), compare.dump(2) + "\n");

  // Plots, through matplotlib (scripts/plot_compare.py); the report says when they are missing.
  std::string cmd = "/usr/bin/python3";
  if (access(cmd.c_str(), X_OK) != 0) cmd = "python3";
  cmd += " '" + join_path(scripts_dir(), "plot_compare.py") + "' '" + out + "'";
  for (const auto& m : modes) cmd += " '" + m + "'";
  cmd += " 2>&1";
  int plot_rc = system(cmd.c_str());
  bool have_loss_png = plot_rc == 0 && file_exists(join_path(out, "loss.png"));
  bool have_scale_png = have_loss_png && file_exists(join_path(out, "loss_scale.png"));

  // report.md
  auto first_summary = [](const json& r) -> const json* {
    for (const auto& run : r["runs"])
      if (run.contains("summary")) return &run["summary"];
    return nullptr;
  };
  const json* ref = nullptr;
  double ref_tps = 0;  // fp32's mean over seeds
  for (const auto& r : results)
    if (r["name"] == "fp32") {
      ref = first_summary(r);
      ref_tps = r["stats"].value("tokens_per_second", 0.0);
    }
  std::string md;
  md += "# Precision comparison\n\n";
  md += strf(
      "Model: %d layers, %d heads, %d channels, vocabulary %d; batch %d x %d; %d steps; "
      "%d seed(s) per mode from %lld; data `%s`.\n\n",
      base.model.n_layer, base.model.n_head, base.model.n_embd, base.model.vocab_size,
      base.data.batch_size, base.data.seq_len, base.train.steps, nseeds, (long long)base.train.seed,
      base.data.train.c_str());
  if (std::isfinite(floor)) md += strf("Loss floor of the dataset: %.4f nats/token.\n\n", floor);
  const std::string quality_col =
      std::isfinite(floor)            ? strf("steps to within %g%% of the floor", 100 * quality)
      : std::isfinite(quality_target) ? strf("steps to val %.4f", quality_target)
                                      : std::string("steps to quality");
  md += "| mode | final val loss (mean ± std) | min / max | vs fp32 | verdict | " + quality_col +
        " | tokens/s | vs fp32 | peak memory | vs fp32 | skipped steps |\n";
  md += "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : results) {
    const std::string name = r["name"];
    const json& st = r["stats"];
    const json* s = first_summary(r);
    if (!s) {
      md += "| " + name + " | failed: " + r["runs"][0].value("error", std::string("?")) +
            " ||||||||||\n";
      continue;
    }
    std::string dval, dtps, dmem, verdict = st.value("verdict_text", std::string("n/a"));
    if (st.contains("diff")) dval = strf("%+.4f", st["diff"].get<double>());
    if (ref_tps > 0 && st.contains("tokens_per_second"))
      dtps = strf("%.2fx", st["tokens_per_second"].get<double>() / ref_tps);
    if (ref)
      dmem = strf("%.2fx", double((*s)["peak_memory_bytes"].get<size_t>()) /
                               double((*ref)["peak_memory_bytes"].get<size_t>()));
    int skipped = 0;
    for (const auto& run : r["runs"])
      if (run.contains("summary")) skipped += run["summary"].value("skipped_steps", 0);
    const int finished = st["seeds_finished"].get<int>(), all = st["seeds"].get<int>();
    std::string val = st.contains("val_mean") ? strf("%.4f ± %.4f", st["val_mean"].get<double>(),
                                                     st["val_std"].get<double>())
                                              : "n/a";
    if (finished < all) val += strf(" (%d of %d seeds)", finished, all);
    const std::string minmax =
        st.contains("val_min")
            ? strf("%.4f / %.4f", st["val_min"].get<double>(), st["val_max"].get<double>())
            : "";
    const int reached = st["quality_reached"].get<int>();
    const std::string q =
        reached == 0
            ? strf("not reached (0/%d)", all)
            : strf("%.0f (%d/%d seeds)", st["steps_to_quality_median"].get<double>(), reached, all);
    md += strf("| %s | %s | %s | %s | %s | %s | %s | %s | %.1f MiB | %s | %d |\n", name.c_str(),
               val.c_str(), minmax.c_str(), dval.c_str(),
               name == "fp32" ? "reference" : verdict.c_str(), q.c_str(),
               st.contains("tokens_per_second")
                   ? strf("%.0f", st["tokens_per_second"].get<double>()).c_str()
                   : "n/a",
               dtps.c_str(), (*s)["peak_memory_bytes"].get<size_t>() / 1048576.0, dmem.c_str(),
               skipped);
  }
  md += strf(
      "\nThe verdict compares each mode's final val losses over its %d seed(s) with fp32's by "
      "Welch's t-test (unequal variances, two-sided, alpha = 0.05); sigma is the difference in "
      "units of its standard error. Seeds change the initialisation and the data order; mode "
      "k's seed s and fp32's seed s start from the same weights. The steps to quality are the "
      "median over the seeds that reached it, at the val evaluations (eval.every).\n\n",
      nseeds);
  // Numerics telemetry, when the runs recorded it.
  bool any_numerics = false;
  for (const auto& r : results)
    any_numerics |= first_summary(r) && first_summary(r)->contains("numerics");
  if (any_numerics) {
    md +=
        "\nNumerics (precision.telemetry_every, first seed): share of stored values that are "
        "exactly zero (where underflow lands), subnormal (precision already lost) or non-finite, "
        "over all sampled steps.\n\n";
    md +=
        "| mode | weight grads zero | weight grads subnormal | activation grads zero | "
        "activation grads subnormal | activations subnormal | non-finite |\n";
    md += "|---|---:|---:|---:|---:|---:|---:|\n";
    auto pct = [](const json& g, const char* k) {
      return g.is_object() && g.contains(k) ? strf("%.3f%%", 100 * g[k].get<double>())
                                            : std::string("n/a");
    };
    for (const auto& r : results) {
      const json* fs = first_summary(r);
      if (!fs || !fs->contains("numerics")) continue;
      const json& nm = (*fs)["numerics"];
      double nonfinite = 0;
      for (const char* g : {"act", "dact", "grad"})
        if (nm.contains(g)) nonfinite = std::max(nonfinite, nm[g]["nonfinite_frac"].get<double>());
      md += "| " + r["name"].get<std::string>() + " | " + pct(nm["grad"], "zero_frac") + " | " +
            pct(nm["grad"], "subnormal_frac") + " | " + pct(nm["dact"], "zero_frac") + " | " +
            pct(nm["dact"], "subnormal_frac") + " | " + pct(nm["act"], "subnormal_frac") + " | " +
            strf("%.3f%%", 100 * nonfinite) + " |\n";
    }
    md +=
        "\nActivations include the attention matrix, whose upper triangle is zero by "
        "causality in every mode; compare zero fractions against the fp32 row.\n";
  }
  md +=
      "\nVal loss is measured on the same batches for every mode and seed. Peak memory is what "
      "the backend allocated (weights, master weights, gradients, Adam state, activations).\n\n";
  md += "Modes:\n\n";
  for (const auto& r : results)
    md += "- **" + r["name"].get<std::string>() + "**: " + r["what"].get<std::string>() + "\n";
  md += "\n";
  if (have_loss_png) md += "![loss curves](loss.png)\n\n";
  if (have_scale_png) md += "![loss scale](loss_scale.png)\n\n";
  if (!have_loss_png)
    md +=
        "(No plots: scripts/plot_compare.py needs python3 with matplotlib, which "
        "scripts/setup.sh installs.)\n\n";
  md +=
      "Raw data: `compare.json` and each mode's directory (`metrics.jsonl`, `summary.json`, "
      "`config.json`).\n";
  write_text_atomic(join_path(out, "report.md"), md);
  printf("\n%s\nwrote %s/report.md\n", md.c_str(), out.c_str());
  return 0;
}

}  // namespace tg
