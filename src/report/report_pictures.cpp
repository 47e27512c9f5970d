// report_pictures.cpp: the report's pictures: scripts/plot_compare.py run over the report's
// folder (or the pictures kept beside a study's runs file copied in), its "note: " lines on
// what it left out, and the report's closing section that shows them.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "report_parts.h"
#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {

namespace {

// The scripts folder beside the binary (a checkout's), else ./scripts.
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

// Runs a command, passing its output on to stderr but for the lines that start "note: ",
// which it returns (without the prefix). Returns the command's exit status.
int run_collecting_notes(const std::string& cmd, std::vector<std::string>& notes) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  const std::string prefix = "note: ";
  std::string line;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) {
    line += buf;
    if (line.back() != '\n') continue;
    line.pop_back();
    if (line.rfind(prefix, 0) == 0) notes.push_back(line.substr(prefix.size()));
    else fprintf(stderr, "%s\n", line.c_str());
    line.clear();
  }
  if (!line.empty()) fprintf(stderr, "%s\n", line.c_str());
  return pclose(p);
}

}  // namespace

Plots draw_plots(const ReportSpec& s) {
  std::string cmd = "/usr/bin/python3";
  if (access(cmd.c_str(), X_OK) != 0) cmd = "python3";
  cmd += " '" + join_path(scripts_dir(), "plot_compare.py") + "' '" + s.out + "' 2>&1";
  Plots plots;
  const int rc = run_collecting_notes(cmd, plots.notes);
  auto& pics = plots.pics;
  // Nothing drawn for a report of a runs file whose runs' metrics.jsonl are gone (a study's):
  // the pictures kept beside that file are these runs' own.
  const bool kept = rc != 0 && !s.pictures_from.empty();
  if (rc != 0 && !kept) return plots;
  auto add = [&](const std::string& file, const std::string& caption) {
    const std::string to = join_path(s.out, file), from = join_path(s.pictures_from, file);
    if (kept && !file_exists(to) && file_exists(from)) {
      std::error_code ec;
      std::filesystem::copy_file(from, to, ec);
      if (ec) throw Error("report: cannot copy " + from + " to " + to + ": " + ec.message());
    }
    if (file_exists(to)) pics.push_back({file, caption});
  };
  add("loss.png", "val loss: difference from the reference, and absolute");
  add("loss_scale.png", "loss scale");
  for (const auto& g : s.groups) {
    add("numerics_" + g.name + ".png",
        g.name + ": numerics per layer and tensor over steps" +
            (g.name == s.reference ? std::string()
                                   : ", minus " + s.reference + "'s (the same seed)"));
    add("state_" + g.name + ".png",
        g.name +
            ": the optimizer state per layer and parameter over steps (updates lost to the "
            "master format, update/weight ratio, moments underflowed or saturated)");
    add("auto_" + g.name + ".png",
        g.name + ": formats chosen per layer and GEMM operand over steps, beside SQNR");
    add("quant_" + g.name + ".png",
        g.name +
            ": quantization error per layer and GEMM operand over steps (SQNR, zeros, "
            "saturating scale groups)");
  }
  return plots;
}

// The report's end: the modes' descriptions, the plots, where the raw data is.
std::string closing_md(const ReportSpec& spec, const Plots& plots) {
  const auto& pics = plots.pics;
  std::string md =
      "\nVal loss is measured on the same batches for every mode and seed. Peak memory is what "
      "the backend allocated (weights, master weights, gradients, Adam state, activations).\n\n";
  md += "Modes:\n\n";
  for (const auto& g : spec.groups) md += "- **" + g.name + "**: " + g.what + "\n";
  md += "\n";
  for (const auto& [file, caption] : pics) md += "![" + caption + "](" + file + ")\n\n";
  if (!plots.notes.empty()) {
    md += "Not drawn:\n\n";
    for (const auto& note : plots.notes) md += "- " + note + "\n";
    md += "\n";
  }
  if (pics.empty() && !spec.pictures_from.empty())
    md += "(No plots: the runs' metrics.jsonl are not here, nor pictures beside the runs file.)\n\n";
  else if (pics.empty())
    md +=
        "(No plots: scripts/plot_compare.py needs python3 with matplotlib, which "
        "scripts/setup.sh installs.)\n\n";
  md +=
      "Raw data: `compare.json` (the statistics) and `runs.jsonl` (every run's config and "
      "summary, one line a run after a first line with what they all share; `train_gpt report "
      "runs.jsonl` makes this report again); each run's curves are its directory's "
      "`metrics.jsonl`.\n";
  return md;
}

}  // namespace tg
