// test_elem_format.cpp: the element formats' table (src/numerics/elem_format.h) against the
// conversions of src/numerics/formats.h (which tests/numerics/test_formats*.cpp check against
// CUDA's own): every ElemFormat has one row, and each row's facts (largest code and value,
// emax, smallest normal, subnormals, NaN and inf codes, overflow) are what the format's encoder
// and decoder do, code by code.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "src/numerics/formats.h"

using tg::ElemFormat;
using tg::ElemFormatInfo;
using tg::Overflow;
using tg::SpecialValues;

namespace {

// Each format's named conversions, written out here and not read from the table, so that a
// row that disagrees with them fails. A new format needs its entry (-Wswitch says so).
struct Codec {
  uint32_t (*encode)(float x, bool saturate);
  float (*decode)(uint32_t code);
};

Codec codec(ElemFormat f) {
  using E = ElemFormat;
  switch (f) {
    case E::BF16:
      return {[](float x, bool) { return uint32_t(tg::f32_to_bf16(x)); },
              [](uint32_t c) { return tg::bf16_to_f32(uint16_t(c)); }};
    case E::E4M3:
      return {[](float x, bool sat) { return uint32_t(tg::f32_to_e4m3(x, sat)); },
              [](uint32_t c) { return tg::e4m3_to_f32(uint8_t(c)); }};
    case E::E5M2:
      return {[](float x, bool sat) { return uint32_t(tg::f32_to_e5m2(x, sat)); },
              [](uint32_t c) { return tg::e5m2_to_f32(uint8_t(c)); }};
    case E::E2M1:
      return {[](float x, bool) { return uint32_t(tg::f32_to_e2m1(x)); },
              [](uint32_t c) { return tg::e2m1_to_f32(uint8_t(c)); }};
    case E::E8M0:  // nearest is not E8M0's rounding: toward zero, which keeps powers of two
      return {[](float x, bool sat) { return uint32_t(tg::f32_to_e8m0(x, false, sat)); },
              [](uint32_t c) { return tg::e8m0_to_f32(uint8_t(c)); }};
    case E::UE4M3:
      return {[](float x, bool) { return uint32_t(tg::f32_to_ue4m3(x)); },
              [](uint32_t c) { return tg::ue4m3_to_f32(uint8_t(c)); }};
  }
  FAIL("no codec for format " << int(f));
  return {};
}

uint32_t bits(float f) { return tg::f32_bits(f); }

// The codes of a format: every magnitude code, with the sign bit where the format has one.
std::vector<uint32_t> all_codes(const ElemFormatInfo& r) {
  std::vector<uint32_t> codes;
  const uint32_t sign = r.is_signed ? 1u << (r.bits - 1) : 0u;
  for (uint32_t m = 0; m <= tg::elem_magnitude_mask(r); m++) {
    codes.push_back(m);
    if (sign) codes.push_back(sign | m);
  }
  return codes;
}

}  // namespace

TEST_CASE("elem_format: every ElemFormat has exactly one row") {
  std::set<std::string> words;
  for (int i = 0; i < tg::kElemFormatCount; i++) {
    const ElemFormatInfo r = tg::elem_format_info(ElemFormat(i));
    INFO("format " << i << " " << r.name);
    CHECK(int(r.format) == i);  // the row under its own case
    CHECK(r.bits > 0);
    CHECK(r.exponent_bits + r.mantissa_bits + (r.is_signed ? 1 : 0) <= r.bits);
    CHECK(words.insert(r.name).second);  // names and aliases name one format each
    for (std::string a = r.aliases; !a.empty();) {
      const size_t sp = a.find(' ');
      const std::string w = a.substr(0, sp);
      CHECK(words.insert(w).second);
      ElemFormat found = ElemFormat::BF16;
      CHECK(tg::find_elem_format(w.c_str(), &found));
      CHECK(found == r.format);
      a = sp == std::string::npos ? "" : a.substr(sp + 1);
    }
  }
  // kElemFormatCount is ElemFormat's size: the value past it has no row.
  CHECK(tg::elem_format_info(ElemFormat(tg::kElemFormatCount)).bits == 0);
  ElemFormat f = ElemFormat::BF16;
  CHECK(tg::find_elem_format("FP8-E5M2", &f));
  CHECK(f == ElemFormat::E5M2);
  CHECK(tg::find_elem_format("bf16", &f));
  CHECK(f == ElemFormat::BF16);
  CHECK_FALSE(tg::find_elem_format("e4m", &f));
  CHECK_FALSE(tg::find_elem_format("", &f));
}

TEST_CASE("elem_format: each row's range is its conversions' (max, emax, min normal)") {
  for (int i = 0; i < tg::kElemFormatCount; i++) {
    const ElemFormatInfo r = tg::elem_format_info(ElemFormat(i));
    const Codec c = codec(r.format);
    INFO("format " << r.name);
    CHECK(c.decode(r.max_code) == r.max);
    CHECK(std::ilogb(r.max) == r.emax);
    CHECK(c.encode(r.max, true) == r.max_code);
    // The largest finite code is the one below the format's first special one.
    switch (r.specials) {
      case SpecialValues::InfNan: CHECK(r.max_code + 1 == tg::elem_inf_code(r)); break;
      case SpecialValues::NanOnly: CHECK(r.max_code + 1 == tg::elem_magnitude_mask(r)); break;
      case SpecialValues::None: CHECK(r.max_code == tg::elem_magnitude_mask(r)); break;
    }
    float smallest = INFINITY;  // the smallest positive value
    for (uint32_t m = 0; m <= r.max_code; m++) {
      const float v = c.decode(m);
      if (v > 0 && v < smallest) smallest = v;
    }
    if (r.subnormals) {
      CHECK(c.decode(1u << r.mantissa_bits) == r.min_normal);  // exponent field 1, mantissa 0
      CHECK(smallest == std::ldexp(r.min_normal, -r.mantissa_bits));
    } else {
      CHECK(smallest == r.min_normal);
    }
    CHECK(std::ilogb(r.min_normal) == (r.subnormals ? 1 : 0) - r.bias);
    CHECK(tg::elem_format_max(r.format) == r.max);
    CHECK(tg::elem_emax(r.format) == r.emax);
    CHECK(tg::elem_bits(r.format) == r.bits);
  }
  CHECK(tg::E4M3_MAX == 448.0f);
  CHECK(tg::E5M2_MAX == 57344.0f);
  CHECK(tg::E2M1_MAX == 6.0f);
}

TEST_CASE("elem_format: each row's NaN, inf and overflow are its conversions'") {
  for (int i = 0; i < tg::kElemFormatCount; i++) {
    const ElemFormatInfo r = tg::elem_format_info(ElemFormat(i));
    const Codec c = codec(r.format);
    INFO("format " << r.name);
    int nans = 0, infs = 0;
    for (uint32_t code : all_codes(r)) {
      const float v = c.decode(code);
      nans += std::isnan(v);
      infs += std::isinf(v);
      if (!std::isnan(v) && (r.is_signed || !std::signbit(v)))
        CHECK(c.encode(v, false) == code);  // every value encodes back to its code
    }
    const int signs = r.is_signed ? 2 : 1;
    switch (r.specials) {
      case SpecialValues::InfNan:
        CHECK(nans == signs * ((1 << r.mantissa_bits) - 1));
        CHECK(infs == signs);
        CHECK(c.decode(tg::elem_inf_code(r)) == INFINITY);
        break;
      case SpecialValues::NanOnly:
        CHECK(nans == signs);
        CHECK(infs == 0);
        CHECK(std::isnan(c.decode(tg::elem_magnitude_mask(r))));
        break;
      case SpecialValues::None:
        CHECK(nans == 0);
        CHECK(infs == 0);
        break;
    }
    CHECK(c.encode(NAN, false) == tg::elem_nan_code(r));
    CHECK(c.encode(NAN, true) == tg::elem_nan_code(r));
    // Past the largest finite value, and +inf.
    for (float big : {r.max * 4, float(INFINITY)}) {
      CHECK(c.encode(big, false) == tg::elem_overflow_code(r));
      CHECK(c.encode(big, true) ==
            (r.overflow == Overflow::Inf ? tg::elem_inf_code(r) : r.max_code));
    }
    switch (r.overflow) {
      case Overflow::Inf:
      case Overflow::SaturateOrInf: CHECK(c.decode(tg::elem_overflow_code(r)) == INFINITY); break;
      case Overflow::SaturateOrNan: CHECK(std::isnan(c.decode(tg::elem_overflow_code(r)))); break;
      case Overflow::Saturate: CHECK(tg::elem_overflow_code(r) == r.max_code); break;
    }
  }
}

TEST_CASE("elem_format: the generic encoder of an operand format is its named one") {
  int visited = 0;
  for (int i = 0; i < tg::kElemFormatCount; i++) {
    const ElemFormat f = ElemFormat(i);
    const bool known = tg::dispatch_operand_format(f, [&](auto format) {
      constexpr ElemFormat F = decltype(format)::value;
      const ElemFormatInfo r = tg::elem_format_info(F);
      const Codec c = codec(F);
      INFO("format " << r.name);
      visited++;
      for (uint32_t code : all_codes(r))
        CHECK(bits(tg::elem_to_f32<F>(uint8_t(code))) == bits(c.decode(code)));
      uint32_t state = 12345;
      for (int k = 0; k < 100000; k++) {
        state = state * 1664525u + 1013904223u;
        const float x = tg::bits_f32(state);
        CHECK(tg::f32_to_elem<F>(x, false, 0) == c.encode(x, true));
      }
    });
    CHECK(known == tg::is_operand_format(f));
  }
  CHECK(visited == 3);  // E4M3, E5M2, E2M1
  CHECK_FALSE(tg::is_low_bit(ElemFormat::BF16));
  CHECK(tg::is_low_bit(ElemFormat::E2M1));
  CHECK_FALSE(tg::is_operand_format(ElemFormat::E8M0));
}
