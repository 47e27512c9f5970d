#include "report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "report_parts.h"
#include "run_costs.h"
#include "runs_file.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "stats.h"

namespace tg {
using json = nlohmann::json;

json read_json_or_null(const std::string& path) {
  if (!file_exists(path)) return nullptr;
  try {
    std::vector<char> b = read_file(path, "run file");
    return json::parse(b.begin(), b.end());
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::string num(const json& j, const char* fmt) {
  return j.is_number() ? strf(fmt, j.get<double>()) : std::string("n/a");
}

const json* first_summary(const json& runs) {
  for (const auto& run : runs)
    if (run.contains("summary")) return &run["summary"];
  return nullptr;
}

namespace {


// The step at which the val loss first came down to `target`, interpolated linearly between
// the evaluation before (above the target) and the first one at or below it, so that a
// coarse eval.every does not round every run to the same evaluation; -1 when it never did.
double val_crossing_step(const std::string& dir, double target) {
  const std::string path = join_path(dir, "metrics.jsonl");
  if (!std::isfinite(target) || !file_exists(path)) return -1;
  const std::vector<char> b = read_file(path, "metrics file");
  const std::string text(b.begin(), b.end());
  double prev_step = -1, prev_loss = NAN;
  for (size_t pos = 0, end; pos < text.size(); pos = end + 1) {
    end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    double step = 0, loss = 0;
    try {  // a line that is not a val record with a step and a loss is skipped
      const json j = json::parse(text.substr(pos, end - pos));
      if (j.value("kind", "") != "val") continue;
      step = j.at("step").get<double>();
      loss = j.at("val_loss").get<double>();
    } catch (const std::exception&) {
      continue;
    }
    if (loss <= target)
      return prev_step < 0 || !(prev_loss > loss)
                 ? step
                 : prev_step + (step - prev_step) * (prev_loss - target) / (prev_loss - loss);
    prev_step = step;
    prev_loss = loss;
  }
  return -1;
}

std::vector<double> finals(const json& runs, const char* key) {
  std::vector<double> v;
  for (const auto& r : runs)
    if (r.contains("summary") && r["summary"].value(key, json(nullptr)).is_number())
      v.push_back(r["summary"][key].get<double>());
  return v;
}


// The first summary that puts its val loss in bits per byte (bpb_tokens_per_byte known);
// null when no run does (a dataset without a known ratio, or runs from before bpb).
const json* bpb_summary(const std::vector<RunGroup>& groups) {
  for (const auto& g : groups)
    for (const auto& r : g.runs)
      if (r.contains("summary") &&
          r["summary"].value("bpb_tokens_per_byte", json(nullptr)).is_number())
        return &r["summary"];
  return nullptr;
}

double quality_target(const ReportSpec& s) {
  if (std::isfinite(s.floor)) return s.floor * (1 + s.quality);
  return s.quality_loss > 0 ? s.quality_loss : NAN;
}

// The tables' optional columns: bits per byte (runs that know their tokens per byte), the
// toy task's plateau, and the steps to quality only where a target is set (a floor, or
// --quality_loss).
struct Columns {
  bool bpb = false, plateau = false, quality = false;
  bool state = false;  // a group keeps a state choice of compare's --states ("mode+state")
  bool comm = false;   // a group's runs sent gradients between ranks
};

// A run's step where its val loss came down to `level` (measured in its metrics.jsonl when that
// is there; else as a runs file recorded it under `key`, for the same level: report checks
// that), or none where no level is set.
void annotate_crossing(json& r, const char* key, double level) {
  const std::string dir = r.value("dir", "");
  if (!std::isfinite(level))
    r.erase(key);
  else if (file_exists(join_path(dir, "metrics.jsonl")) || !r.contains(key))
    r[key] = val_crossing_step(dir, level);
}

// Per run: the steps to quality (where a target is set) and, on the toy task, the step at
// which the val loss left the copy plateau (came below the middle of plateau and floor),
// -1: never; its config, the threads it ran with and whether it had its cores to itself.
void annotate_runs(json& runs, double target, double plateau_mid) {
  for (auto& r : runs) {
    annotate_crossing(r, "steps_to_quality", target);
    annotate_crossing(r, "plateau_left_step", plateau_mid);
    if (!r.contains("config")) {
      const json cfg = read_json_or_null(join_path(r.value("dir", ""), "config.json"));
      if (cfg.is_object()) r["config"] = cfg;
    }
    const json& cfg = r.value("config", json::object());
    if (cfg.contains("train")) r["threads"] = cfg["train"].value("threads", 0);
    if (r.contains("summary")) {
      r["load"] = run_load(r["summary"]);
      const json m = r["summary"].value("machine", json::object());
      r["others_cpu_share"] = m.value("others_cpu_share", json(nullptr));
    }
  }
}

// One line per run: where each mode's spread comes from.
std::string runs_md(const json& groups, const Columns& cols) {
  std::string md = "\nEvery run (threads: train.threads, the CPU part count that fixes fp32's ";
  md += "summation order; others: the share of the run's cores other processes took):\n\n";
  md += "| mode | seed | threads | final val loss |";
  md += cols.bpb ? " final val bpb |" : "";
  md += cols.plateau ? " left the plateau at step |" : "";
  md += cols.quality ? " steps to quality |" : "";
  md += " tokens/s | others | directory |\n|---|---:|---:|---:|";
  md += std::string(cols.bpb ? "---:|" : "") + (cols.plateau ? "---:|" : "") +
        (cols.quality ? "---:|" : "") + "---:|---:|---|\n";
  auto step = [](const json& r, const char* k) {
    const double s = r.value(k, -1.0);
    return s < 0 ? std::string("never") : strf("%.0f", s);
  };
  for (const auto& g : groups)
    for (const auto& r : g["runs"]) {
      const json& sm = r.value("summary", json::object());
      md += strf("| %s | %lld | %d | %s |", g["name"].get<std::string>().c_str(),
                 (long long)r.value("seed", 0LL), r.value("threads", 0),
                 num(sm.value("final_val_loss", json(nullptr)), "%.4f").c_str());
      if (cols.bpb) md += " " + num(sm.value("final_val_bpb", json(nullptr)), "%.4f") + " |";
      if (cols.plateau) md += " " + step(r, "plateau_left_step") + " |";
      if (cols.quality) md += " " + step(r, "steps_to_quality") + " |";
      const json share = r.value("others_cpu_share", json(nullptr));
      md += " " + num(sm.value("tokens_per_second", json(nullptr)), "%.0f") + " | " +
            (share.is_number() ? strf("%.0f%%", 100 * share.get<double>()) : "n/a") + " | `" +
            r.value("dir", std::string()) + "` |\n";
    }
  return md;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A group's steps to quality (the median over the runs that reached it) and the seconds to
// it (those steps at each run's mean step time), from the runs that had their cores to
// themselves where any did; the plateau's step likewise.
void add_quality_stats(json& st, const json& runs) {
  std::vector<double> steps, own_seconds, all_seconds, plateau;
  for (const auto& r : runs) {
    if (r.value("plateau_left_step", -1.0) >= 0)
      plateau.push_back(r["plateau_left_step"].get<double>());
    const double k = r.value("steps_to_quality", -1.0);
    if (k < 0) continue;
    steps.push_back(k);
    const json& sm = r.value("summary", json::object());
    if (sm.value("steps", 0) > 0 && sm.value("wall_seconds", json(nullptr)).is_number()) {
      const double sec = k * sm["wall_seconds"].get<double>() / sm["steps"].get<double>();
      all_seconds.push_back(sec);
      if (r.value("load", std::string()) != "shared") own_seconds.push_back(sec);
    }
  }
  st["quality_reached"] = steps.size();
  if (!steps.empty()) st["steps_to_quality_median"] = median(steps);
  if (!all_seconds.empty()) {
    st["seconds_to_quality_median"] = median(own_seconds.empty() ? all_seconds : own_seconds);
    st["seconds_from_shared"] = own_seconds.empty();
  }
  st["plateau_left"] = plateau.size();
  if (!plateau.empty()) st["plateau_left_median"] = median(plateau);
}

// Per group: the spread of the final val loss over seeds, the verdict against the
// reference, the speed (runs on a shared machine apart), the planned GPU memory and the
// steps (and seconds) to quality, from annotated runs.
json group_stats(const json& runs, const std::vector<double>* ref, const std::string& ref_name) {
  const std::vector<double> vals = finals(runs, "final_val_loss");
  const Sample s = describe_sample(vals);
  json st = {{"seeds_finished", vals.size()}, {"seeds", runs.size()}};
  if (!vals.empty())
    st.update(
        {{"val_mean", s.mean}, {"val_std", s.stddev}, {"val_min", s.min}, {"val_max", s.max}});
  const std::vector<double> bpb = finals(runs, "final_val_bpb");
  if (!bpb.empty()) {
    const Sample b = describe_sample(bpb);
    st.update({{"bpb_mean", b.mean}, {"bpb_std", b.stddev}});
  }
  const GroupSpeed sp = group_speed(runs);
  if (std::isfinite(sp.tokens_per_second)) st["tokens_per_second"] = sp.tokens_per_second;
  st.update({{"speed_runs_shared", sp.shared},
             {"speed_runs_load_unknown", sp.unknown},
             {"speed_from_shared", sp.from_shared}});
  if (const size_t gpu = planned_gpu_bytes_of_runs(runs)) st["planned_gpu_bytes"] = gpu;
  if (const size_t b = state_bytes_gpt2_xl_of_runs(runs)) st["state_bytes_gpt2_xl"] = b;
  const std::vector<double> sent = finals(runs, "comm_bytes_per_step");
  if (!sent.empty() && describe_sample(sent).mean > 0) {
    st["comm_bytes_per_step"] = describe_sample(sent).mean;
    if (const uint64_t b = comm_bytes_gpt2_xl_of_runs(runs)) st["comm_bytes_gpt2_xl"] = b;
  }
  if (ref) {
    const Verdict v = loss_verdict(vals, *ref, ref_name);
    st["verdict"] = v.kind;
    st["verdict_text"] = v.text;
    st["few_seeds"] = v.few_seeds;
    if (v.test.valid)
      st.update({{"diff", v.test.diff}, {"t", v.test.t}, {"df", v.test.df}, {"p", v.test.p}});
  }
  add_quality_stats(st, runs);
  return st;
}

std::string header_md(const ReportSpec& s, int max_seeds) {
  const json& m = s.config.value("model", json::object());
  const json& d = s.config.value("data", json::object());
  const json& t = s.config.value("train", json::object());
  std::string md = "# " + s.title + "\n\n";
  int ranks = 1;
  for (const auto& g : s.groups)
    if (const json* f = first_summary(g.runs)) ranks = std::max(ranks, f->value("ranks", 1));
  md += strf(
      "Model: %d layers, %d heads, %d channels, vocabulary %d; batch %d x %d%s; %d steps; "
      "up to %d run(s) per mode, seeds from %lld; data `%s`.\n\n",
      m.value("n_layer", 0), m.value("n_head", 0), m.value("n_embd", 0), m.value("vocab_size", 0),
      d.value("batch_size", 0), d.value("seq_len", 0),
      ranks > 1 ? strf(" per rank x %d ranks (MPI)", ranks).c_str() : "", t.value("steps", 0),
      max_seeds, (long long)t.value("seed", 0LL), d.value("train", std::string("?")).c_str());
  md += device_md(s.groups);
  if (std::isfinite(s.floor))
    md += strf("Loss floor of the dataset: %.4f nats/token.\n\n", s.floor);
  if (const json* b = bpb_summary(s.groups))
    md += strf(
        "Bits per byte (bpb, comparable across tokenizers) = val loss in nats/token x %.6g "
        "tokens per byte / ln 2; tokens per byte from %s.\n\n",
        (*b)["bpb_tokens_per_byte"].get<double>(),
        b->value("bpb_source", json("")).is_string() ? (*b)["bpb_source"].get<std::string>().c_str()
                                                     : "");
  return md;
}

std::string quality_column(const ReportSpec& s) {
  if (std::isfinite(s.floor)) return strf("steps (s) to within %g%% of the floor", 100 * s.quality);
  if (s.quality_loss > 0) return strf("steps (s) to val %.4f", s.quality_loss);
  return "steps to quality";
}

std::string quality_cell(const json& st) {
  const int reached = st["quality_reached"].get<int>(), all = st["seeds"].get<int>();
  if (reached == 0) return strf("not reached (0/%d)", all);
  std::string q = strf("%.0f", st["steps_to_quality_median"].get<double>());
  if (st.contains("seconds_to_quality_median"))
    q += strf(" (%.0f s%s)", st["seconds_to_quality_median"].get<double>(),
              st.value("seconds_from_shared", false) ? ", shared" : "");
  return q + strf(", %d/%d runs", reached, all);
}

// The speed cells: tokens/s, flagged where it comes from runs on a shared machine or of
// unknown load, and its ratio to the reference's, only where neither is from a shared machine.
std::string speed_cells(const json& st, const json& ref_st) {
  if (!st.contains("tokens_per_second")) return "n/a | |";
  std::string tps = strf("%.0f", st["tokens_per_second"].get<double>());
  const bool shared = st.value("speed_from_shared", false);
  if (shared)
    tps += strf(" (shared, %d/%d runs)", st.value("speed_runs_shared", 0), st.value("seeds", 0));
  else if (st.value("speed_runs_load_unknown", 0) > 0)
    tps += " (load not recorded)";
  std::string ratio;
  if (shared || ref_st.value("speed_from_shared", false))
    ratio = "n/a (shared)";
  else if (ref_st.value("tokens_per_second", 0.0) > 0)
    ratio = strf("%.2fx",
                 st["tokens_per_second"].get<double>() / ref_st["tokens_per_second"].get<double>());
  return tps + " | " + ratio + " |";
}

// The memory cells: this CPU's measured peak, and the planned GPU memory with its ratio to
// the reference's plan.
std::string memory_cells(const json& summary, const json& st, const json& ref_st) {
  std::string md = strf("%.1f MiB |", summary["peak_memory_bytes"].get<double>() / 1048576.0);
  if (!st.contains("planned_gpu_bytes")) return md + " n/a | |";
  const double gpu = st["planned_gpu_bytes"].get<double>();
  md += strf(" %.1f MiB |", gpu / 1048576.0);
  if (ref_st.contains("planned_gpu_bytes"))
    md += strf(" %.2fx |", gpu / ref_st["planned_gpu_bytes"].get<double>());
  else
    md += " |";
  return md;
}

// The state cells: GPT-2 1.5B's weights, master weights, gradients and moments in the group's
// formats, and their ratio to the reference's.
std::string state_cells(const json& st, const json& ref_st) {
  if (!st.contains("state_bytes_gpt2_xl")) return "n/a | |";
  const double b = st["state_bytes_gpt2_xl"].get<double>();
  std::string md = strf("%.1f GiB |", b / 1073741824.0);
  if (ref_st.contains("state_bytes_gpt2_xl"))
    return md + strf(" %.2fx |", b / ref_st["state_bytes_gpt2_xl"].get<double>());
  return md + " |";
}

// The communication cells: bytes a rank sent per step in the group's runs, the same at GPT-2
// 1.5B, and its ratio to the reference's.
std::string comm_cells(const json& st, const json& ref_st) {
  if (!st.contains("comm_bytes_per_step")) return "n/a | n/a | |";
  std::string md = strf("%.1f KiB |", st["comm_bytes_per_step"].get<double>() / 1024.0);
  if (!st.contains("comm_bytes_gpt2_xl")) return md + " n/a | |";
  const double b = st["comm_bytes_gpt2_xl"].get<double>();
  md += strf(" %.2f GiB |", b / 1073741824.0);
  if (ref_st.contains("comm_bytes_gpt2_xl"))
    return md + strf(" %.2fx |", b / ref_st["comm_bytes_gpt2_xl"].get<double>());
  return md + " |";
}

// A table row's mean ± std of a statistic (key_mean, key_std), or n/a.
std::string mean_std(const json& st, const std::string& key) {
  return st.contains(key + "_mean")
             ? strf("%.4f ± %.4f", st[key + "_mean"].get<double>(), st[key + "_std"].get<double>())
             : "n/a";
}

// A run's seed (its own field, else its config's train.seed; -1: neither).
long long seed_of(const json& r) {
  if (r.value("seed", json(nullptr)).is_number_integer()) return r["seed"].get<long long>();
  const json& t = r.value("config", json::object()).value("train", json::object());
  return t.value("seed", json(nullptr)).is_number_integer() ? t["seed"].get<long long>() : -1;
}

// Seed by seed: each run's final val loss minus the reference's run of the same seed (the same
// initial weights and data order), in seed order, and how many are higher: what the verdict's
// mean hides (one bad seed, or every seed a little worse).
std::string seed_by_seed_cell(const json& runs, const json& ref_runs) {
  std::map<long long, double> ref, own;
  for (const auto& r : ref_runs)
    if (r.contains("summary") && r["summary"].value("final_val_loss", json()).is_number())
      ref[seed_of(r)] = r["summary"]["final_val_loss"].get<double>();
  for (const auto& r : runs)
    if (r.contains("summary") && r["summary"].value("final_val_loss", json()).is_number())
      own[seed_of(r)] = r["summary"]["final_val_loss"].get<double>();
  std::string cell;
  int n = 0, higher = 0;
  for (const auto& [seed, v] : own) {
    if (seed < 0 || !ref.count(seed)) continue;
    const double d = v - ref[seed];
    cell += strf("%s%+.3f", n ? " " : "", d);
    n++;
    higher += d > 0;
  }
  return n ? cell + strf(" (%d of %d higher)", higher, n) : std::string("n/a");
}

std::string table_row(const RunGroup& g, const json& st, const json& ref_st, bool is_ref,
                      const Columns& cols, const json& ref_runs) {
  const json* s = first_summary(g.runs);
  const int n_cols = 11 + cols.plateau + cols.bpb + cols.quality + 2 * cols.state + 3 * cols.comm;
  if (!s)
    return "| " + g.name + " | failed: " + g.runs[0].value("error", std::string("?")) + " " +
           std::string(n_cols, '|') + "\n";
  int skipped = 0;
  for (const auto& run : g.runs)
    if (run.contains("summary")) skipped += run["summary"].value("skipped_steps", 0);
  const int finished = st["seeds_finished"].get<int>(), all = st["seeds"].get<int>();
  std::string row = "| " + g.name + " | " + mean_std(st, "val");
  if (finished < all) row += strf(" (%d of %d runs)", finished, all);
  if (cols.bpb) row += " | " + mean_std(st, "bpb");
  row += " | " + (st.contains("val_min") ? strf("%.4f / %.4f", st["val_min"].get<double>(),
                                                st["val_max"].get<double>())
                                         : std::string());
  row += " | " + (st.contains("diff") ? strf("%+.4f", st["diff"].get<double>()) : std::string());
  row += " | " + (is_ref ? std::string("reference") : st.value("verdict_text", std::string("n/a")));
  row += " | " + (is_ref ? std::string() : seed_by_seed_cell(g.runs, ref_runs));
  if (cols.plateau) {
    const int left = st["plateau_left"].get<int>();
    row += left == 0
               ? strf(" | never (0/%d)", all)
               : strf(" | %.0f, %d/%d runs", st["plateau_left_median"].get<double>(), left, all);
  }
  if (cols.quality) row += " | " + quality_cell(st);
  row += " | " + speed_cells(st, ref_st) + " " + memory_cells(*s, st, ref_st);
  if (cols.state) row += " " + state_cells(st, ref_st);
  if (cols.comm) row += " " + comm_cells(st, ref_st);
  return row + strf(" %d |\n", skipped);
}

// The report's groups as compare.json holds them (each run annotated, the group's
// statistics against the reference), with the statistics apart for the table.
struct GroupsJson {
  json groups = json::array();
  std::vector<json> stats;
  int max_seeds = 0;
};

GroupsJson groups_json(const ReportSpec& spec, const RunGroup* ref_group, double target,
                       double plateau_mid) {
  const std::vector<double> ref_vals =
      ref_group ? finals(ref_group->runs, "final_val_loss") : std::vector<double>();
  GroupsJson out;
  for (const auto& g : spec.groups) {
    json runs = g.runs;
    annotate_runs(runs, target, plateau_mid);
    out.stats.push_back(group_stats(runs, ref_vals.empty() ? nullptr : &ref_vals, spec.reference));
    const json* fs = first_summary(g.runs);
    const json* rs = ref_group ? first_summary(ref_group->runs) : nullptr;
    if (fs && fs->contains("numerics") && &g != ref_group)
      out.stats.back()["underflow"] = underflow_flags(
          (*fs)["numerics"], rs && rs->contains("numerics") ? &(*rs)["numerics"] : nullptr);
    out.groups.push_back(
        {{"name", g.name}, {"what", g.what}, {"runs", runs}, {"stats", out.stats.back()}});
    out.max_seeds = std::max(out.max_seeds, int(g.runs.size()));
  }
  return out;
}

// The table of modes (one row a group) and what its verdict and columns mean.
std::string modes_table_md(const ReportSpec& spec, const std::vector<json>& stats,
                           const RunGroup* ref_group, const Columns& cols, double plateau_mid) {
  static const json kNone = json::object();
  const json& ref_st = ref_group ? stats[ref_group - spec.groups.data()] : kNone;
  const std::string& ref = spec.reference;
  std::string md = "| mode | final val loss (mean ± std) |" +
                   std::string(cols.bpb ? " final val bpb (mean ± std) |" : "") +
                   " min / max | vs " + ref + " | verdict | seed by seed vs " + ref + " |" +
                   (cols.plateau ? " left the plateau at step |" : "") +
                   (cols.quality ? " " + quality_column(spec) + " |" : "") + " tokens/s | vs " +
                   ref + " | peak memory, this CPU | planned GPU memory | vs " + ref + " |" +
                   (cols.state ? " weights + state at GPT-2 1.5B | vs " + ref + " |" : "") +
                   (cols.comm ? " sent per step per rank | at GPT-2 1.5B | vs " + ref + " |" : "") +
                   " skipped steps |\n";
  md += std::string("|---|---:|") + (cols.bpb ? "---:|" : "") + "---:|---:|---|---|" +
        (cols.plateau ? "---:|" : "") + (cols.quality ? "---:|" : "") +
        "---:|---:|---:|---:|---:|" + (cols.state ? "---:|---:|" : "") +
        (cols.comm ? "---:|---:|---:|" : "") + "---:|\n";
  int shared = 0, unknown = 0, runs = 0;
  for (size_t i = 0; i < spec.groups.size(); i++) {
    md += table_row(spec.groups[i], stats[i], ref_st, spec.groups[i].name == ref, cols,
                    ref_group ? ref_group->runs : kNone);
    shared += stats[i].value("speed_runs_shared", 0);
    unknown += stats[i].value("speed_runs_load_unknown", 0);
    runs += stats[i].value("seeds_finished", 0);
  }
  md += strf(
      "\nThe verdict compares each mode's final val losses over its runs (its seeds, and "
      "thread counts where a report holds several) with %s's by Welch's t-test (unequal "
      "variances, two-sided, alpha = 0.05); sigma is the difference in units of its standard "
      "error. With fewer than %zu runs a side the test has one or two degrees of freedom, and "
      "the verdict says so. Seeds change the initialisation and the data order; mode k's seed "
      "s and %s's seed s start from the same weights, and the seed-by-seed column gives each "
      "seed's final val loss minus the reference's of that seed, in seed order.",
      ref.c_str(), kFewSeeds, ref.c_str());
  if (cols.quality)
    md +=
        " The steps to quality are the median over the runs that reached it, each run's step "
        "interpolated linearly between the val evaluation before the target and the first at "
        "or below it (eval.every apart); the seconds are those steps at the run's mean step "
        "time.";
  md += "\n" + costs_note_md(shared, unknown, runs);
  if (cols.state)
    md +=
        "\nThe weights + state column is what GPT-2 1.5B (gpt2-xl) keeps in weights, master "
        "weights, gradients and Adam moments in the group's mode and state formats, one process "
        "(the first four columns of `train_gpt memory --preset gpt2-xl`): the part the state "
        "formats change; activations come on top.\n";
  if (cols.comm)
    md +=
        "\nThe sent columns are the bytes one rank sent per step for the gradient reduction "
        "and ZeRO-1's weight all-gather (summary.json's comm_bytes_per_step, counted as ring "
        "algorithms send them), in these runs and planned for GPT-2 1.5B with the same mode, "
        "state, wire format and number of ranks (precision.state.grad_comm, "
        "docs/distributed.md).\n";
  if (cols.plateau)
    md += strf(
        "\nA run has left the copy plateau (val loss %.4f: what a model that ignores the "
        "context reaches) where its val loss crossed %.4f, halfway from the plateau to the "
        "floor (interpolated between evaluations); the column gives the median step over the "
        "runs that left it.\n",
        spec.plateau, plateau_mid);
  return md;
}


// compare.json: the report's facts and each group's statistics, one line a group (the runs
// themselves are runs.jsonl's).
std::string compare_json_text(const json& facts, const GroupsJson& gj) {
  std::string text = facts.dump();
  text.pop_back();  // its closing brace: the groups come last, one a line
  text += std::string(facts.empty() ? "" : ",") + "\"modes\":[\n";
  for (size_t i = 0; i < gj.groups.size(); i++) {
    const json& g = gj.groups[i];
    text += json({{"name", g["name"]}, {"what", g["what"]}, {"stats", g["stats"]}}).dump();
    text += i + 1 < gj.groups.size() ? ",\n" : "\n";
  }
  return text + "]}\n";
}

// runs.jsonl: every run's group, config, summary (or error), its directory where its config
// does not name it, and the steps measured from its metrics.jsonl (which a study does not
// keep); beside them the options that make this report again.
RunsFile runs_file_of(const ReportSpec& spec, const GroupsJson& gj) {
  RunsFile f;
  f.report = {{"title", spec.title},
              {"reference", spec.reference},
              {"quality", spec.quality},
              {"quality_loss", spec.quality_loss},
              {"plateau_loss", std::isfinite(spec.plateau) ? json(spec.plateau) : json(nullptr)}};
  for (const json& g : gj.groups)
    for (const json& r : g["runs"]) {
      json run = {{"group", g["name"]}};
      for (const char* k : {"config", "summary", "error", "steps_to_quality", "plateau_left_step"})
        if (r.contains(k)) run[k] = r[k];
      const json train = r.value("config", json::object()).value("train", json::object());
      if (r.value("dir", std::string()) != train.value("out_dir", std::string()))
        run["dir"] = r.value("dir", std::string());
      f.runs.push_back(run);
    }
  return f;
}

}  // namespace

std::string write_report(const ReportSpec& spec) {
  const double target = quality_target(spec);
  const RunGroup* ref_group = nullptr;
  for (const auto& g : spec.groups)
    if (g.name == spec.reference) ref_group = &g;
  const double plateau_mid = (spec.plateau + spec.floor) / 2;
  const GroupsJson gj = groups_json(spec, ref_group, target, plateau_mid);
  json facts = {
      {"seeds", gj.max_seeds},
      {"reference", spec.reference},
      {"runs_file", kRunsFileName},
      {"loss_floor", std::isfinite(spec.floor) ? json(spec.floor) : json(nullptr)},
      {"plateau_loss", std::isfinite(spec.plateau) ? json(spec.plateau) : json(nullptr)},
      {"quality_target", std::isfinite(target) ? json(target) : json(nullptr)}};
  if (const json* b = bpb_summary(spec.groups)) {
    facts["bpb_tokens_per_byte"] = (*b)["bpb_tokens_per_byte"];
    facts["bpb_source"] = b->value("bpb_source", json(nullptr));
  }
  make_dirs(spec.out);
  write_text_atomic(join_path(spec.out, "compare.json"), compare_json_text(facts, gj));
  write_runs_file(join_path(spec.out, kRunsFileName), runs_file_of(spec, gj));
  const Plots plots = draw_plots(spec);

  Columns cols;
  cols.bpb = bpb_summary(spec.groups) != nullptr;
  cols.plateau = std::isfinite(plateau_mid);
  cols.quality = std::isfinite(target);
  for (const auto& g : spec.groups) cols.state |= g.name.find('+') != std::string::npos;
  for (const json& st : gj.stats) cols.comm |= st.contains("comm_bytes_per_step");
  std::string md = header_md(spec, gj.max_seeds);
  md += modes_table_md(spec, gj.stats, ref_group, cols, plateau_mid);
  md += runs_md(gj.groups, cols);
  md += numerics_md(spec.groups, spec.config);
  md += underflow_md(spec.groups, spec.reference);
  md += quant_md(spec.groups);
  md += auto_md(spec.groups);
  md += closing_md(spec, plots);
  write_text_atomic(join_path(spec.out, "report.md"), md);
  return md;
}

}  // namespace tg
