// Tests of the optimizer-state formats (src/numerics/state_format.h) and the Adam moments'
// encoder (src/numerics/moment_format.h): the registry, every 16-bit code's round trip, the
// conversion rule checked against every code, fp16's window, and stochastic rounding's mean.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "src/numerics/formats.h"
#include "src/numerics/state_format.h"

using tg::MomentExpand;
using tg::MomentFormat;
using tg::MomentScale;
using tg::StateFormat;

namespace {

const StateFormat kAll[] = {StateFormat::FP32, StateFormat::BF16, StateFormat::BF16SR,
                            StateFormat::FP16};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Whether a store of format f can produce `code`: finite (stores of finite moments never give
// NaN; fp16 saturates, bf16 could overflow only past 3e38) and, for fp16's sqrt(v), not
// negative (v >= +0, so sqrt(v) >= +0).
bool producible(uint16_t code, const MomentFormat& f) {
  const float y = f.dtype == tg::DType::BF16 ? tg::bf16_to_f32(code) : tg::f16_to_f32(code);
  if (!std::isfinite(y)) return false;
  return !(f.sqrt && (code & 0x8000u));
}

// The value format `to` keeps of moment value x (stored to nearest, read back).
float through(float x, const MomentFormat& to) {
  if (tg::moment_is_plain(to)) return x;
  MomentFormat nearest = to;
  nearest.stochastic = false;
  return tg::moment_decode16(tg::moment_encode16(x, nearest, 0), to);
}

}  // namespace

TEST_CASE("state formats: the registry's names, codes and storage") {
  std::set<std::string> names;
  std::set<int32_t> codes;
  for (const tg::StateFormatInfo& r : tg::state_formats()) {
    names.insert(r.name);
    codes.insert(r.file_code);
    CHECK(tg::parse_state_format(r.name, "precision.state.adam_m") == r.format);
    CHECK(tg::find_state_format_code(r.file_code)->format == r.format);
  }
  CHECK(names.size() == 6);
  CHECK(codes.size() == 6);
  // fp32 is code 0: the optimizer files of checkpoints from before the formats.
  CHECK(tg::state_format_info(StateFormat::FP32).file_code == 0);
  CHECK(tg::state_format_bytes(StateFormat::FP32) == 4);
  CHECK(tg::state_format_bytes(StateFormat::BF16SR) == 2);
  CHECK(tg::state_format_bytes(StateFormat::FP16) == 2);
  // fp8: a byte per element and an fp32 word per block (two with COAT's expansion).
  CHECK(tg::state_format_bytes(StateFormat::FP8E4M3) == 1.0 + 4.0 / 128);
  CHECK(tg::state_format_bytes(StateFormat::FP8E5M2, {32, MomentScale::E8M0, MomentExpand::Coat}) ==
        1.0 + 8.0 / 32);
  CHECK(
      tg::moment_blocking_name(StateFormat::FP8E4M3, {64, MomentScale::E8M0, MomentExpand::Coat}) ==
      "fp8-e4m3/64/e8m0+coat");
  CHECK(tg::moment_blocking_name(StateFormat::BF16, {64, MomentScale::E8M0, MomentExpand::Coat}) ==
        "bf16");
  CHECK(tg::find_state_format_code(77) == nullptr);
  CHECK_THROWS_WITH_AS(tg::parse_state_format("fp8", "precision.state.adam_v"),
                       "config key 'precision.state.adam_v': unknown state format 'fp8'",
                       tg::UsageError);
  // What each format does to a moment.
  const MomentFormat v16 = tg::moment_format(StateFormat::FP16, true),
                     m16 = tg::moment_format(StateFormat::FP16, false),
                     msr = tg::moment_format(StateFormat::BF16SR, false);
  CHECK((v16.sqrt && !m16.sqrt && v16.scale == 4096.f && m16.scale == 4096.f));
  CHECK((msr.stochastic && msr.dtype == tg::DType::BF16 && msr.scale == 1.f && !msr.sqrt));
  CHECK(tg::moment_is_plain(tg::moment_format(StateFormat::FP32, true)));
}

TEST_CASE("state formats: every code a store makes decodes exactly and encodes back to itself") {
  for (StateFormat sf : {StateFormat::BF16, StateFormat::BF16SR, StateFormat::FP16})
    for (bool second : {false, true}) {
      const MomentFormat f = tg::moment_format(sf, second);
      CAPTURE(tg::state_format_name(sf));
      CAPTURE(second);
      size_t bad = 0, inexact = 0, n = 0;
      for (uint32_t c = 0; c < 65536; c++) {
        const uint16_t code = uint16_t(c);
        if (!producible(code, f)) continue;
        n++;
        const float x = tg::moment_decode16(code, f);
        // The decoded value is the code's value exactly: (y / scale)^2 in fp64 equals it.
        const double y = f.dtype == tg::DType::BF16 ? tg::bf16_to_f32(code) : tg::f16_to_f32(code);
        const double want = f.sqrt ? (y / f.scale) * (y / f.scale) : y / f.scale;
        inexact += double(x) != want;
        // A resume re-encodes the decoded moments (to nearest): the same codes come back.
        MomentFormat nearest = f;
        nearest.stochastic = false;
        const uint16_t again = tg::moment_encode16(x, nearest, 0);
        bad += again != code;
      }
      CHECK(n > 30000);
      CHECK(inexact == 0);
      CHECK(bad == 0);
    }
}

TEST_CASE("state formats: a conversion is lossless exactly when every stored value survives it") {
  // state_format_lossless against the definition, over every code `from` can store.
  for (StateFormat from : kAll)
    for (StateFormat to : kAll)
      for (bool second : {false, true}) {
        CAPTURE(tg::state_format_name(from));
        CAPTURE(tg::state_format_name(to));
        CAPTURE(second);
        const MomentFormat a = tg::moment_format(from, second), b = tg::moment_format(to, second);
        bool keeps = true;
        if (tg::moment_is_plain(a)) {
          // fp32 values: a few that no 16-bit format holds exactly.
          for (float x : {1.0f + 1.0f / 4096, 3.0e-30f, 1.2345678e-3f})
            keeps &= same_bits(through(x, b), x);
        } else {
          for (uint32_t c = 0; c < 65536 && keeps; c++) {
            if (!producible(uint16_t(c), a)) continue;
            const float x = tg::moment_decode16(uint16_t(c), a);
            keeps &= through(x, b) == x;
          }
        }
        CHECK(tg::state_format_lossless(from, to, second) == keeps);
      }
  // The rule as docs/precision.md states it.
  CHECK(tg::state_format_lossless(StateFormat::BF16, StateFormat::FP32, false));
  CHECK(tg::state_format_lossless(StateFormat::FP16, StateFormat::FP32, true));
  CHECK(tg::state_format_lossless(StateFormat::BF16, StateFormat::BF16SR, true));
  CHECK_FALSE(tg::state_format_lossless(StateFormat::FP32, StateFormat::BF16, false));
  CHECK_FALSE(tg::state_format_lossless(StateFormat::FP16, StateFormat::BF16, false));
  CHECK_FALSE(tg::state_format_lossless(StateFormat::BF16, StateFormat::FP16, true));
  // fp8 blocks decode exactly into fp32; into anything else they are re-scaled.
  CHECK(tg::state_format_lossless(StateFormat::FP8E4M3, StateFormat::FP32, true));
  CHECK_FALSE(tg::state_format_lossless(StateFormat::FP8E4M3, StateFormat::BF16, false));
  CHECK_FALSE(tg::state_format_lossless(StateFormat::FP32, StateFormat::FP8E5M2, false));
}

TEST_CASE("state formats: fp16 moments live in [2^-36, 16), saturate above, stay finite") {
  const MomentFormat m = tg::moment_format(StateFormat::FP16, false),
                     v = tg::moment_format(StateFormat::FP16, true);
  // m = 2^-26 (fp16's smallest normal after the 2^12 scale) and 2^-36 (its smallest subnormal)
  // are held exactly; half of 2^-36 rounds to even (zero).
  CHECK(through(std::ldexp(1.f, -26), m) == std::ldexp(1.f, -26));
  CHECK(through(-std::ldexp(1.f, -36), m) == -std::ldexp(1.f, -36));
  CHECK(through(std::ldexp(1.f, -37), m) == 0.f);
  // v as sqrt(v): 1e-20 (a gradient of 1e-10 squared) survives as a subnormal of the window
  // (within 5%), where fp16 without the transforms holds 0.
  const float tiny_v = 1e-20f;
  CHECK(std::fabs(through(tiny_v, v) / tiny_v - 1) < 0.05);
  CHECK(tg::f32_to_f16(tiny_v) == 0);
  // Inside the normal range [2^-26, 16) both keep fp16's 11 bits (v's square root does).
  for (float x : {2e-8f, 3.7e-5f, 0.02f, 0.9f, 12.f}) {
    CAPTURE(x);
    CHECK(std::fabs(through(x, m) / x - 1) <= std::ldexp(1.0, -11));
    CHECK(std::fabs(through(x * x, v) / (x * x) - 1) <= 2.1 * std::ldexp(1.0, -11));
  }
  // Past the window's top: the largest code, never inf; NaN stays NaN.
  const float top = 65504.f / 4096.f;
  CHECK(through(1e6f, m) == top);
  CHECK(through(-1e30f, m) == -top);
  CHECK(through(1e9f, v) == top * top);
  CHECK(through(INFINITY, v) == top * top);
  CHECK(std::isnan(through(NAN, m)));
}

TEST_CASE("state formats: bf16-sr rounds moments without bias over many seeds") {
  const MomentFormat f = tg::moment_format(StateFormat::BF16SR, false);
  // Values between two bf16 codes: the mean of the stochastic stores over 2^16 seeds is the
  // value itself, within the sampling error (the nearest store is off by up to half a step).
  for (float x : {1.0f + 1.0f / 512, -3.3e-5f, 0.123456f, 7.77e-12f}) {
    CAPTURE(x);
    const double step = std::ldexp(1.0, std::ilogb(x) - 7);  // bf16's spacing at x
    double sum = 0;
    const int n = 1 << 16;
    for (int s = 0; s < n; s++)
      sum += tg::moment_decode16(tg::moment_encode16(x, f, tg::sr_hash(uint64_t(s), 12345)), f);
    const double mean = sum / n;
    // A Bernoulli mean of n draws: standard error <= step / (2 sqrt(n)); 5 of them.
    CHECK(std::fabs(mean - double(x)) < 5 * step / (2 * std::sqrt(double(n))));
    MomentFormat nearest = f;
    nearest.stochastic = false;
    const double rne = tg::moment_decode16(tg::moment_encode16(x, nearest, 0), f);
    CHECK(std::fabs(rne - double(x)) > 20 * step / (2 * std::sqrt(double(n))));
  }
}
