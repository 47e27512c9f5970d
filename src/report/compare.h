// compare.h: `train_gpt compare`: the same training run in several precision modes, from the
// same seed on the same data, summarised in report.md with plots and the raw metrics.
#pragma once

#include <string>
#include <vector>

#include "src/config/config.h"

namespace tg {

// The compare mode name ("fp16-noscale", ...) whose precision settings config c has; ""
// when none has them. And what a mode name means, for reports.
std::string compare_mode_of(const Config& c);
std::string compare_mode_what(const std::string& name);
// Every mode name, in --modes' order; and c changed to what mode `name` means (UsageError
// naming the modes when there is none of that name).
std::vector<std::string> compare_mode_names();
void apply_compare_mode(Config& c, const std::string& name);

// What `train_gpt compare` was asked for (src/cli/compare_command.cpp reads it from the
// command line).
struct CompareRequest {
  Config base;
  std::vector<std::string> modes;   // compare_mode_names()
  std::vector<std::string> states;  // state presets; empty: the config's precision.state.*
  std::string out;
  int nseeds = 3;
  double quality = 0.02, quality_loss = 0;
};
// Every mode x state x seed run (the states a mode cannot keep skipped, said; finished runs
// reused, interrupted ones resumed), then report.md and its pictures in r.out (rank 0).
void run_compare(const CompareRequest& r);

// For the command line: the names --modes and --states take, the default --modes, and
// UsageError naming the choices for a name that is none of them.
std::string compare_mode_names_text();
std::string compare_state_names_text();
std::string compare_default_modes();
void check_compare_mode(const std::string& name);
void check_compare_state(const std::string& name);

}  // namespace tg
