// cli_args.h: reading a command's own options (the ExtraOption values that config_parse_args
// returns): by name, and as numbers with an error that names the option.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tg {

using Extras = std::vector<std::pair<std::string, std::string>>;

// The value of option `name`, or `fallback` when it was not given.
std::string extra(const Extras& v, const std::string& name, const std::string& fallback = "");
// s as an integer / a number; UsageError naming --name otherwise.
int64_t to_int(const std::string& name, const std::string& s);
double to_double(const std::string& name, const std::string& s);

}  // namespace tg
