// compare.h: `train_gpt compare`: the same training run in several precision modes, from the
// same seed on the same data, summarised in report.md with plots and the raw metrics.
#pragma once

#include <string>
#include <vector>

namespace tg {

struct Config;

// The compare mode name ("fp16-noscale", ...) whose precision settings config c has; ""
// when none has them. And what a mode name means, for reports.
std::string compare_mode_of(const Config& c);
std::string compare_mode_what(const std::string& name);
// Every mode name, in --modes' order; and c changed to what mode `name` means (UsageError
// naming the modes when there is none of that name).
std::vector<std::string> compare_mode_names();
void apply_compare_mode(Config& c, const std::string& name);

int cmd_compare(int argc, char** argv);

}  // namespace tg
