#include "run_costs.h"

#include <set>

#include "src/base/common.h"
#include "src/base/cpu_load.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/model/model.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"

namespace tg {
using json = nlohmann::json;

namespace {
// The summaries of every finished run.
std::vector<const json*> summaries(const std::vector<RunGroup>& groups) {
  std::vector<const json*> out;
  for (const auto& g : groups)
    for (const auto& r : g.runs)
      if (r.contains("summary")) out.push_back(&r["summary"]);
  return out;
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}
}  // namespace

std::string device_md(const std::vector<RunGroup>& groups) {
  std::set<std::string> cpus, gpus;
  for (const json* s : summaries(groups)) {
    if (s->value("device", std::string("cpu")) != "cpu") {
      gpus.insert(s->value("gpu", json(nullptr)).is_string() ? (*s)["gpu"].get<std::string>()
                                                             : s->value("device", std::string()));
      continue;
    }
    const json m = s->value("machine", json::object());
    const std::string model = m.value("cpu", std::string());
    cpus.insert(m.contains("cpus") ? strf("%s, %d cores", model.empty() ? "a CPU" : model.c_str(),
                                          m["cpus"].get<int>())
                : model.empty()    ? "its model not recorded"
                                   : model);
  }
  std::string md;
  if (!cpus.empty())
    md += "Device: the CPU (" + joined(cpus) +
          "): the formats are emulated bit-faithfully, so the losses are those a GPU's kernels "
          "give, but speed and memory are this CPU's, not a GPU's. The planned GPU memory is "
          "the memory planner's (`train_gpt memory`).\n\n";
  if (!gpus.empty()) md += "Device: GPU (" + joined(gpus) + ").\n\n";
  return md;
}

std::string run_load(const json& summary) {
  const json m = summary.value("machine", json::object());
  const json shared = m.value("shared", json(nullptr));
  if (!shared.is_boolean()) return "unknown";
  return shared.get<bool>() ? "shared" : "own";
}

GroupSpeed group_speed(const json& runs) {
  GroupSpeed g;
  double own_sum = 0, all_sum = 0;
  int own = 0;
  for (const auto& r : runs) {
    if (!r.contains("summary")) continue;
    const json& s = r["summary"];
    if (!s.value("tokens_per_second", json(nullptr)).is_number()) continue;
    const double tps = s["tokens_per_second"].get<double>();
    const std::string load = run_load(s);
    g.runs++;
    g.shared += load == "shared";
    g.unknown += load == "unknown";
    all_sum += tps;
    if (load != "shared") own_sum += tps, own++;
  }
  if (g.runs == 0) return g;
  g.from_shared = own == 0;
  g.tokens_per_second = own > 0 ? own_sum / own : all_sum / g.runs;
  return g;
}

namespace {
// f(config) for the first run in `runs` whose config (the run's "config", as a runs file
// gives it, else its config.json) reads and f accepts; 0 if none.
template <typename F>
size_t with_first_run_config(const json& runs, F f) {
  for (const auto& r : runs) {
    const std::string dir = r.value("dir", std::string());
    const std::string from = r.contains("config") ? "the run's config" : dir + "/config.json";
    const json j = r.contains("config") ? r["config"]
                   : dir.empty()        ? json(nullptr)
                                        : read_json_or_null(join_path(dir, "config.json"));
    if (!j.is_object()) continue;
    try {
      Config c;
      config_apply_json(c, j, from);
      return f(c);
    } catch (const std::exception&) {
    }
  }
  return 0;
}
}  // namespace

// The ranks the runs trained over (summary.json's "ranks"; 1 for runs from before it).
static int ranks_of_runs(const json& runs) {
  int ranks = 1;
  for (const auto& r : runs)
    if (r.contains("summary") && r["summary"].contains("ranks")) ranks = r["summary"]["ranks"];
  return ranks;
}

size_t planned_gpu_bytes_of_runs(const json& runs) {
  const int ranks = ranks_of_runs(runs);
  return with_first_run_config(
      runs, [ranks](const Config& c) { return planned_gpu_bytes(c, model_config(c), ranks); });
}

size_t state_bytes_gpt2_xl_of_runs(const json& runs) {
  return with_first_run_config(
      runs, [](const Config& c) { return planned_state_bytes(c, gpt2_xl_config(), 1); });
}

uint64_t comm_bytes_gpt2_xl_of_runs(const json& runs) {
  const int ranks = ranks_of_runs(runs);
  if (ranks <= 1) return 0;
  return with_first_run_config(runs, [ranks](const Config& c) {
    return size_t(planned_comm_bytes(c, gpt2_xl_config(), ranks, c.train.zero_stage == 1));
  });
}

std::string costs_note_md(int shared_runs, int unknown_runs, int all_runs) {
  std::string md =
      unknown_runs == all_runs
          ? "\nSpeed: these runs do not record their machine's load (they were made before "
            "summary.json had it), so whether other processes shared their cores is not known: "
            "their speed is marked \"load not recorded\"."
          : strf(
                "\nSpeed: %d of %d runs shared their cores with other processes (these took "
                "more than %.0f%% of the cores' time, summary.json's "
                "machine.others_cpu_share). A group's tokens/s is the mean of its runs that had "
                "the cores to themselves; where none had, it is marked \"shared\" and no "
                "ratio is taken from it.",
                shared_runs, all_runs, 100 * kSharedMachineShare);
  if (unknown_runs > 0 && unknown_runs < all_runs)
    md += strf(
        " %d runs do not record their machine's load (made before summary.json had it): their "
        "speed is marked \"load not recorded\".",
        unknown_runs);
  return md +
         " Memory: the peak is what this CPU's backend allocated; the planned GPU memory is "
         "what a GPU run of the same config would hold (the block-scaled modes' quantized "
         "copies and GEMM scratch on the native path; no CUDA context), and its ratio is the "
         "one to read for a GPU.\n";
}

}  // namespace tg
