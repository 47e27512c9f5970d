// config_text.cpp: a config's text checked in one pass, then parsed (see config_text.h).
#include "config_text.h"

#include <set>
#include <utility>
#include <vector>

#include "src/base/common.h"

namespace tg {
using json = nlohmann::json;

namespace {

// The SAX events of the text: depth and duplicate keys checked as they come, values ignored.
class ConfigTextCheck : public json::json_sax_t {
 public:
  explicit ConfigTextCheck(std::string what) : what_(std::move(what)) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    last_key_ = k;
    if (!open_.back().keys.insert(k).second) {
      std::string full;
      for (size_t i = 1; i < open_.size(); i++) full += open_[i].name + ".";
      throw UsageError(strf("%s: key '%s' appears twice", what_.c_str(), (full + k).c_str()));
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw e;  // json::exception: the caller says the text is not valid JSON
  }

 private:
  struct Open {
    std::string name;  // the key it was opened under ("" in an array or at the top)
    std::set<std::string> keys;
  };
  bool open() {
    if (open_.size() >= size_t(kMaxConfigDepth))
      throw UsageError(
          strf("%s nests objects and arrays more than %d levels deep (a config "
               "needs 3: sections, keys, lists)",
               what_.c_str(), kMaxConfigDepth));
    open_.push_back({last_key_, {}});
    last_key_.clear();  // an array's elements have no key
    return true;
  }
  bool close() {
    open_.pop_back();
    last_key_.clear();
    return true;
  }

  std::string what_;
  std::vector<Open> open_;
  std::string last_key_;
};

}  // namespace

json parse_config_text(const std::string& text, const std::string& what) {
  ConfigTextCheck check(what);
  json::sax_parse(text, &check, json::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/true);
  return json::parse(text, nullptr, true, /*ignore_comments=*/true);
}

bool json_deeper_than(const json& v, int depth) {
  std::vector<std::pair<const json*, int>> todo = {{&v, v.is_structured() ? 1 : 0}};
  while (!todo.empty()) {
    const auto [x, d] = todo.back();
    todo.pop_back();
    if (d > depth) return true;
    if (!x->is_structured()) continue;
    for (const json& child : *x)
      if (child.is_structured()) todo.push_back({&child, d + 1});
  }
  return false;
}

std::string json_for_message(const json& v) {
  if (json_deeper_than(v, kMaxConfigDepth))
    return strf("(objects and arrays nested more than %d levels deep)", kMaxConfigDepth);
  return v.dump();
}

}  // namespace tg
