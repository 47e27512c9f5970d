// compare.h: `train_gpt compare`: the same training run in several precision modes, from the
// same seed on the same data, summarised in report.md with plots and the raw metrics.
#pragma once

#include <string>

namespace tg {

struct Config;

// The compare mode name ("fp16-noscale", ...) whose precision settings config c has; ""
// when none has them. And what a mode name means, for reports.
std::string compare_mode_of(const Config& c);
std::string compare_mode_what(const std::string& name);

int cmd_compare(int argc, char** argv);

}  // namespace tg
