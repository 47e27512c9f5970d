// named_enum.h: enumerated config values as types. An enum opts in by naming its values:
//   template <> struct EnumNames<CpuGemm> { static constexpr std::array names{"auto", ...}; };
// in the enum's order (its values 0 .. N-1). That gives it its text both ways (enum_name,
// parse_enum) and its choices; the config's key table reads a field of such a type as a
// choice key (src/config/config.cpp), so a value is parsed once, at the config edge, a wrong
// one refused there with the choices, and code compares enums, never strings.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tg {

template <typename E>
struct EnumNames;  // static constexpr std::array<const char*, N> names

template <typename E, typename = void>
struct IsNamedEnum : std::false_type {};
template <typename E>
struct IsNamedEnum<E, std::void_t<decltype(EnumNames<E>::names)>> : std::true_type {};
template <typename E>
inline constexpr bool is_named_enum = IsNamedEnum<E>::value;

template <typename E>
const char* enum_name(E e) {
  static_assert(is_named_enum<E>, "an enum without EnumNames");
  const size_t i = static_cast<size_t>(e);
  return i < EnumNames<E>::names.size() ? EnumNames<E>::names[i] : "?";
}

// The value named s; false (out untouched) when no value has that name.
template <typename E>
bool parse_enum(std::string_view s, E* out) {
  static_assert(is_named_enum<E>, "an enum without EnumNames");
  for (size_t i = 0; i < EnumNames<E>::names.size(); i++)
    if (s == EnumNames<E>::names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}

template <typename E>
std::vector<std::string> enum_choices() {
  static_assert(is_named_enum<E>, "an enum without EnumNames");
  return {EnumNames<E>::names.begin(), EnumNames<E>::names.end()};
}

}  // namespace tg
