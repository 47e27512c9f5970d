// config_cli.cpp: a command line into a Config and the command's own options: cxxopts over
// the key table's keys (config_keys(), in table order, so command-line values win over the
// file's), the --help text, and errors that name an unknown option with the closest names.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>

#include "config.h"
#include "config_keys.h"
#include "key_aliases.h"
#include "src/base/common.h"
#include "src/base/suggest.h"

namespace tg {

ExtraOption int_option(const std::string& name, const std::string& help,
                       const std::string& default_value, double lo, double hi) {
  ExtraOption o{name, help, default_value};
  o.kind = ExtraOption::Kind::Int;
  o.lo = lo;
  o.hi = hi;
  return o;
}

ExtraOption number_option(const std::string& name, const std::string& help,
                          const std::string& default_value, double lo, double hi) {
  ExtraOption o = int_option(name, help, default_value, lo, hi);
  o.kind = ExtraOption::Kind::Number;
  return o;
}

namespace {
// A subcommand's numeric option, checked as config keys are (exit code 2, naming it).
void check_option_value(const ExtraOption& e, const std::string& text) {
  if (e.kind == ExtraOption::Kind::Text) return;
  errno = 0;
  char* end = nullptr;
  double v;
  if (e.kind == ExtraOption::Kind::Int) {
    const long long x = strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end || errno)
      throw UsageError(strf("option --%s: '%s' is not an integer", e.name.c_str(), text.c_str()));
    v = double(x);
  } else {
    v = strtod(text.c_str(), &end);
    if (text.empty() || *end || !std::isfinite(v))
      throw UsageError(
          strf("option --%s: '%s' is not a finite number", e.name.c_str(), text.c_str()));
  }
  if (!(v >= e.lo && v <= e.hi))
    throw UsageError(
        strf("option --%s: %s is out of range [%g, %g]", e.name.c_str(), text.c_str(), e.lo, e.hi));
}

// cxxopts matches every argument with std::regex, whose recursion overflows the stack on an
// argument of some 20000 characters; no path or key needs more than this.
constexpr size_t kMaxArgLength = 4096;

void check_arg_lengths(int argc, char** argv) {
  for (int i = 0; i < argc; i++) {
    const size_t n = strlen(argv[i]);
    if (n > kMaxArgLength)
      throw UsageError(
          strf("command-line argument %d is %zu characters long, more than the %zu allowed "
               "(put long values in the --config file)",
               i, n, kMaxArgLength));
  }
}
// The first option on the command line that is neither a config key (with_keys) nor one of
// the subcommand's: an error naming it, with the closest names. Returns when every option is
// known.
void unknown_option(bool with_keys, int argc, char** argv, const std::string& program,
                    const std::vector<ExtraOption>& extra) {
  std::vector<std::string> options = {"help"}, takes_value;
  if (with_keys) options.push_back("config"), takes_value.push_back("config");
  for (const auto& e : extra) {
    options.push_back(e.name);
    if (!e.is_flag) takes_value.push_back(e.name);
  }
  const std::vector<std::string> keys = with_keys ? key_names() : std::vector<std::string>{};
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // the rest is positional
    if (arg.size() < 2 || arg[0] != '-' || arg == "-h") continue;
    const std::string name =
        arg.substr(arg[1] == '-' ? 2 : 1, arg.find('=') - (arg[1] == '-' ? 2 : 1));
    const bool is_key = std::find(keys.begin(), keys.end(), name) != keys.end();
    if (is_key || std::find(options.begin(), options.end(), name) != options.end()) {
      // "--config FILE": FILE is the option's value, not an option.
      const bool value_next =
          arg.find('=') == std::string::npos &&
          (is_key || std::find(takes_value.begin(), takes_value.end(), name) != takes_value.end());
      if (value_next) i++;
      continue;
    }
    if (with_keys && name.find('.') != std::string::npos)
      unknown_key(name, "on the command line", "--");
    std::vector<std::string> known = options;
    known.insert(known.end(), keys.begin(), keys.end());
    std::string hint = with_keys ? alias_hint(name, "--") : "";
    if (hint.empty()) hint = did_you_mean(name, known, "--");
    throw UsageError(strf("unknown option '%s' of %s%s", arg.substr(0, arg.find('=')).c_str(),
                          program.c_str(), hint.c_str()));
  }
}
}  // namespace

bool config_parse_args(Config* cfg, int argc, char** argv, const std::string& program,
                       const std::vector<ExtraOption>& extra,
                       std::vector<std::pair<std::string, std::string>>* extra_values,
                       bool* config_file_given) {
  cxxopts::Options opts(program, "");
  opts.custom_help(cfg ? "[--config FILE] [--section.key=value ...]" : "[options]");
  opts.add_options()("h,help", "print this help");
  if (cfg)
    opts.add_options()("config", "JSON config file (keys below; command line wins)",
                       cxxopts::value<std::string>());
  for (const auto& e : extra) {
    if (e.is_flag)
      opts.add_options()(e.name, e.help);
    else if (e.default_value.empty())
      opts.add_options()(e.name, e.help, cxxopts::value<std::string>());
    else
      opts.add_options()(e.name, e.help,
                         cxxopts::value<std::string>()->default_value(e.default_value));
  }
  if (cfg)
    for (const auto& k : config_keys())
      opts.add_options("config keys")(
          k.name, k.help + " [" + k.type + "]",
          cxxopts::value<std::string>()->default_value(k.default_value));
  check_arg_lengths(argc, argv);
  cxxopts::ParseResult r;
  try {
    r = opts.parse(argc, argv);
  } catch (const cxxopts::exceptions::no_such_option& e) {
    unknown_option(cfg != nullptr, argc, argv, program, extra);
    throw UsageError(e.what());  // not found again: cxxopts' own words
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (!r.unmatched().empty())
    throw UsageError(strf("unexpected argument '%s'", r.unmatched()[0].c_str()));
  if (r.count("help")) {
    printf("%s\n", opts.help({"", "config keys"}).c_str());
    return false;
  }
  if (cfg) {
    if (config_file_given) *config_file_given = r.count("config") > 0;
    if (r.count("config")) config_load_file(*cfg, r["config"].as<std::string>());
    // Command-line values are applied in table order after the file, so they win.
    for (const auto& k : config_keys())
      if (r.count(k.name)) config_set(*cfg, k.name, r[k.name].as<std::string>());
  }
  if (extra_values) {
    for (const auto& e : extra) {
      if (e.is_flag) {
        if (r.count(e.name)) extra_values->push_back({e.name, "true"});
      } else if (r.count(e.name) || !e.default_value.empty()) {
        check_option_value(e, r[e.name].as<std::string>());
        extra_values->push_back({e.name, r[e.name].as<std::string>()});
      }
    }
  }
  return true;
}

}  // namespace tg
