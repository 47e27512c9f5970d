// config_read.cpp: a Config filled from a JSON file, a JSON object or one key=value, through
// the key table (key_table.h); a state preset applied first, so that the keys given beside it
// win.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config.h"
#include "config_keys.h"
#include "config_text.h"
#include "key_aliases.h"
#include "key_table.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/host_memory.h"
#include "src/base/suggest.h"

namespace tg {
using json = nlohmann::json;
using namespace keys;

namespace {

[[noreturn]] void bad_value(const KeyDef& k, const std::string& what, const std::string& origin) {
  std::string expect = k.kind == Kind::Choice       ? "one of " + choices_text(k)
                       : k.kind == Kind::ChoiceList ? "a list of " + choices_text(k)
                                                    : kind_name(k.kind);
  throw UsageError(strf("config key '%s'%s: %s (expected %s)", k.name,
                        origin.empty() ? "" : (" " + origin).c_str(), what.c_str(),
                        expect.c_str()));
}

int64_t json_integer(const KeyDef& k, const json& v, const std::string& origin) {
  if (!v.is_number_integer()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
  check_range(k, v.is_number_unsigned() ? double(v.get<uint64_t>()) : double(v.get<int64_t>()),
              origin);
  return v.get<int64_t>();
}

// A choice's text: a string among k.choices.
std::string json_choice(const KeyDef& k, const json& v, const std::string& origin) {
  if (!v.is_string()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
  std::string s = v.get<std::string>();
  if (std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end())
    bad_value(k, "'" + s + "' is not allowed", origin);
  return s;
}

// A list of choices' texts, each among k.choices.
std::vector<std::string> json_choice_list(const KeyDef& k, const json& v,
                                          const std::string& origin) {
  if (!v.is_array()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) bad_value(k, "a list entry is not a string", origin);
    const std::string s = e.get<std::string>();
    if (std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end())
      bad_value(k, "'" + s + "' is not allowed", origin);
    out.push_back(s);
  }
  return out;
}

void set_json(Config& c, const KeyDef& k, const json& v, const std::string& origin) {
  with_field(c, k, [&](auto& f) {
    using T = std::decay_t<decltype(f)>;
    if constexpr (std::is_same_v<T, int>) {
      f = int(json_integer(k, v, origin));
    } else if constexpr (std::is_same_v<T, int64_t>) {
      f = json_integer(k, v, origin);
    } else if constexpr (std::is_same_v<T, double>) {
      if (!v.is_number()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      const double d = v.get<double>();
      check_range(k, d, origin);
      f = d;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      f = v.get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (k.choices.empty()) {
        if (!v.is_string()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
        f = v.get<std::string>();
      } else {
        f = json_choice(k, v, origin);
      }
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      if (!v.is_array()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      std::vector<int> out;
      for (const auto& e : v) {
        if (!e.is_number_integer()) bad_value(k, "a list entry is not an integer", origin);
        out.push_back(int(json_integer(k, e, origin)));
      }
      f = out;
    } else if constexpr (std::is_same_v<T, Mode>) {
      f = parse_mode(json_choice(k, v, origin), k.name);
    } else if constexpr (std::is_same_v<T, StateFormat>) {
      f = parse_state_format(json_choice(k, v, origin), k.name);
    } else if constexpr (std::is_same_v<T, MasterFormat>) {
      f = parse_master_format(json_choice(k, v, origin), k.name);
    } else if constexpr (std::is_same_v<T, WireFormat>) {
      f = parse_wire_format(json_choice(k, v, origin), k.name);
    } else if constexpr (is_named_enum<T>) {
      parse_enum(json_choice(k, v, origin), &f);  // json_choice checked the name
    } else {
      static_assert(std::is_same_v<T, std::vector<Mode>>, "a key type set_json does not read");
      std::vector<Mode> out;
      for (const std::string& s : json_choice_list(k, v, origin))
        out.push_back(parse_mode(s, k.name));
      f = out;
    }
  });
}

bool is_section(const std::string& name) {
  for (const auto& d : table())
    if (std::string(d.name).rfind(name + ".", 0) == 0) return true;
  return false;
}

// Every section and subsection ("precision", "precision.fp8", ...), once each.
std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& k : table()) {
    const std::string name = k.name;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1))
      if (std::find(out.begin(), out.end(), name.substr(0, dot)) == out.end())
        out.push_back(name.substr(0, dot));
  }
  return out;
}

// Whether s is valid UTF-8, as every value must be to be written to config.json and
// checkpoints (JSON input always is; the command line need not be).
bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// Sets key k to v; precision.state.preset also sets every key its preset names.
void set_key(Config& c, const KeyDef& k, const json& v, const std::string& origin) {
  set_json(c, k, v, origin);
  if (std::string(k.name) != kStatePresetKey) return;
  if (const Preset* p = find_preset(PresetFamily::State, c.precision.state.preset))
    for (const auto& [key, value] : p->keys) config_set(c, key, value);
}

void apply_object(Config& c, const json& j, const std::string& prefix, const std::string& origin) {
  auto full_name = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
  // A state preset first, so that the keys given beside it win whatever their order.
  for (auto it = j.begin(); it != j.end(); ++it)
    if (full_name(it.key()) == kStatePresetKey)
      set_key(c, *find_key(kStatePresetKey), it.value(), origin);
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string name = full_name(it.key());
    if (name == kStatePresetKey) continue;
    const KeyDef* k = find_key(name);
    if (k) {
      set_key(c, *k, it.value(), origin);
    } else if (is_section(name)) {
      if (!it.value().is_object())
        throw UsageError(strf("config section '%s' %s must be a JSON object, not %s %s",
                              name.c_str(), origin.c_str(), it.value().type_name(),
                              json_for_message(it.value()).c_str()));
      apply_object(c, it.value(), name, origin);
    } else if (it.value().is_object()) {
      throw UsageError(strf("unknown config section '%s' %s%s", name.c_str(), origin.c_str(),
                            did_you_mean(name, section_names()).c_str()));
    } else {
      unknown_key(name, origin, "");
    }
  }
}


}  // namespace

[[noreturn]] void unknown_key(const std::string& name, const std::string& origin,
                              const std::string& prefix) {
  std::string hint = alias_hint(name, prefix);
  if (hint.empty()) hint = did_you_mean(name, key_names(), prefix);
  throw UsageError(
      strf("unknown config key '%s' %s%s", name.c_str(), origin.c_str(), hint.c_str()));
}

void config_apply_json(Config& cfg, const json& j, const std::string& origin) {
  if (!j.is_object())
    throw UsageError(
        strf("a config must be a JSON object (%s: %s)", origin.c_str(), j.type_name()));
  apply_object(cfg, j, "", origin);
}

void config_load_file(Config& cfg, const std::string& path) {
  std::vector<char> bytes;
  try {
    // A config is a few KiB: a larger file is a mistake, and is not read whole.
    const uint64_t size = file_size(path, "config file");
    if (size > kMaxConfigBytes)
      throw UsageError(strf("config file %s is %s; a config may be at most %s", path.c_str(),
                            fmt_bytes(double(size)).c_str(),
                            fmt_bytes(double(kMaxConfigBytes)).c_str()));
    bytes = read_file(path, "config file");
  } catch (const Error& e) {
    throw UsageError(e.what());  // a config problem: exit code 2
  }
  const std::string what = "config file " + path;
  json j;
  try {
    j = parse_config_text(std::string(bytes.begin(), bytes.end()), what);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw UsageError(strf("config file %s is not valid JSON: %s", path.c_str(), e.what()));
  }
  config_apply_json(cfg, j, "in " + what);
}

void config_set(Config& cfg, const std::string& key, const std::string& text) {
  const std::string origin = "on the command line";
  const KeyDef* k = find_key(key);
  if (!k) unknown_key(key, origin, "--");
  json v;
  switch (k->kind) {
    case Kind::Int:
    case Kind::Int64: {
      errno = 0;
      char* end = nullptr;
      long long x = strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end || errno) bad_value(*k, "'" + text + "' is not an integer", origin);
      v = int64_t(x);
      break;
    }
    case Kind::Float: {
      char* end = nullptr;
      double x = strtod(text.c_str(), &end);
      if (text.empty() || *end || !std::isfinite(x))
        bad_value(*k, "'" + text + "' is not a number", origin);
      v = x;
      break;
    }
    case Kind::Bool:
      if (text == "true" || text == "1")
        v = true;
      else if (text == "false" || text == "0")
        v = false;
      else
        bad_value(*k, "'" + text + "' is not a boolean", origin);
      break;
    case Kind::String:
    case Kind::Choice:
      if (!valid_utf8(text)) bad_value(*k, "the value is not valid UTF-8", origin);
      v = text;
      break;
    case Kind::IntList: {
      v = json::array();
      size_t pos = 0;
      while (pos < text.size()) {
        size_t next = text.find(',', pos);
        if (next == std::string::npos) next = text.size();
        std::string item = text.substr(pos, next - pos);
        char* end = nullptr;
        long long x = strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end) bad_value(*k, "'" + text + "' is not a list of integers", origin);
        v.push_back(int64_t(x));
        pos = next + 1;
      }
      break;
    }
    case Kind::ChoiceList: {
      v = json::array();
      size_t pos = 0;
      while (pos < text.size()) {
        size_t next = text.find(',', pos);
        if (next == std::string::npos) next = text.size();
        v.push_back(text.substr(pos, next - pos));
        pos = next + 1;
      }
      break;
    }
  }
  set_key(cfg, *k, v, origin);
}

}  // namespace tg
