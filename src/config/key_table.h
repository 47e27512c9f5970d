// key_table.h: the config key table's row type and its lookups, shared by the table
// (config.cpp) and the readers that fill a Config from a file or a key=value (config_read.cpp);
// inside src/config/ only.
#pragma once
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "config.h"

namespace tg::keys {

enum class Kind { Int, Int64, Float, Bool, String, Choice, IntList, ChoiceList };

// A key's field inside Config, typed: one alternative per type a key may have.
template <typename T>
using Getter = T& (*)(Config&);
using FieldRef =
    std::variant<Getter<int>, Getter<int64_t>, Getter<double>, Getter<bool>, Getter<std::string>,
                 Getter<std::vector<int>>, Getter<Mode>, Getter<std::vector<Mode>>,
                 Getter<StateFormat>, Getter<MasterFormat>, Getter<WireFormat>,
                 Getter<DeviceChoice>, Getter<CpuGemm>, Getter<CudaGemm>, Getter<OutlierHandling>,
                 Getter<LrSchedule>, Getter<LossScaling>, Getter<ScaleSource>,
                 Getter<ScaleRuleChoice>, Getter<GradFormat>, Getter<GradAccum>, Getter<WeightComm>,
                 Getter<MomentScale>, Getter<MomentExpand>, Getter<NarrowGemmRequest>,
                 Getter<AttentionRequest>>;

struct KeyDef {
  const char* name;
  Kind kind;       // follows from the field's type (key() below), never stated by hand
  FieldRef field;  // the field inside Config
  double lo, hi;   // inclusive range for numbers
  std::vector<std::string> choices;
  const char* help;
};

// The kind of a field of type T; a string with choices is a Choice (key() below). KindOf of
// any other type is left undefined, so a table row with a field of a type the table does not
// handle fails to compile.
template <typename T, typename = void>
struct KindOf;
template <Kind K>
struct KindIs {
  static constexpr Kind kind = K;
};
// Every enum: one with EnumNames (src/base/named_enum.h) or a registry's (Mode, the state
// formats): a choice among its names.
template <typename T>
struct KindOf<T, std::enable_if_t<std::is_enum_v<T>>> : KindIs<Kind::Choice> {};
template <>
struct KindOf<int> : KindIs<Kind::Int> {};
template <>
struct KindOf<int64_t> : KindIs<Kind::Int64> {};
template <>
struct KindOf<double> : KindIs<Kind::Float> {};
template <>
struct KindOf<bool> : KindIs<Kind::Bool> {};
template <>
struct KindOf<std::string> : KindIs<Kind::String> {};
template <>
struct KindOf<std::vector<int>> : KindIs<Kind::IntList> {};
template <>
struct KindOf<std::vector<Mode>> : KindIs<Kind::ChoiceList> {};
static_assert(KindOf<int64_t>::kind == Kind::Int64 && KindOf<Mode>::kind == Kind::Choice,
              "a key's kind follows from its field's type");

// One row of the table. The kind is deduced from the field's type, so a row cannot pair a
// field with the wrong kind (the old table's `void*` + Kind could, unnoticed until run time);
// and every use of a field below goes through std::visit with code per type, so a type a
// use does not handle fails to compile as well (the static_asserts in set_json).
template <typename T>
KeyDef key(const char* name, Getter<T> get, double lo, double hi, std::vector<std::string> choices,
           const char* help) {
  Kind kind = KindOf<T>::kind;
  if constexpr (is_named_enum<T>) choices = enum_choices<T>();  // the type's names, in order
  if (kind == Kind::String && !choices.empty()) kind = Kind::Choice;
  return KeyDef{name, kind, get, lo, hi, std::move(choices), help};
}

constexpr const char* kStatePresetKey = "precision.state.preset";

// Every key, in the order --help lists them.
const std::vector<KeyDef>& table();
const KeyDef* find_key(const std::string& name);

// Calls fn with a reference to k's field in c, typed.
template <typename Fn>
decltype(auto) with_field(Config& c, const KeyDef& k, Fn&& fn) {
  return std::visit([&](auto get) -> decltype(auto) { return fn(get(c)); }, k.field);
}
template <typename Fn>
decltype(auto) with_field(const Config& c, const KeyDef& k, Fn&& fn) {
  return std::visit(
      [&](auto get) -> decltype(auto) { return fn(std::as_const(get(const_cast<Config&>(c)))); },
      k.field);
}

// "integer", "number", ...: what a key of kind k takes.
const char* kind_name(Kind k);
// "a|b|c": a key's choices.
std::string choices_text(const KeyDef& k);
// The value of k's field in c as --help shows it (lists comma-separated).
std::string value_text(const Config& c, const KeyDef& k);
// UsageError naming k when v is outside its range.
void check_range(const KeyDef& k, double v, const std::string& origin);

}  // namespace tg::keys
