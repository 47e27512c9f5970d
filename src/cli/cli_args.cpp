// cli_args.cpp: cli_args.h's readers.
#include "cli_args.h"

#include <cstdlib>

#include "src/base/common.h"

namespace tg {

std::string extra(const Extras& v, const std::string& name, const std::string& fallback) {
  for (const auto& kv : v)
    if (kv.first == name) return kv.second;
  return fallback;
}

int64_t to_int(const std::string& name, const std::string& s) {
  char* end = nullptr;
  long long x = strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end)
    throw UsageError(strf("option --%s: '%s' is not an integer", name.c_str(), s.c_str()));
  return x;
}

double to_double(const std::string& name, const std::string& s) {
  char* end = nullptr;
  double x = strtod(s.c_str(), &end);
  if (s.empty() || *end)
    throw UsageError(strf("option --%s: '%s' is not a number", name.c_str(), s.c_str()));
  return x;
}

}  // namespace tg
