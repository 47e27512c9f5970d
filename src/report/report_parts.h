// report_parts.h: what the report's files share inside src/report/ (not the report's API, which
// is report.h): the run groups' summaries, the numerics sections (report_numerics.cpp) and
// the pictures (report_pictures.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report.h"

namespace tg {

// A number formatted with fmt, or "n/a" when j is not one.
std::string num(const nlohmann::json& j, const char* fmt);
// The first run's summary that exists among runs (null when none finished).
const nlohmann::json* first_summary(const nlohmann::json& runs);

// The numerics table (stored zeros, subnormals, non-finite values), folded into one line when
// every mode reads the same, with what the constant shares are (the padded vocabulary rows);
// config: the runs' config (its model).
std::string numerics_md(const std::vector<RunGroup>& groups, const nlohmann::json& config);
// Gradient underflow against the reference, per mode (flags for compare.json, and the text).
nlohmann::json underflow_flags(const nlohmann::json& numerics, const nlohmann::json* ref_numerics);
std::string underflow_md(const std::vector<RunGroup>& groups, const std::string& reference);
// The block-scaled recipes' quantization error per GEMM operand.
std::string quant_md(const std::vector<RunGroup>& groups);
// precision.mode=auto's final formats per layer and linear.
std::string auto_md(const std::vector<RunGroup>& groups);

// The pictures of a report (file, caption) in report order, and what the plotter said it
// left out and why (its "note: " lines) (report_pictures.cpp).
struct Plots {
  std::vector<std::pair<std::string, std::string>> pics;
  std::vector<std::string> notes;
};
// Runs scripts/plot_compare.py over spec.out; returns the pictures it wrote and its notes.
Plots draw_plots(const ReportSpec& spec);
// The report's end: the modes' descriptions, the pictures, where the raw data is.
std::string closing_md(const ReportSpec& spec, const Plots& plots);

}  // namespace tg
