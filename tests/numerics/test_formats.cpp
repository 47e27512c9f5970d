// test_formats.cpp: the number-format conversions of src/numerics/formats.h.
//
// Two oracles. The slow reference below is written from the format definitions alone (decode
// by fields and ldexp; encode by searching the sorted table of representable values for the
// nearest one, ties to the even code), so it shares no code path with the bit-twiddling under
// test. The bit-exact oracle is CUDA itself: when the toolkit's headers are on the include path
// (-I/usr/local/cuda/include), their host-side conversions run on the CPU and every result must
// match them bit for bit; without the toolkit that test says it was skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/numerics/formats.h"

// TG_TEST_NO_CUDA_ORACLE forces the fallback, to test it where the toolkit's headers are on the
// default include path anyway (some images link them into /usr/local/include).
#if !defined(TG_TEST_NO_CUDA_ORACLE) && __has_include(<cuda_bf16.h>) && \
    __has_include(<cuda_fp16.h>) && __has_include(<cuda_fp8.h>)
#define TG_TEST_CUDA_ORACLE 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#else
#define TG_TEST_CUDA_ORACLE 0
#endif

namespace {

uint32_t bits(float f) { return tg::f32_bits(f); }
float from_bits(uint32_t u) { return tg::bits_f32(u); }

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%X", v);
  return buf;
}

std::string describe(float x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "0x%08X (%.9g)", bits(x), double(x));
  return buf;
}

const float kInf = std::numeric_limits<float>::infinity();

// Counts mismatches and reports only the first few, so that a broken encoder does not print
// millions of lines; the final CHECK fails if there was any.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  Mismatches(const Mismatches&) = delete;
  Mismatches& operator=(const Mismatches&) = delete;
  ~Mismatches() { CHECK_MESSAGE(count_ == 0, what_ << ": " << count_ << " mismatches"); }
  void add(const std::string& input, uint32_t got, uint32_t want) {
    if (count_++ < 5)
      FAIL_CHECK(what_ << ": input " << input << " got " << hex(got) << " want " << hex(want));
  }
  void expect(float x, uint32_t got, uint32_t want) {
    if (got != want) add(describe(x), got, want);
  }

 private:
  std::string what_;
  long count_ = 0;
};

// ---- slow reference, from the format definitions ----

struct Fmt {
  const char* name;
  int width, ebits, mbits, bias;
  bool ieee_specials;  // all-ones exponent means inf/NaN; otherwise (E4M3) only S.1111.111 is NaN
};

double ref_decode(const Fmt& f, uint32_t code) {
  const bool neg = (code >> (f.width - 1)) & 1;
  const int e = int(code >> f.mbits) & ((1 << f.ebits) - 1);
  const int m = int(code) & ((1 << f.mbits) - 1);
  const int e_all = (1 << f.ebits) - 1, m_all = (1 << f.mbits) - 1;
  double mag;
  if (f.ieee_specials && e == e_all) {
    if (m != 0) return std::nan("");
    mag = std::numeric_limits<double>::infinity();
  } else if (!f.ieee_specials && e == e_all && m == m_all) {
    return std::nan("");
  } else if (e == 0) {
    mag = std::ldexp(double(m), 1 - f.bias - f.mbits);
  } else {
    mag = std::ldexp(double(m + (1 << f.mbits)), e - f.bias - f.mbits);
  }
  return neg ? -mag : mag;
}

// Positive finite values in code order (which is value order), plus one "virtual" value a unit
// past the largest finite: rounding as if the exponent were unbounded, then calling anything
// that lands on the virtual value an overflow, is how IEEE defines overflow and ties near it.
struct Ref {
  Fmt f;
  std::vector<double> pos;  // pos[c] = value of code c, c = 0 .. maxcode + 1 (virtual)
  uint32_t maxcode = 0;

  explicit Ref(const Fmt& fmt) : f(fmt) {
    for (uint32_t c = 0;; ++c) {
      const double v = ref_decode(f, c);
      if (std::isnan(v) || std::isinf(v)) break;
      pos.push_back(v);
    }
    maxcode = uint32_t(pos.size() - 1);
    pos.push_back(2 * pos[maxcode] - pos[maxcode - 1]);
  }
  uint32_t sign_bit() const { return 1u << (f.width - 1); }
  uint32_t canonical_nan() const { return f.width == 16 ? 0x7fffu : 0x7fu; }
  double smallest_subnormal() const { return pos[1]; }

  // Largest code whose value is <= a (a >= 0, finite); may be the virtual code.
  uint32_t floor_code(double a) const {
    return uint32_t(std::upper_bound(pos.begin(), pos.end(), a) - pos.begin()) - 1;
  }
  // Nearest code to a, ties to the even code (= even mantissa); maxcode + 1 means overflow.
  uint32_t nearest_code(double a) const {
    if (a >= pos[maxcode + 1]) return maxcode + 1;
    const uint32_t lo = floor_code(a);
    if (pos[lo] == a) return lo;
    const double mid = (pos[lo] + pos[lo + 1]) / 2;  // exact: both have few significant bits
    if (a != mid) return a < mid ? lo : lo + 1;
    return lo % 2 == 0 ? lo : lo + 1;
  }
  // Round to nearest even with CUDA's special-value rules (see formats.h).
  uint32_t encode(float x, bool saturate) const {
    if (std::isnan(x)) return canonical_nan();
    const uint32_t sign = std::signbit(x) ? sign_bit() : 0u;
    uint32_t c = std::isinf(x) ? maxcode + 1 : nearest_code(std::fabs(double(x)));
    if (c > maxcode) c = saturate ? maxcode : maxcode + 1;  // +1: inf, or NaN for E4M3
    return sign | c;
  }
};

const Fmt kBF16{"bf16", 16, 8, 7, 127, true};
const Fmt kF16{"fp16", 16, 5, 10, 15, true};
const Fmt kE4M3{"e4m3", 8, 4, 3, 7, false};
const Fmt kE5M2{"e5m2", 8, 5, 2, 15, true};

const Ref& ref_bf16() {
  static const Ref r(kBF16);
  return r;
}
const Ref& ref_f16() {
  static const Ref r(kF16);
  return r;
}
const Ref& ref_e4m3() {
  static const Ref r(kE4M3);
  return r;
}
const Ref& ref_e5m2() {
  static const Ref r(kE5M2);
  return r;
}

// ---- CUDA's host implementation ----

#if TG_TEST_CUDA_ORACLE
uint32_t cuda_bf16(float x) { return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x; }
uint32_t cuda_f16(float x) { return __half_raw(__float2half_rn(x)).x; }
uint32_t cuda_fp8(float x, bool sat, __nv_fp8_interpretation_t kind) {
  return __nv_cvt_float_to_fp8(x, sat ? __NV_SATFINITE : __NV_NOSAT, kind);
}
float cuda_bf16_to_f32(uint32_t c) {
  __nv_bfloat16_raw r;
  r.x = uint16_t(c);
  return __bfloat162float(__nv_bfloat16(r));
}
float cuda_f16_to_f32(uint32_t c) {
  __half_raw r;
  r.x = uint16_t(c);
  return __half2float(__half(r));
}
float cuda_fp8_to_f32(uint32_t c, __nv_fp8_interpretation_t kind) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), kind)));
}
#endif

// ---- the encoders and decoders under test, as a table ----

struct Encoder {
  const char* name;
  const Ref& ref;
  bool saturate;
  uint32_t (*ours)(float);
#if TG_TEST_CUDA_ORACLE
  uint32_t (*cuda)(float);
#endif
};

std::vector<Encoder> encoders() {
  return {
      {"bf16", ref_bf16(), false, [](float x) -> uint32_t { return tg::f32_to_bf16(x); },
#if TG_TEST_CUDA_ORACLE
       cuda_bf16
#endif
      },
      {"fp16", ref_f16(), false, [](float x) -> uint32_t { return tg::f32_to_f16(x); },
#if TG_TEST_CUDA_ORACLE
       cuda_f16
#endif
      },
      {"e4m3 satfinite", ref_e4m3(), true,
       [](float x) -> uint32_t { return tg::f32_to_e4m3(x, true); },
#if TG_TEST_CUDA_ORACLE
       [](float x) { return cuda_fp8(x, true, __NV_E4M3); }
#endif
      },
      {"e4m3 nosat", ref_e4m3(), false,
       [](float x) -> uint32_t { return tg::f32_to_e4m3(x, false); },
#if TG_TEST_CUDA_ORACLE
       [](float x) { return cuda_fp8(x, false, __NV_E4M3); }
#endif
      },
      {"e5m2 satfinite", ref_e5m2(), true,
       [](float x) -> uint32_t { return tg::f32_to_e5m2(x, true); },
#if TG_TEST_CUDA_ORACLE
       [](float x) { return cuda_fp8(x, true, __NV_E5M2); }
#endif
      },
      {"e5m2 nosat", ref_e5m2(), false,
       [](float x) -> uint32_t { return tg::f32_to_e5m2(x, false); },
#if TG_TEST_CUDA_ORACLE
       [](float x) { return cuda_fp8(x, false, __NV_E5M2); }
#endif
      },
  };
}

struct Decoder {
  const char* name;
  const Ref& ref;
  float (*ours)(uint32_t);
#if TG_TEST_CUDA_ORACLE
  float (*cuda)(uint32_t);
#endif
};

std::vector<Decoder> decoders() {
  return {
      {"bf16", ref_bf16(), [](uint32_t c) { return tg::bf16_to_f32(uint16_t(c)); },
#if TG_TEST_CUDA_ORACLE
       cuda_bf16_to_f32
#endif
      },
      {"fp16", ref_f16(), [](uint32_t c) { return tg::f16_to_f32(uint16_t(c)); },
#if TG_TEST_CUDA_ORACLE
       cuda_f16_to_f32
#endif
      },
      {"e4m3", ref_e4m3(), [](uint32_t c) { return tg::e4m3_to_f32(uint8_t(c)); },
#if TG_TEST_CUDA_ORACLE
       [](uint32_t c) { return cuda_fp8_to_f32(c, __NV_E4M3); }
#endif
      },
      {"e5m2", ref_e5m2(), [](uint32_t c) { return tg::e5m2_to_f32(uint8_t(c)); },
#if TG_TEST_CUDA_ORACLE
       [](uint32_t c) { return cuda_fp8_to_f32(c, __NV_E5M2); }
#endif
      },
  };
}

// ---- inputs ----

// Exact double -> float; the inputs built below are representable by construction, and values
// past FLT_MAX (the virtual code of bf16) are turned into inf rather than converted (UB).
float to_float(double v) {
  if (std::fabs(v) > double(std::numeric_limits<float>::max())) return v > 0 ? kInf : -kInf;
  return float(v);
}

// Edge inputs for one format: zeros, infinities, NaNs with several payloads, and for every
// positive code its value, the midpoint to the next code (a tie, including the one between
// the largest finite value and the overflow), and the floats just either side of both; all
// with both signs. That covers every tie at every exponent, the subnormal boundaries (half the
// smallest subnormal, largest subnormal to smallest normal) and the overflow threshold.
std::vector<float> edge_inputs(const Ref& r) {
  std::vector<float> v = {0.f,
                          kInf,
                          from_bits(0x7fc00000u),
                          from_bits(0x7f800001u),
                          from_bits(0x7fa00000u),
                          from_bits(0x7fffffffu),
                          from_bits(0x7fc0ffffu),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          from_bits(0x007fffffu),
                          1.f};
  for (uint32_t c = 0; c <= r.maxcode; ++c) {
    const float x = to_float(r.pos[c]), mid = to_float((r.pos[c] + r.pos[c + 1]) / 2);
    for (float y : {x, mid}) {
      v.push_back(y);
      v.push_back(std::nextafter(y, 0.f));
      v.push_back(std::nextafter(y, kInf));
    }
  }
  v.push_back(to_float(r.pos[r.maxcode + 1]));
  v.push_back(to_float(2 * r.pos[r.maxcode + 1]));
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

// Random inputs: 3/8 uniformly random bit patterns (NaNs, infinities and fp32 subnormals
// included), the rest concentrated on one of the formats: random significands at exponents
// from a little below its smallest subnormal to a little above its largest value, exact ties
// between neighbouring codes, floats next to ties, and representable values and their
// neighbours.
class Inputs {
 public:
  explicit Inputs(uint64_t seed) : rng_(seed) {}
  float next() {
    const uint64_t r = rng_();
    const uint32_t lo = uint32_t(r), hi = uint32_t(r >> 32);
    const Ref& f = *refs_[(hi >> 3) & 3];
    const float sign = (hi >> 31) ? -1.f : 1.f;
    const uint32_t code = (hi >> 8) % (f.maxcode + 1);
    const float toward = (hi >> 30) & 1 ? kInf : 0.f;
    switch (hi & 7) {
      case 0:
      case 1:
      case 2: return from_bits(lo);
      case 3:
      case 4: {
        const int e_lo = std::max(-149, int(std::log2(f.smallest_subnormal())) - 3);
        const int e_hi = std::min(127, int(std::log2(f.pos[f.maxcode])) + 2);
        const int e = e_lo + int((hi >> 8) % uint32_t(e_hi - e_lo + 1));
        return sign * std::ldexp(1.f + float(lo & 0x7fffffu) * 0x1p-23f, e);
      }
      case 5: return sign * to_float((f.pos[code] + f.pos[code + 1]) / 2);
      case 6: return sign * std::nextafter(to_float((f.pos[code] + f.pos[code + 1]) / 2), toward);
      default:
        return sign *
               ((lo & 1) ? to_float(f.pos[code]) : std::nextafter(to_float(f.pos[code]), toward));
    }
  }

 private:
  std::mt19937_64 rng_;
  const Ref* refs_[4] = {&ref_bf16(), &ref_f16(), &ref_e4m3(), &ref_e5m2()};
};

bool same_value(float got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return double(got) == want && std::signbit(got) == std::signbit(want);
}

}  // namespace

TEST_CASE("formats: decode every code against the field definition") {
  for (const Decoder& d : decoders()) {
    Mismatches bad(std::string(d.name) + " decode");
    const uint32_t ncodes = 1u << d.ref.f.width;
    for (uint32_t c = 0; c < ncodes; ++c) {
      const float got = d.ours(c);
      const double want = ref_decode(d.ref.f, c);
      if (!same_value(got, want)) bad.add(hex(c), bits(got), bits(to_float(want)));
    }
  }
  // A few values known by heart, in case the field definition above shares a misreading.
  CHECK(tg::bf16_to_f32(0x3f80) == 1.f);
  CHECK(bits(tg::bf16_to_f32(0xffc1)) == 0xffc10000u);  // widening keeps the payload and sign
  CHECK(tg::f16_to_f32(0x0001) == 0x1p-24f);
  CHECK(tg::f16_to_f32(0x7bff) == 65504.f);
  CHECK(tg::f16_to_f32(0xfc00) == -kInf);
  CHECK(bits(tg::f16_to_f32(0xfe01)) == 0x7fffffffu);  // canonical NaN, as CUDA's host code
  CHECK(tg::e4m3_to_f32(0x7e) == 448.f);
  CHECK(tg::e4m3_to_f32(0x01) == 0x1p-9f);
  CHECK(tg::e4m3_to_f32(0x78) == 256.f);  // E4M3 has no inf: exponent 15 is still finite
  CHECK(bits(tg::e4m3_to_f32(0x80)) == 0x80000000u);
  CHECK(bits(tg::e4m3_to_f32(0xff)) == 0x7fffffffu);
  CHECK(tg::e5m2_to_f32(0x7b) == 57344.f);
  CHECK(tg::e5m2_to_f32(0x7c) == kInf);
  CHECK(tg::e5m2_to_f32(0x01) == 0x1p-16f);
  CHECK(bits(tg::e5m2_to_f32(0xfd)) == 0x7fffffffu);
}

TEST_CASE("formats: every code survives decode then encode") {
  for (const Encoder& e : encoders()) {
    const decltype(decoders()) ds = decoders();
    const Decoder& d =
        *std::find_if(ds.begin(), ds.end(), [&](const Decoder& x) { return &x.ref == &e.ref; });
    Mismatches bad(std::string(e.name) + " round trip");
    const uint32_t ncodes = 1u << e.ref.f.width;
    for (uint32_t c = 0; c < ncodes; ++c) {
      const float x = d.ours(c);
      uint32_t want = c;
      if (std::isnan(x)) want = e.ref.canonical_nan();
      if (std::isinf(x) && e.saturate) want = (c & e.ref.sign_bit()) | e.ref.maxcode;
      bad.expect(x, e.ours(x), want);
    }
  }
}

TEST_CASE("formats: encode edge classes") {
  for (const Encoder& e : encoders()) {
    Mismatches bad(std::string(e.name) + " edge classes vs reference");
    for (float x : edge_inputs(e.ref)) bad.expect(x, e.ours(x), e.ref.encode(x, e.saturate));
  }

  // Expected codes worked out by hand from the format definitions and CUDA's special-value
  // rules, independent of the reference encoder.
  struct Case {
    float x;
    uint32_t want;
  };
  const float nan_neg = from_bits(0xffc00000u), nan_sig = from_bits(0x7f800001u);
  {
    Mismatches bad("bf16 by hand");
    const Case cases[] = {
        {1.f, 0x3f80},
        {from_bits(0x3f808000u), 0x3f80},  // tie, even stays
        {from_bits(0x3f818000u), 0x3f82},  // tie, odd rounds up
        {from_bits(0x3f808001u), 0x3f81},
        {from_bits(0x3f807fffu), 0x3f80},
        {from_bits(0xbf818000u), 0xbf82},
        {from_bits(0x7f7f7fffu), 0x7f7f},
        {from_bits(0x7f7f8000u), 0x7f80},  // tie above the largest finite: overflow to inf
        {std::numeric_limits<float>::max(), 0x7f80},
        {from_bits(0x7f7e8000u), 0x7f7e},
        {from_bits(0x00008000u), 0x0000},  // half the smallest subnormal
        {from_bits(0x00008001u), 0x0001},
        {from_bits(0x00018000u), 0x0002},
        {from_bits(0x80008000u), 0x8000},
        {from_bits(0x007fffffu), 0x0080},  // largest fp32 subnormal rounds to the smallest normal
        {-0.f, 0x8000},
        {kInf, 0x7f80},
        {-kInf, 0xff80},
        {nan_neg, 0x7fff},
        {nan_sig, 0x7fff},
    };
    for (const Case& c : cases) bad.expect(c.x, tg::f32_to_bf16(c.x), c.want);
  }
  {
    Mismatches bad("fp16 by hand");
    const Case cases[] = {
        {1.f, 0x3c00},
        {0x1.002p0f, 0x3c00},  // 1 + 2^-11: tie, even stays
        {0x1.006p0f, 0x3c02},  // 1 + 3 * 2^-11: tie, odd rounds up
        {0x1.002002p0f, 0x3c01},
        {65504.f, 0x7bff},
        {from_bits(0x477fefffu), 0x7bff},  // just below 65520
        {65520.f, 0x7c00},                 // tie above the largest finite: inf
        {-65520.f, 0xfc00},
        {1e10f, 0x7c00},
        {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},  // half the smallest subnormal: tie to zero
        {-0x1p-25f, 0x8000},
        {from_bits(0x33000001u), 0x0001},
        {0x1.8p-24f, 0x0002},
        {0x1.4p-23f, 0x0002},    // 2.5 * 2^-24
        {0x1.ff8p-15f, 0x03ff},  // largest subnormal
        {0x1.ffcp-15f, 0x0400},  // tie between it and the smallest normal
        {0x1p-14f, 0x0400},
        {-0.f, 0x8000},
        {kInf, 0x7c00},
        {-kInf, 0xfc00},
        {nan_neg, 0x7fff},
        {nan_sig, 0x7fff},
    };
    for (const Case& c : cases) bad.expect(c.x, tg::f32_to_f16(c.x), c.want);
  }
  struct Case8 {
    float x;
    uint32_t sat, nosat;
  };
  {
    Mismatches bad("e4m3 by hand");
    const Case8 cases[] = {
        {448.f, 0x7e, 0x7e},
        {464.f, 0x7e, 0x7e},  // tie above the largest finite: 448 has the even mantissa
        {std::nextafter(464.f, kInf), 0x7e, 0x7f},
        {-std::nextafter(464.f, kInf), 0xfe, 0xff},  // no inf: NaN, and it keeps the sign
        {480.f, 0x7e, 0x7f},
        {kInf, 0x7e, 0x7f},
        {-kInf, 0xfe, 0xff},
        {nan_neg, 0x7f, 0x7f},
        {nan_sig, 0x7f, 0x7f},
        {1.f, 0x38, 0x38},
        {1.0625f, 0x38, 0x38},
        {1.1875f, 0x3a, 0x3a},
        {240.f, 0x77, 0x77},
        {256.f, 0x78, 0x78},
        {0x1p-9f, 0x01, 0x01},
        {0x1p-10f, 0x00, 0x00},
        {-0x1p-10f, 0x80, 0x80},
        {std::nextafter(0x1p-10f, 1.f), 0x01, 0x01},
        {0x1.8p-9f, 0x02, 0x02},
        {0x1.cp-7f, 0x07, 0x07},  // largest subnormal
        {0x1.ep-7f, 0x08, 0x08},  // tie between it and the smallest normal
        {0x1p-6f, 0x08, 0x08},
        {-0.f, 0x80, 0x80},
        {1e-30f, 0x00, 0x00},
    };
    for (const Case8& c : cases) {
      bad.expect(c.x, tg::f32_to_e4m3(c.x, true), c.sat);
      bad.expect(c.x, tg::f32_to_e4m3(c.x, false), c.nosat);
    }
  }
  {
    Mismatches bad("e5m2 by hand");
    // clang-format off
    const Case8 cases[] = {
        {57344.f, 0x7b, 0x7b},
        {from_bits(0x476fffffu), 0x7b, 0x7b},  // just below 61440
        {61440.f, 0x7b, 0x7c},                 // tie above the largest finite: inf
        {-61440.f, 0xfb, 0xfc},
        {kInf, 0x7b, 0x7c},
        {-kInf, 0xfb, 0xfc},
        {nan_neg, 0x7f, 0x7f},  // NaN loses its sign
        {nan_sig, 0x7f, 0x7f},
        {1.f, 0x3c, 0x3c},
        {1.125f, 0x3c, 0x3c},  // tie, even stays
        {1.375f, 0x3e, 0x3e},  // tie, odd rounds up
        {0x1p-16f, 0x01, 0x01},
        {0x1p-17f, 0x00, 0x00},  // half the smallest subnormal
        {-0x1p-17f, 0x80, 0x80},
        {0x1.8p-16f, 0x02, 0x02},
        {0x1.cp-15f, 0x04, 0x04},  // tie between the largest subnormal and the smallest normal
        {0x1p-14f, 0x04, 0x04},
        {-0.f, 0x80, 0x80},
    };
    // clang-format on
    for (const Case8& c : cases) {
      bad.expect(c.x, tg::f32_to_e5m2(c.x, true), c.sat);
      bad.expect(c.x, tg::f32_to_e5m2(c.x, false), c.nosat);
    }
  }
}

TEST_CASE("formats: ten million random inputs against the reference encoder") {
  const std::vector<Encoder> es = encoders();
  std::deque<Mismatches> bad;
  for (const Encoder& e : es) bad.emplace_back(std::string(e.name) + " random vs reference");
  Inputs in(12345);
  for (long i = 0; i < 10000000; ++i) {
    const float x = in.next();
    for (size_t k = 0; k < es.size(); ++k) {
      const uint32_t got = es[k].ours(x);
      // Saturating and non-saturating fp8 differ only on overflow: one search serves both.
      const uint32_t want = es[k].ref.encode(x, es[k].saturate);
      if (got != want) bad[k].add(describe(x), got, want);
    }
  }
}

TEST_CASE("formats: bit-exact against the CUDA toolkit's host conversions") {
#if TG_TEST_CUDA_ORACLE
  for (const Decoder& d : decoders()) {
    Mismatches bad(std::string(d.name) + " decode vs CUDA");
    for (uint32_t c = 0; c < (1u << d.ref.f.width); ++c) {
      const uint32_t got = bits(d.ours(c)), want = bits(d.cuda(c));
      if (got != want) bad.add(hex(c), got, want);
    }
  }
  const std::vector<Encoder> es = encoders();
  for (const Encoder& e : es) {
    Mismatches bad(std::string(e.name) + " encode vs CUDA");
    for (const Decoder& d : decoders())  // every code of every format, decoded
      for (uint32_t c = 0; c < (1u << d.ref.f.width); ++c) {
        const float x = d.ours(c);
        bad.expect(x, e.ours(x), e.cuda(x));
      }
    for (const Encoder& other : es)
      for (float x : edge_inputs(other.ref)) bad.expect(x, e.ours(x), e.cuda(x));
  }
  std::deque<Mismatches> bad;
  for (const Encoder& e : es) bad.emplace_back(std::string(e.name) + " random vs CUDA");
  Inputs in(777);
  for (long i = 0; i < 3000000; ++i) {
    const float x = in.next();
    for (size_t k = 0; k < es.size(); ++k) bad[k].expect(x, es[k].ours(x), es[k].cuda(x));
  }
#else
  MESSAGE(
      "CUDA oracle skipped: cuda_bf16.h / cuda_fp16.h / cuda_fp8.h not on the include path; "
      "only the slow reference was checked");
#endif
}

namespace {

// One stochastic-rounding format under test, with its RNE reference for brackets.
struct SR {
  const char* name;
  const Ref& ref;
  uint32_t (*round)(float, uint32_t);
};

std::vector<SR> sr_formats() {
  return {
      {"bf16", ref_bf16(),
       [](float x, uint32_t r) -> uint32_t { return tg::f32_to_bf16_sr(x, r); }},
      {"fp16", ref_f16(), [](float x, uint32_t r) -> uint32_t { return tg::f32_to_f16_sr(x, r); }},
  };
}

}  // namespace

TEST_CASE("formats: stochastic rounding picks one of the two neighbours") {
  std::mt19937_64 rng(99);
  for (const SR& s : sr_formats()) {
    Mismatches bad(std::string(s.name) + " stochastic rounding bracket");
    Mismatches trunc(std::string(s.name) + " stochastic rounding with rand_bits = 0");
    Mismatches up(std::string(s.name) + " stochastic rounding with all rand_bits set");
    Inputs in(4242);
    for (long i = 0; i < 1000000; ++i) {
      const float x = in.next();
      if (std::isnan(x) || std::isinf(x)) continue;
      const uint32_t sign = std::signbit(x) ? s.ref.sign_bit() : 0u;
      const double a = std::fabs(double(x));
      // Floor in magnitude; at or past the virtual code everything is +-inf.
      const uint32_t lo = std::min(s.ref.floor_code(a), s.ref.maxcode + 1);
      const bool exact = lo <= s.ref.maxcode && s.ref.pos[lo] == a;
      const uint32_t hi = exact || lo > s.ref.maxcode ? lo : lo + 1;
      const uint32_t got = s.round(x, uint32_t(rng()));
      if (got != (sign | lo) && got != (sign | hi)) bad.add(describe(x), got, sign | hi);
      trunc.expect(x, s.round(x, 0), sign | lo);
      // All ones rounds up whenever anything is discarded, except where the discarded part is
      // below the 2^-32 resolution of the random bits (fp16, far below its smallest subnormal).
      if (a >= s.ref.smallest_subnormal() * 0x1p-31) up.expect(x, s.round(x, ~0u), sign | hi);
    }
  }
  // Specials and overflow.
  CHECK(tg::f32_to_bf16_sr(std::nan(""), 0x1234) == 0x7fff);
  CHECK(tg::f32_to_bf16_sr(-kInf, 0xffffffffu) == 0xff80);
  CHECK(tg::f32_to_bf16_sr(std::numeric_limits<float>::max(), 0) == 0x7f7f);
  CHECK(tg::f32_to_bf16_sr(std::numeric_limits<float>::max(), 0xffff) == 0x7f80);
  CHECK(tg::f32_to_bf16_sr(-std::numeric_limits<float>::max(), 0xffff) == 0xff80);
  CHECK(tg::f32_to_f16_sr(-std::nan(""), 7) == 0x7fff);
  CHECK(tg::f32_to_f16_sr(kInf, 0) == 0x7c00);
  CHECK(tg::f32_to_f16_sr(65519.f, 0) == 0x7bff);
  CHECK(tg::f32_to_f16_sr(65519.f, 0xffffffffu) == 0x7c00);
  CHECK(tg::f32_to_f16_sr(-70000.f, 0) == 0xfc00);
  CHECK(tg::f32_to_f16_sr(0x1p-26f, 0) == 0x0000);
  CHECK(tg::f32_to_f16_sr(-0x1p-26f, 0xffffffffu) == 0x8001);
  // 2^-40 is 2^-16 of the smallest subnormal: it rounds up for the top 2^16 of the 2^32 draws.
  CHECK(tg::f32_to_f16_sr(0x1p-40f, 0xffff0000u) == 0x0001);
  CHECK(tg::f32_to_f16_sr(0x1p-40f, 0xfffeffffu) == 0x0000);
}

TEST_CASE("formats: stochastic rounding is unbiased") {
  struct Probe {
    const SR* s;
    float x;
  };
  const std::vector<SR> srs = sr_formats();
  const Probe probes[] = {
      {&srs[0], 1.f + 0.3f * 0x1p-7f},
      {&srs[0], -3.7e-3f},
      {&srs[0], 1.3e-39f},
      {&srs[0], -2.5e-38f},
      {&srs[1], 1.f + 0.3f * 0x1p-10f},
      {&srs[1], -1000.3f},
      {&srs[1], 3.3e-6f},
      {&srs[1], 0.7f * 0x1p-24f},
      {&srs[1], -0.1f * 0x1p-24f},
      {&srs[1], 0.25f * 0x1p-30f},
      {&srs[1], 0.3f * 0x1p-36f},  // more dropped bits than random bits: scaled up
  };
  const long n = 1 << 18;
  for (const Probe& p : probes) {
    const Ref& ref = p.s->ref;
    const double a = std::fabs(double(p.x));
    const uint32_t lo = ref.floor_code(a);
    REQUIRE(lo < ref.maxcode);  // probes sit strictly between two finite values
    const double step = ref.pos[lo + 1] - ref.pos[lo], frac = (a - ref.pos[lo]) / step;
    double sum = 0;
    for (long i = 0; i < n; ++i) {
      const uint32_t c = p.s->round(p.x, tg::sr_hash(2024, uint64_t(i)));
      sum += std::fabs(double(ref_decode(ref.f, c)));
    }
    const double mean_frac = (sum / double(n) - ref.pos[lo]) / step;
    // Six standard deviations of a mean of n Bernoulli(frac) draws.
    const double bound = 6 * std::sqrt(frac * (1 - frac) / double(n));
    INFO(p.s->name << " x = " << describe(p.x) << " frac " << frac << " mean " << mean_frac);
    CHECK(std::fabs(mean_frac - frac) <= bound);
  }
}

TEST_CASE("formats: sr_hash gives reproducible, well-mixed bits") {
  const long n = 1 << 16;
  long ones[32] = {};
  long same_as_other_seed = 0, same_as_shifted = 0;
  for (long i = 0; i < n; ++i) {
    const uint32_t h = tg::sr_hash(7, uint64_t(i));
    CHECK_MESSAGE(h == tg::sr_hash(7, uint64_t(i)), "index " << i);
    for (int b = 0; b < 32; ++b) ones[b] += (h >> b) & 1;
    same_as_other_seed += h == tg::sr_hash(8, uint64_t(i));
    same_as_shifted += i > 0 && h == tg::sr_hash(8, uint64_t(i - 1));
  }
  for (int b = 0; b < 32; ++b) {
    INFO("bit " << b);
    CHECK(std::fabs(double(ones[b]) / double(n) - 0.5) < 0.01);
  }
  CHECK(same_as_other_seed < 3);
  CHECK(same_as_shifted < 3);
  // No lattice: for a weak hash such as seed + index * constant the differences between
  // neighbouring indices repeat; for a good one about 1 - 1/e of the 2^16 values show up.
  std::vector<bool> seen(1 << 16);
  long distinct = 0;
  for (long i = 0; i < n; ++i) {
    const uint32_t d = (tg::sr_hash(7, uint64_t(i + 1)) - tg::sr_hash(7, uint64_t(i))) & 0xffffu;
    distinct += !seen[d];
    seen[d] = true;
  }
  CHECK(distinct > 35000);

  // Rounding a tensor twice with the same seed gives the same codes; another seed does not.
  long differ = 0;
  for (long i = 0; i < 4096; ++i) {
    const float x = 1.f + float(i) * 0x1p-20f;
    const uint16_t a = tg::f32_to_bf16_sr(x, tg::sr_hash(1, uint64_t(i)));
    CHECK(a == tg::f32_to_bf16_sr(x, tg::sr_hash(1, uint64_t(i))));
    differ += a != tg::f32_to_bf16_sr(x, tg::sr_hash(2, uint64_t(i)));
  }
  CHECK(differ > 100);
}

TEST_CASE("formats: fp8_scale_from_amax") {
  CHECK(tg::E4M3_MAX == 448.f);
  CHECK(tg::E5M2_MAX == 57344.f);
  CHECK(tg::fp8_scale_from_amax(448.f, tg::E4M3_MAX, 0) == 1.f);
  CHECK(tg::fp8_scale_from_amax(1.f, tg::E4M3_MAX, 0) == 448.f);
  CHECK(tg::fp8_scale_from_amax(2.f, tg::E4M3_MAX, 1) == 112.f);
  CHECK(tg::fp8_scale_from_amax(14336.f, tg::E5M2_MAX, 2) == 1.f);
  CHECK(tg::fp8_scale_from_amax(0.5f, tg::E5M2_MAX, 3) == 14336.f);
  CHECK(tg::fp8_scale_from_amax(3.f, tg::E4M3_MAX, -1) == doctest::Approx(298.6666667));
  // The documented fallbacks: nothing to scale, or a broken amax, gives scale 1.
  CHECK(tg::fp8_scale_from_amax(0.f, tg::E4M3_MAX, 0) == 1.f);
  CHECK(tg::fp8_scale_from_amax(-0.f, tg::E4M3_MAX, 0) == 1.f);
  CHECK(tg::fp8_scale_from_amax(kInf, tg::E4M3_MAX, 0) == 1.f);
  CHECK(tg::fp8_scale_from_amax(std::nanf(""), tg::E4M3_MAX, 0) == 1.f);
  // A tiny amax would overflow the scale: it is clamped, and amax * s still fits the format.
  const float s = tg::fp8_scale_from_amax(1e-40f, tg::E4M3_MAX, 0);
  CHECK(s == std::numeric_limits<float>::max());
  const float q = tg::e4m3_to_f32(tg::f32_to_e4m3(1e-40f * s, false));
  CHECK(q > 0.f);
  CHECK(q <= tg::E4M3_MAX);
}
