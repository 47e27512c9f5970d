// test_enum_keys.cpp: the config's enumerated keys (issue 48): a key whose value is one of a
// fixed list is an enum (src/base/named_enum.h, or a registry's: Mode, the state formats),
// parsed once where the config is read, so that code compares enums, never text; a wrong
// value, from a file or the command line, is refused naming the key and its choices (a
// UsageError: exit code 2); and every choice is written back as it was spelled (config.json
// and a checkpoint's state.json hold the names).
#include <doctest/doctest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/config/config.h"
#include "tests/test_util.h"

using namespace tg;
using json = nlohmann::json;
using tgt::usage_error;

namespace {

// Whether a key's value is one of a list (or a list of them): its type shows the choices
// (config_keys), not a kind.
bool lists_choices(const ConfigKeyInfo& k) {
  static const std::set<std::string> kinds = {"integer", "number", "boolean", "string",
                                              "integer list"};
  return !kinds.count(k.type);
}
bool is_list(const ConfigKeyInfo& k) { return k.type.rfind("list of ", 0) == 0; }
std::string choices_of(const ConfigKeyInfo& k) { return is_list(k) ? k.type.substr(8) : k.type; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t next; (next = s.find(sep, pos)) != std::string::npos; pos = next + 1)
    out.push_back(s.substr(pos, next - pos));
  out.push_back(s.substr(pos));
  return out;
}

// {"a": {"b": v}} for the key "a.b": the key as a config file holds it.
json nested(const std::string& key, json v) {
  const std::vector<std::string> parts = split(key, '.');
  for (size_t i = parts.size(); i-- > 0;) v = json{{parts[i], v}};
  return v;
}
const json& at_key(const json& j, const std::string& key) {
  const json* node = &j;
  for (const std::string& p : split(key, '.')) node = &node->at(p);
  return *node;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("config keys: every key with a fixed list of values is an enum, not a free string") {
  int choice_keys = 0;
  for (const ConfigKeyInfo& k : config_keys()) {
    if (!lists_choices(k)) {
      CHECK_FALSE(k.string_choice);
      continue;
    }
    choice_keys++;
    // A row of a registry that grows (src/config/presets.h): a string, checked against
    // the registry's names where the config is read.
    if (k.name == "precision.state.preset") {
      CHECK(k.string_choice);
      continue;
    }
    CHECK_MESSAGE(!k.string_choice, k.name << " lists choices (" << k.type
                                           << ") but is a string: make it an enum with "
                                              "EnumNames (src/base/named_enum.h)");
  }
  // The device, GEMM, attention, schedule, loss-scale, recipe and state keys, the modes.
  CHECK(choice_keys >= 22);
}

TEST_CASE("config keys: an enumerated key refuses a wrong value by its name, with its choices") {
  for (const ConfigKeyInfo& k : config_keys()) {
    if (!lists_choices(k)) continue;
    INFO(k.name);
    const std::string expected =
        (is_list(k) ? "(expected a list of " : "(expected one of ") + choices_of(k) + ")";
    Config c;
    const std::string cli = usage_error([&] { config_set(c, k.name, "no-such-value"); });
    CHECK(has(cli, "config key '" + k.name +
                       "' on the command line: 'no-such-value' is not "
                       "allowed " +
                       expected));
    const json bad = is_list(k) ? json::array({"no-such-value"}) : json("no-such-value");
    const std::string file =
        usage_error([&] { config_apply_json(c, nested(k.name, bad), "in config file c.json"); });
    CHECK(has(file, "config key '" + k.name +
                        "' in config file c.json: 'no-such-value' is not "
                        "allowed " +
                        expected));
    CHECK(config_to_json(c) == config_to_json(Config{}));  // refused: nothing changed
  }
}

TEST_CASE("config keys: every choice is written back as it was spelled") {
  for (const ConfigKeyInfo& k : config_keys()) {
    if (!lists_choices(k)) continue;
    for (const std::string& choice : split(choices_of(k), '|')) {
      INFO(k.name << "=" << choice);
      Config c;
      config_set(c, k.name, choice);
      const json written = config_to_json(c);
      CHECK(at_key(written, k.name) == (is_list(k) ? json::array({choice}) : json(choice)));
      Config back;  // what config.json and a checkpoint's state.json give back
      config_apply_json(back, written, "round trip");
      CHECK(config_to_json(back) == written);
    }
  }
}
