// elem_format.h: the element formats of quantized GEMM operands and of their block scales, and
// their facts as one table, one row per format (elem_format_info).
//
// Every place that needs a format's width, range or special values reads its row instead of
// switching on the format: formats.h's conversions take the mantissa width, bias, largest code,
// NaN and overflow behaviour from it; a test (tests/numerics/test_elem_format.cpp) checks that
// every row agrees with the conversions (the max is the decode of the largest code, and so on)
// and that every ElemFormat has its row. Derive a property from the row (is_low_bit from the
// bits, not `elem == E4M3 || elem == E5M2`), so that a new format cannot silently take
// another's path. The rows are constexpr and __host__ __device__, so kernels still pick their
// format at compile time (template <ElemFormat F>, dispatch_operand_format below).
// docs/architecture.md ("Where things go": a new element format) says what a new row needs.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/base/host_device.h"

namespace tg {

// BF16 is the format of an operand left unquantized; E8M0 and UE4M3 are block-scale formats
// only (scale_only: recipes scale by them, no operand is stored in them).
enum class ElemFormat { BF16, E4M3, E5M2, E2M1, E8M0, UE4M3 };
inline constexpr int kElemFormatCount = 6;  // ElemFormat's values are 0 .. kElemFormatCount - 1

// What the codes past the largest finite magnitude mean.
enum class SpecialValues {
  InfNan,   // IEEE: the all-ones exponent is inf (mantissa 0) and NaN (any other mantissa)
  NanOnly,  // no inf: the all-ones magnitude (E4M3's S.1111.111) is the one NaN
  None,     // every code is a finite number (no inf, no NaN)
};

// What encoding a magnitude beyond the largest finite gives (round to nearest; +-inf alike).
enum class Overflow {
  Inf,            // +-inf, no saturating option (bf16, as __float2bfloat16_rn)
  SaturateOrInf,  // saturating: +-max; otherwise +-inf (E5M2)
  SaturateOrNan,  // saturating: +-max; otherwise NaN (E4M3, E8M0)
  Saturate,       // always +-max (E2M1; UE4M3)
};

struct ElemFormatInfo {
  ElemFormat format;
  const char* name;     // as logs and recipe descriptions print it
  const char* aliases;  // other spellings find_elem_format accepts, space-separated
  int bits;             // storage bits of one element
  bool is_signed;       // a sign bit at bit (bits - 1)
  int exponent_bits, mantissa_bits, bias;
  uint32_t max_code;  // magnitude code of the largest finite value
  float max;          // the largest finite value
  int emax;           // exponent of the largest power of two <= max (OCP MX's emax_elem)
  float min_normal;   // the smallest normal value (E8M0: its smallest, 2^-127)
  bool subnormals;
  SpecialValues specials;
  Overflow overflow;
  bool scale_only;  // a block-scale format, never an operand's elements
};

// The table. A missing row is a compile error (-Wswitch, warnings are errors in CI); the test
// checks each row's fields against the conversions.
TG_HD constexpr ElemFormatInfo elem_format_info(ElemFormat f) {
  using E = ElemFormat;
  using S = SpecialValues;
  using O = Overflow;
  switch (f) {
    // clang-format off
    //            format   name     aliases                   bits sign  e  m  bias max_code max                  emax min_normal  subn   specials    overflow          scale_only
    case E::BF16:  return {E::BF16,  "bf16",  "bfloat16",                16, true, 8, 7, 127, 0x7f7fu, 3.3895313892515355e38f, 127, 0x1p-126f, true,  S::InfNan,  O::Inf,           false};
    case E::E4M3:  return {E::E4M3,  "E4M3",  "e4m3 e4m3fn fp8-e4m3",     8, true, 4, 3,   7, 0x7eu,   448.0f,                 8, 0x1p-6f,   true,  S::NanOnly, O::SaturateOrNan, false};
    case E::E5M2:  return {E::E5M2,  "E5M2",  "e5m2 fp8-e5m2",            8, true, 5, 2,  15, 0x7bu,   57344.0f,              15, 0x1p-14f,  true,  S::InfNan,  O::SaturateOrInf, false};
    case E::E2M1:  return {E::E2M1,  "E2M1",  "e2m1 fp4-e2m1",            4, true, 2, 1,   1, 0x7u,    6.0f,                   2, 1.0f,      true,  S::None,    O::Saturate,      false};
    case E::E8M0:  return {E::E8M0,  "E8M0",  "e8m0 ue8m0",               8, false, 8, 0, 127, 0xfeu,  0x1p127f,             127, 0x1p-127f, false, S::NanOnly, O::SaturateOrNan, true};
    case E::UE4M3: return {E::UE4M3, "UE4M3", "ue4m3",                    8, false, 4, 3,  7, 0x7eu,   448.0f,                 8, 0x1p-6f,   true,  S::NanOnly, O::Saturate,      true};
      // clang-format on
  }
  return {f, "?", "", 0, false, 0, 0, 0, 0, 0.0f, 0, 0.0f, false, S::None, O::Saturate, false};
}

// ---- what follows from a row ----

TG_HD constexpr int elem_bits(ElemFormat f) { return elem_format_info(f).bits; }
TG_HD constexpr float elem_format_max(ElemFormat f) { return elem_format_info(f).max; }
TG_HD constexpr int elem_emax(ElemFormat f) { return elem_format_info(f).emax; }
TG_HD constexpr const char* elem_format_name(ElemFormat f) { return elem_format_info(f).name; }

// Stored in 8 bits or fewer: a quantized operand's format. Wider formats (bf16) leave an
// operand as it is.
TG_HD constexpr bool is_low_bit(ElemFormat f) { return elem_bits(f) <= 8; }
// A format a GEMM operand can be quantized to (low-bit and not a scale format).
TG_HD constexpr bool is_operand_format(ElemFormat f) {
  return is_low_bit(f) && !elem_format_info(f).scale_only;
}

// All magnitude bits set: the NaN of SpecialValues::NanOnly and of InfNan (with every
// mantissa bit set).
TG_HD constexpr uint32_t elem_magnitude_mask(const ElemFormatInfo& r) {
  return (1u << (r.exponent_bits + r.mantissa_bits)) - 1u;
}
// The code of +inf (InfNan formats only).
TG_HD constexpr uint32_t elem_inf_code(const ElemFormatInfo& r) {
  return ((1u << r.exponent_bits) - 1u) << r.mantissa_bits;
}
// The magnitude code an encoder gives past the largest finite value without saturation.
TG_HD constexpr uint32_t elem_overflow_code(const ElemFormatInfo& r) {
  switch (r.overflow) {
    case Overflow::Inf:
    case Overflow::SaturateOrInf: return elem_inf_code(r);
    case Overflow::SaturateOrNan: return elem_magnitude_mask(r);
    case Overflow::Saturate: return r.max_code;
  }
  return r.max_code;
}
// The code a NaN input encodes to: the canonical positive NaN (all magnitude bits), or, in a
// format without NaN, +max (as CUDA's __nv_cvt_float_to_fp4 does).
TG_HD constexpr uint32_t elem_nan_code(const ElemFormatInfo& r) {
  return r.specials == SpecialValues::None ? r.max_code : elem_magnitude_mask(r);
}

// ---- compile-time dispatch ----

template <ElemFormat F>
using ElemFormatTag = std::integral_constant<ElemFormat, F>;

// Calls fn(ElemFormatTag<f>{}) when f is an operand format (is_operand_format) and returns
// true; false for any other format. The one runtime-to-compile-time dispatch over the formats:
// a new row is dispatched without touching the callers.
template <int I = 0, typename Fn>
bool dispatch_operand_format(ElemFormat f, Fn&& fn) {
  if constexpr (I < kElemFormatCount) {
    constexpr ElemFormat F = ElemFormat(I);
    if constexpr (is_operand_format(F)) {
      if (f == F) {
        fn(ElemFormatTag<F>{});
        return true;
      }
    }
    return dispatch_operand_format<I + 1>(f, static_cast<Fn&&>(fn));
  } else {
    return false;
  }
}

namespace detail {
inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }
// Whether the space-separated `words` hold `name`, ignoring ASCII case.
inline bool has_word(const char* words, const char* name) {
  const size_t n = std::strlen(name);
  for (const char* w = words; *w;) {
    size_t len = 0;
    while (w[len] && w[len] != ' ') len++;
    bool same = len == n;
    for (size_t i = 0; same && i < n; i++) same = ascii_lower(w[i]) == ascii_lower(name[i]);
    if (same) return true;
    w += len;
    while (*w == ' ') w++;
  }
  return false;
}
}  // namespace detail

// The format named `name` (a row's name or one of its aliases, any case); false if none.
inline bool find_elem_format(const char* name, ElemFormat* out) {
  for (int i = 0; i < kElemFormatCount; i++) {
    const ElemFormatInfo r = elem_format_info(ElemFormat(i));
    if (detail::has_word(r.name, name) || detail::has_word(r.aliases, name)) {
      *out = r.format;
      return true;
    }
  }
  return false;
}

}  // namespace tg
