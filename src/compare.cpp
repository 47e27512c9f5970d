#include "compare.h"

#include <unistd.h>

#include <algorithm>
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
  const bool same = !old_cfg.is_null() &&
                    comparable_config(old_cfg) == comparable_config(config_to_json(c));
  if (!same) {
    printf("compare: %s holds a run with another config; it is moved aside\n", dir.c_str());
    c.train.overwrite = true;
    return nullptr;
  }
  const json summary = read_json_or_null(join_path(dir, "summary.json"));
  if (summary.is_object() && summary.contains("final_val_loss") &&
      summary.value("steps", -1) == c.train.steps) {
    printf("compare: %s finished earlier with this config; reusing %s/summary.json\n",
           name.c_str(), dir.c_str());
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

int cmd_compare(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"modes", "comma-separated: fp32, bf16, bf16-sr, fp16, fp16-noscale, fp8, fp8-current",
       "fp32,bf16,fp16,fp16-noscale,fp8"},
      {"out", "output directory", "runs/compare"}};
  Config base;
  std::vector<std::pair<std::string, std::string>> ex;
  if (!config_parse_args(&base, argc, argv, "train_gpt compare", opts, &ex)) return 0;
  std::string modes_arg, out;
  for (auto& kv : ex) {
    if (kv.first == "modes") modes_arg = kv.second;
    if (kv.first == "out") out = kv.second;
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

  json results = json::array();
  for (const std::string& name : modes) {
    const ModeSpec& spec = find_mode(name);
    Config c = base;
    c.precision.mode = spec.mode;
    if (*spec.loss_scale) c.precision.loss_scale.kind = spec.loss_scale;
    c.precision.stochastic_rounding = spec.stochastic;
    if (name == "fp8-current") c.precision.fp8.recipe = "current";
    c.train.out_dir = join_path(out, name);
    c.checkpoint.resume = false;
    c.train.overwrite = false;
    printf("\n===== compare: %s (%s) =====\n", name.c_str(), spec.what);
    fflush(stdout);
    json r = {{"name", name}, {"what", spec.what}};
    try {
      const json earlier = prepare_mode_run(c, name);
      r["summary"] = earlier.is_null() ? run_training(c) : earlier;
    } catch (const Error& e) {
      // A mode that cannot train (fp16 without scaling may diverge) is a result, not a crash.
      r["error"] = e.what();
      printf("compare: %s failed: %s\n", name.c_str(), e.what());
    }
    results.push_back(r);
  }

  json meta = read_dataset_meta(base.data.train);
  double floor = dataset_loss_floor(meta, base.data.seq_len);
  json compare = {{"modes", results},
                  {"loss_floor", std::isfinite(floor) ? json(floor) : json(nullptr)},
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
  const json* ref = nullptr;
  for (const auto& r : results)
    if (r["name"] == "fp32" && r.contains("summary")) ref = &r["summary"];
  std::string md;
  md += "# Precision comparison\n\n";
  md += strf(
      "Model: %d layers, %d heads, %d channels, vocabulary %d; batch %d x %d; %d steps; "
      "seed %lld; data `%s`.\n\n",
      base.model.n_layer, base.model.n_head, base.model.n_embd, base.model.vocab_size,
      base.data.batch_size, base.data.seq_len, base.train.steps, (long long)base.train.seed,
      base.data.train.c_str());
  if (std::isfinite(floor)) md += strf("Loss floor of the dataset: %.4f nats/token.\n\n", floor);
  md +=
      "| mode | final train loss | final val loss | val vs fp32 | tokens/s | vs fp32 | peak "
      "memory | vs fp32 | skipped steps | final loss scale |\n";
  md += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : results) {
    const std::string name = r["name"];
    if (!r.contains("summary")) {
      md += "| " + name + " | failed: " + r["error"].get<std::string>() + " |||||||||\n";
      continue;
    }
    const json& s = r["summary"];
    std::string dval = "", dtps = "", dmem = "";
    if (ref && s["final_val_loss"].is_number() && (*ref)["final_val_loss"].is_number())
      dval =
          strf("%+.4f", s["final_val_loss"].get<double>() - (*ref)["final_val_loss"].get<double>());
    if (ref && s["tokens_per_second"].is_number() && (*ref)["tokens_per_second"].is_number())
      dtps = strf("%.2fx",
                  s["tokens_per_second"].get<double>() / (*ref)["tokens_per_second"].get<double>());
    if (ref)
      dmem = strf("%.2fx", double(s["peak_memory_bytes"].get<size_t>()) /
                               double((*ref)["peak_memory_bytes"].get<size_t>()));
    md += strf("| %s | %s | %s | %s | %s | %s | %.1f MiB | %s | %d | %s |\n", name.c_str(),
               num(s["final_train_loss"], "%.4f").c_str(), num(s["final_val_loss"], "%.4f").c_str(),
               dval.c_str(), num(s["tokens_per_second"], "%.0f").c_str(), dtps.c_str(),
               s["peak_memory_bytes"].get<size_t>() / 1048576.0, dmem.c_str(),
               s["skipped_steps"].get<int>(), num(s["final_loss_scale"], "%g").c_str());
  }
  // Numerics telemetry, when the runs recorded it.
  bool any_numerics = false;
  for (const auto& r : results)
    any_numerics |= r.contains("summary") && r["summary"].contains("numerics");
  if (any_numerics) {
    md +=
        "\nNumerics (precision.telemetry_every): share of stored values that are exactly zero "
        "(where underflow lands), subnormal (precision already lost) or non-finite, over all "
        "sampled steps.\n\n";
    md +=
        "| mode | weight grads zero | weight grads subnormal | activation grads zero | "
        "activation grads subnormal | activations subnormal | non-finite |\n";
    md += "|---|---:|---:|---:|---:|---:|---:|\n";
    auto pct = [](const json& g, const char* k) {
      return g.is_object() && g.contains(k) ? strf("%.3f%%", 100 * g[k].get<double>())
                                            : std::string("n/a");
    };
    for (const auto& r : results) {
      if (!r.contains("summary") || !r["summary"].contains("numerics")) continue;
      const json& nm = r["summary"]["numerics"];
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
      "\nFinal train loss is the mean of the last 10 steps; val loss is measured on the same "
      "batches for every mode. Peak memory is what the backend allocated (weights, master "
      "weights, gradients, Adam state, activations).\n\n";
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
