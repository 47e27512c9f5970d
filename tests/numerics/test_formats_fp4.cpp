// test_formats_fp4.cpp: FP4 E2M1, the E8M0 and UE4M3 block scales, and stochastic rounding
// into E2M1/E4M3/E5M2 (src/numerics/formats.h).
//
// Two oracles, as in test_formats.cpp. The slow reference here is written from the format
// definitions alone: E2M1 and UE4M3 encode by searching the table of representable values for
// the nearest (ties to the even code), E8M0 through frexp in double. The bit-exact oracle is
// CUDA 13's host code (cuda_fp4.h, cuda_fp8.h) when its headers are on the include path:
// every code, every edge class, all bf16-grid inputs and ten million random ones each.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/numerics/formats.h"

#if !defined(TG_TEST_NO_CUDA_ORACLE) && __has_include(<cuda_fp4.h>) && __has_include(<cuda_fp8.h>)
#define TG_FP4_CUDA_ORACLE 1
#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#else
#define TG_FP4_CUDA_ORACLE 0
#endif

namespace {

uint32_t bits(float f) { return tg::f32_bits(f); }
float from_bits(uint32_t u) { return tg::bits_f32(u); }
const float kInf = std::numeric_limits<float>::infinity();

// Counts mismatches, reports the first few.
struct Mism {
  std::string what;
  long count = 0, checked = 0;
  void expect(float x, uint32_t got, uint32_t want) {
    checked++;
    if (got == want) return;
    if (count++ < 5)
      FAIL_CHECK(what << ": input " << std::hexfloat << x << " (0x" << std::hex << bits(x)
                      << ") got 0x" << got << " want 0x" << want << std::dec);
  }
  ~Mism() {
    CHECK_MESSAGE(count == 0, what << ": " << count << " mismatches");
    MESSAGE(what << ": " << checked << " inputs");
  }
};

// ---- slow reference ----

// Nearest entry of the ascending table `v` to a >= 0, ties to the even index; saturates.
uint32_t nearest_index(const std::vector<double>& v, double a) {
  if (a >= v.back()) return uint32_t(v.size() - 1);
  uint32_t i = 0;
  while (v[i + 1] <= a) i++;
  if (v[i] == a) return i;
  const double mid = (v[i] + v[i + 1]) / 2;
  if (a != mid) return a < mid ? i : i + 1;
  return i % 2 == 0 ? i : i + 1;
}

const std::vector<double>& e2m1_values() {
  static const std::vector<double> v = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return v;
}
uint8_t ref_e2m1(float x) {
  if (std::isnan(x)) return 0x7;
  const uint8_t s = std::signbit(x) ? 0x8 : 0;
  return uint8_t(s | nearest_index(e2m1_values(), std::fabs(double(x))));
}
double ref_e2m1_decode(uint8_t c) { return (c & 8 ? -1 : 1) * e2m1_values()[c & 7]; }

const std::vector<double>& ue4m3_values() {
  static const std::vector<double> v = [] {
    std::vector<double> t;
    for (int c = 0; c < 0x7f; c++) {
      const int e = c >> 3, m = c & 7;
      t.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
    }
    return t;
  }();
  return v;
}
uint8_t ref_ue4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  if (std::signbit(x)) return 0;
  return uint8_t(nearest_index(ue4m3_values(), double(x)));
}

// E8M0 from log2 in double: floor (toward zero) or ceil (up), clipped to [2^-127, 2^127].
uint8_t ref_e8m0(float x, bool up, bool sat) {
  if (std::isnan(x)) return 0xff;
  const double a = std::fabs(double(x));
  if (std::isinf(a)) return sat ? 0xfe : 0xff;
  if (a == 0) return 0;
  int e;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  int k = up ? (m == 0.5 ? e - 1 : e) : e - 1;
  if (k < -127) k = -127;
  if (k > 127) return sat ? 0xfe : 0xff;
  return uint8_t(k + 127);
}

// The two neighbours (in code order, same sign) of x in E2M1 / E4M3 / E5M2: the code that
// truncation gives and the next one up in magnitude (saturating).
struct SrFmt {
  const char* name;
  uint8_t (*sr)(float, uint32_t);
  uint32_t (*trunc)(float);  // round toward zero, saturating
  double (*decode)(uint32_t);
  uint32_t max_mag, sign;
};

std::vector<double> fp8_table(int M, int bias, uint32_t max_mag) {
  std::vector<double> t;
  for (uint32_t c = 0; c <= max_mag; c++) {
    const int e = int(c >> M), m = int(c & ((1u << M) - 1));
    t.push_back(e == 0 ? std::ldexp(m, 1 - bias - M) : std::ldexp((1 << M) + m, e - bias - M));
  }
  return t;
}
uint32_t trunc_index(const std::vector<double>& v, double a) {
  uint32_t i = 0;
  while (i + 1 < v.size() && v[i + 1] <= a) i++;
  return i;
}
const std::vector<double>& e4m3_table() {
  static const auto t = fp8_table(3, 7, 0x7e);
  return t;
}
const std::vector<double>& e5m2_table() {
  static const auto t = fp8_table(2, 15, 0x7b);
  return t;
}
const SrFmt kSrFmts[] = {
    {"e2m1", tg::f32_to_e2m1_sr,
     [](float x) {
       return uint32_t((std::signbit(x) ? 8 : 0) | trunc_index(e2m1_values(), std::fabs(x)));
     },
     [](uint32_t c) { return ref_e2m1_decode(uint8_t(c)); }, 7, 8},
    {"e4m3", tg::f32_to_e4m3_sr,
     [](float x) {
       return uint32_t((std::signbit(x) ? 0x80 : 0) | trunc_index(e4m3_table(), std::fabs(x)));
     },
     [](uint32_t c) { return (c & 0x80 ? -1 : 1) * e4m3_table()[c & 0x7f]; }, 0x7e, 0x80},
    {"e5m2", tg::f32_to_e5m2_sr,
     [](float x) {
       return uint32_t((std::signbit(x) ? 0x80 : 0) | trunc_index(e5m2_table(), std::fabs(x)));
     },
     [](uint32_t c) { return (c & 0x80 ? -1 : 1) * e5m2_table()[c & 0x7f]; }, 0x7b, 0x80},
};

// Inputs every encoder sees: edge classes, every bf16 value with a few low halves (so every
// exponent, every tie and every saturation boundary of these formats is hit), ten million
// random bit patterns, and ten million random values in [2^-12, 2^10] (where E2M1 and UE4M3
// actually round).
template <typename F>
void for_each_input(F&& f) {
  const float edges[] = {0.f,
                         -0.f,
                         kInf,
                         -kInf,
                         std::nanf(""),
                         -std::nanf(""),
                         from_bits(0x7f800001u),
                         from_bits(0x00000001u),
                         from_bits(0x80000001u),
                         from_bits(0x00400000u),
                         from_bits(0x00400001u),
                         from_bits(0x003fffffu),
                         from_bits(0x007fffffu),
                         from_bits(0x7f7fffffu),
                         from_bits(0x7f000000u),
                         from_bits(0x7f000001u),
                         0.25f,
                         0.75f,
                         1.25f,
                         1.75f,
                         2.5f,
                         3.5f,
                         5.f,
                         6.f,
                         7.f,
                         -5.f,
                         -0.25f,
                         448.f,
                         464.f,
                         480.f,
                         1e-30f,
                         1e30f};
  for (float x : edges) f(x);
  for (uint32_t hi = 0; hi < 0x10000u; hi++)
    for (uint32_t lo : {0x0u, 0x1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      f(from_bits(hi << 16 | lo));
  std::mt19937_64 rng(20261201);
  for (int i = 0; i < 10000000; i++) f(from_bits(uint32_t(rng())));
  std::uniform_real_distribution<double> lg(-12, 10);
  for (int i = 0; i < 10000000; i++) {
    const float x = float(std::exp2(lg(rng)));
    f(rng() & 1 ? -x : x);
  }
}

}  // namespace

TEST_CASE("formats fp4: E2M1, E8M0 and UE4M3 decode every code by the definitions") {
  for (uint32_t c = 0; c < 16; c++)
    CHECK(double(tg::e2m1_to_f32(uint8_t(c))) == ref_e2m1_decode(uint8_t(c)));
  CHECK(std::signbit(tg::e2m1_to_f32(0x8)));
  for (uint32_t c = 0; c < 255; c++)
    CHECK(double(tg::e8m0_to_f32(uint8_t(c))) == std::ldexp(1.0, int(c) - 127));
  CHECK(std::isnan(tg::e8m0_to_f32(0xff)));
  for (uint32_t c = 0; c < 0x7f; c++)
    CHECK(double(tg::ue4m3_to_f32(uint8_t(c))) == ue4m3_values()[c]);
  CHECK(std::isnan(tg::ue4m3_to_f32(0x7f)));
  // Round trips.
  for (uint32_t c = 0; c < 16; c++) CHECK(tg::f32_to_e2m1(tg::e2m1_to_f32(uint8_t(c))) == c);
  for (uint32_t c = 0; c < 256; c++) {
    CHECK(tg::f32_to_e8m0(tg::e8m0_to_f32(uint8_t(c)), false, false) == c);
    CHECK(tg::f32_to_e8m0(tg::e8m0_to_f32(uint8_t(c)), true, false) == c);
  }
  for (uint32_t c = 0; c < 128; c++) CHECK(tg::f32_to_ue4m3(tg::ue4m3_to_f32(uint8_t(c))) == c);
}

TEST_CASE("formats fp4: edge classes") {
  using tg::f32_to_e2m1;
  CHECK(f32_to_e2m1(0.f) == 0x0);
  CHECK(f32_to_e2m1(-0.f) == 0x8);
  CHECK(f32_to_e2m1(0.25f) == 0x0);   // tie to even: 0
  CHECK(f32_to_e2m1(-0.25f) == 0x8);  // underflow keeps the sign
  CHECK(f32_to_e2m1(0.2500001f) == 0x1);
  CHECK(f32_to_e2m1(0.75f) == 0x2);  // tie between 0.5 and 1: even code (1.0)
  CHECK(f32_to_e2m1(1.25f) == 0x2);  // 1.0
  CHECK(f32_to_e2m1(1.75f) == 0x4);  // 2.0
  CHECK(f32_to_e2m1(2.5f) == 0x4);   // 2.0
  CHECK(f32_to_e2m1(3.5f) == 0x6);   // 4.0
  CHECK(f32_to_e2m1(5.f) == 0x6);    // 4.0
  CHECK(f32_to_e2m1(5.0001f) == 0x7);
  CHECK(f32_to_e2m1(1e30f) == 0x7);  // saturation
  CHECK(f32_to_e2m1(kInf) == 0x7);
  CHECK(f32_to_e2m1(-kInf) == 0xf);
  CHECK(f32_to_e2m1(std::nanf("")) == 0x7);  // no NaN in E2M1: +max, as CUDA
  CHECK(f32_to_e2m1(-std::nanf("")) == 0x7);
  CHECK(f32_to_e2m1(from_bits(1)) == 0x0);  // fp32 subnormal
  using tg::f32_to_e8m0;
  CHECK(f32_to_e8m0(1.f, false, true) == 127);
  CHECK(f32_to_e8m0(1.5f, false, true) == 127);
  CHECK(f32_to_e8m0(1.5f, true, true) == 128);
  CHECK(f32_to_e8m0(-3.f, true, true) == 129);  // the sign is ignored
  CHECK(f32_to_e8m0(0.f, true, true) == 0);
  CHECK(f32_to_e8m0(from_bits(1), true, true) == 0);  // clipped to 2^-127
  CHECK(f32_to_e8m0(from_bits(0x00400001u), true, true) == 1);
  CHECK(f32_to_e8m0(kInf, false, true) == 0xfe);
  CHECK(f32_to_e8m0(kInf, false, false) == 0xff);
  CHECK(f32_to_e8m0(from_bits(0x7f000001u), true, true) == 0xfe);
  CHECK(f32_to_e8m0(from_bits(0x7f000001u), true, false) == 0xff);
  CHECK(f32_to_e8m0(std::nanf(""), false, true) == 0xff);
  using tg::f32_to_ue4m3;
  CHECK(f32_to_ue4m3(448.f) == 0x7e);
  CHECK(f32_to_ue4m3(1e9f) == 0x7e);
  CHECK(f32_to_ue4m3(kInf) == 0x7e);
  CHECK(f32_to_ue4m3(-1.f) == 0x00);
  CHECK(f32_to_ue4m3(-0.f) == 0x00);
  CHECK(f32_to_ue4m3(std::ldexp(1.f, -10)) == 0x00);  // half the smallest subnormal: tie to 0
  CHECK(f32_to_ue4m3(std::ldexp(3.f, -10)) == 0x02);  // 1.5 x 2^-9: tie to even (2 x 2^-9)
  CHECK(f32_to_ue4m3(std::nanf("")) == 0x7f);
}

TEST_CASE("formats fp4: E2M1, E8M0, UE4M3 against the slow reference") {
  Mism e2m1{"e2m1 vs reference"}, up{"e8m0 up vs reference"}, zero{"e8m0 zero vs reference"},
      nosat{"e8m0 up nosat vs reference"}, ue{"ue4m3 vs reference"};
  long n = 0;
  for_each_input([&](float x) {
    e2m1.expect(x, tg::f32_to_e2m1(x), ref_e2m1(x));
    if (n++ % 8 == 0) {  // the linear-search reference is slow: every 8th input
      ue.expect(x, tg::f32_to_ue4m3(x), ref_ue4m3(x));
    }
    up.expect(x, tg::f32_to_e8m0(x, true, true), ref_e8m0(x, true, true));
    zero.expect(x, tg::f32_to_e8m0(x, false, true), ref_e8m0(x, false, true));
    nosat.expect(x, tg::f32_to_e8m0(x, true, false), ref_e8m0(x, true, false));
  });
}

#if TG_FP4_CUDA_ORACLE
TEST_CASE("formats fp4: bit-exact against the CUDA toolkit's host conversions") {
  {
    Mism dec{"e2m1 decode vs __nv_cvt_fp4_to_halfraw"};
    for (uint32_t c = 0; c < 16; c++) {
      const float want =
          __half2float(__half(__nv_cvt_fp4_to_halfraw(__nv_fp4_storage_t(c), __NV_E2M1)));
      dec.expect(float(c), bits(tg::e2m1_to_f32(uint8_t(c))), bits(want));
    }
    Mism e8{"e8m0 decode vs __nv_cvt_e8m0_to_bf16raw"};
    for (uint32_t c = 0; c < 256; c++) {
      const uint32_t want = uint32_t(__nv_cvt_e8m0_to_bf16raw(__nv_fp8_storage_t(c)).x) << 16;
      const float got = tg::e8m0_to_f32(uint8_t(c));
      // NaN: both NaN (payloads differ: bf16 widening vs the fp32 canonical NaN).
      if (c == 0xff)
        CHECK((std::isnan(got) && std::isnan(from_bits(want))));
      else
        e8.expect(float(c), bits(got), want);
    }
  }
  Mism fp4{"e2m1 vs __nv_cvt_float_to_fp4 RN"}, fp4z{"e2m1 SR(bits 0) vs __nv_cvt_float_to_fp4 RZ"},
      e8u{"e8m0 up vs __nv_cvt_float_to_e8m0 RP sat"},
      e8z{"e8m0 zero vs __nv_cvt_float_to_e8m0 RZ sat"}, e8un{"e8m0 up vs RP nosat"},
      e8zn{"e8m0 zero vs RZ nosat"}, ue{"ue4m3 vs __nv_cvt_float_to_fp8 E4M3 satfinite (x >= +0)"};
  for_each_input([&](float x) {
    fp4.expect(x, tg::f32_to_e2m1(x), __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest));
    // Truncation saturates at +-6 like RN; CUDA's RZ maps NaN to +6 as well.
    fp4z.expect(x, tg::f32_to_e2m1_sr(x, 0), __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundZero));
    e8u.expect(x, tg::f32_to_e8m0(x, true, true),
               __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf));
    e8z.expect(x, tg::f32_to_e8m0(x, false, true),
               __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero));
    e8un.expect(x, tg::f32_to_e8m0(x, true, false),
                __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf));
    e8zn.expect(x, tg::f32_to_e8m0(x, false, false),
                __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero));
    if (!std::signbit(x) || std::isnan(x))
      ue.expect(x, tg::f32_to_ue4m3(x),
                std::isnan(x) ? 0x7fu : __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
  });
}
#else
TEST_CASE("formats fp4: bit-exact against the CUDA toolkit's host conversions") {
  MESSAGE(
      "skipped: cuda_fp4.h / cuda_fp8.h not on the include path (the slow reference still ran)");
}
#endif

TEST_CASE("formats fp4: stochastic rounding picks one of the two neighbours") {
  std::mt19937_64 rng(7);
  for (const SrFmt& f : kSrFmts) {
    Mism m{std::string(f.name) + " SR outside {trunc, trunc+1}"};
    Mism z{std::string(f.name) + " SR with zero bits truncates"};
    std::uniform_real_distribution<double> lg(f.max_mag == 7 ? -4 : -20, f.max_mag == 7 ? 3 : 17);
    for (int i = 0; i < 1000000; i++) {
      float x = float(std::exp2(lg(rng)));
      if (rng() & 1) x = -x;
      const uint32_t t = f.trunc(x), mag = t & ~f.sign;
      const uint32_t up = mag == f.max_mag ? t : t + 1;
      const uint32_t got = f.sr(x, uint32_t(rng()));
      m.expect(x, got == t || got == up ? 0u : 1u, 0u);
      z.expect(x, f.sr(x, 0), t);
      // All ones rounds up unless x is representable.
      if (double(std::fabs(x)) != std::fabs(f.decode(t))) CHECK(f.sr(x, 0xffffffffu) == up);
    }
    CHECK(f.sr(kInf, 12345) == f.max_mag);  // saturating
    CHECK(f.sr(-kInf, 12345) == (f.max_mag | f.sign));
  }
}

TEST_CASE("formats fp4: stochastic rounding is unbiased") {
  // E[decode(sr(x))] = x for x inside the range, within 4 standard errors.
  for (const SrFmt& f : kSrFmts)
    for (float x : {0.3f, 0.7f, 1.1f, 2.9f, -4.6f, 5.9f, 0.01f}) {
      const int n = 200000;
      double sum = 0, sum2 = 0;
      for (int i = 0; i < n; i++) {
        const double v = f.decode(f.sr(x, tg::sr_hash(99, uint64_t(i))));
        sum += v;
        sum2 += v * v;
      }
      const double mean = sum / n, var = sum2 / n - mean * mean;
      INFO(f.name << " x=" << x << " mean=" << mean);
      CHECK(std::fabs(mean - x) <= 4 * std::sqrt(var / n) + 1e-12);
    }
}
