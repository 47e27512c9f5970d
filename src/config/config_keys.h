// config_keys.h: what the key table (config.cpp) lends the command-line reader
// (config_cli.cpp) and the checks across keys (config_validate.cpp), inside src/config/ only.
#pragma once
#include <string>
#include <vector>

namespace tg {

struct Config;

// Every config key's name, in table order.
std::vector<std::string> key_names();
// UsageError "unknown config key 'NAME' ORIGIN (did you mean 'KEY'?)": the key's closest names
// (an alias's key first); prefix is what the names are written with ("--" on a command line).
[[noreturn]] void unknown_key(const std::string& name, const std::string& origin,
                              const std::string& prefix);
// UsageError naming the first numeric key of c outside its range.
void check_key_ranges(const Config& c);

}  // namespace tg
