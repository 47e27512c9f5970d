// test_quantize_tensor.cpp: the per-tensor FP8 quantizer of the fp8 mode
// (src/backends/cpu/quantize_tensor.cpp) and its AVX-512 lanes (quantize_tensor_lanes.cpp)
// against formats.h's encoder and decoder, code by code: every bf16 input at scales that
// reach both formats' subnormals, ties, saturation and overflow of the product; fp32 inputs
// of random bits (NaN, inf, subnormals) and every FP8 midpoint; the amax, the scale of
// current scaling, and the all-NaN result of a tensor holding one non-finite value, wherever
// it lies (in the lanes' runs or the scalar tail).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/backends/cpu/quantize_lanes.h"
#include "src/backends/cpu/storage.h"
#include "src/numerics/formats.h"

using tg::ElemFormat;
using tg::cpu::bf16;

namespace {

// The definition: v rounded into F (nearest even, saturating) by formats.h and decoded, as
// the bf16 code of that value (exact: FP8 values fit bf16).
uint16_t reference_code(float v, ElemFormat f) {
  const float r =
      f == ElemFormat::E4M3
          ? tg::elem_to_f32<ElemFormat::E4M3>(tg::f32_to_elem<ElemFormat::E4M3>(v, false, 0))
          : tg::elem_to_f32<ElemFormat::E5M2>(tg::f32_to_elem<ElemFormat::E5M2>(v, false, 0));
  return uint16_t(tg::f32_bits(r) >> 16);
}

uint32_t magnitude_bits(float v) { return tg::f32_bits(v) & 0x7fffffffu; }

// Scales that put the inputs everywhere in both formats: below the subnormals, on them, across
// the normal range, past the largest value, and products that overflow fp32.
const float kScales[] = {1.0f,          0.5f,    3.0f,     448.0f / 1.7f, 0x1p-10f,
                         0x1p10f,       0x1p20f, 0x1p-30f, 1e30f,         3.4e38f,
                         1.0009765625f, 0.1f,    7.0f,     0x1p-126f,     57344.0f / 3.0f};

// fp32 values: random bits (NaN, inf, subnormals, both signs), and every midpoint between
// neighbouring values of both formats and the values themselves, with their neighbours one
// fp32 ulp away (the ties and the values next to them).
std::vector<float> adversarial_f32() {
  std::vector<float> x;
  std::mt19937 rng(45);
  for (int i = 0; i < 20000; i++) x.push_back(tg::bits_f32(uint32_t(rng())));
  for (ElemFormat f : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (int c = 0; c < 127; c++) {
      const auto dec = [&](int q) {
        return f == ElemFormat::E4M3 ? tg::elem_to_f32<ElemFormat::E4M3>(uint8_t(q))
                                     : tg::elem_to_f32<ElemFormat::E5M2>(uint8_t(q));
      };
      const float a = dec(c), b = dec(c + 1);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      for (float v : {a, (a + b) / 2})
        for (float w : {v, std::nextafter(v, 0.0f), std::nextafter(v, INFINITY)})
          for (float sign : {1.0f, -1.0f}) x.push_back(sign * w);
    }
  for (uint32_t u : {0u, 0x80000000u, 1u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu})
    x.push_back(tg::bits_f32(u));
  while (x.size() % 32) x.push_back(0.0f);
  return x;
}

}  // namespace

TEST_CASE("quantize tensor lanes: every bf16 input's code equals formats.h's round trip") {
  std::vector<uint16_t> x(65536), got(65536);
  for (uint32_t i = 0; i < 65536; i++) x[i] = uint16_t(i);
  uint32_t want_amax = 0;
  for (uint16_t c : x) want_amax = std::max(want_amax, magnitude_bits(tg::bf16_to_f32(c)));
  for (ElemFormat f : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (float s : kScales) {
      uint32_t amax = 0;
      const size_t done = tg::cpu::fp8_codes_lanes(got.data(), x.data(), x.size(), s, f, &amax);
      if (!tg::cpu::quantize_lanes_available()) {
        CHECK(done == 0);
        continue;
      }
      REQUIRE(done == x.size());
      CHECK(amax == want_amax);
      int bad = 0;
      for (size_t i = 0; i < x.size(); i++) {
        const float v = tg::bf16_to_f32(x[i]);
        if (std::isfinite(v)) bad += got[i] != reference_code(v * s, f);
      }
      CHECK_MESSAGE(bad == 0, tg::elem_format_name(f) << " scale " << s << ": " << bad);
    }
  if (!tg::cpu::quantize_lanes_available()) MESSAGE("no AVX-512: the lanes quantize nothing");
}

TEST_CASE("quantize tensor lanes: fp32 inputs (random bits, midpoints, ties) equal formats.h") {
  const std::vector<float> x = adversarial_f32();
  std::vector<uint16_t> got(x.size());
  for (ElemFormat f : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (float s : kScales) {
      uint32_t amax = 0;
      const size_t done = tg::cpu::fp8_codes_lanes(got.data(), x.data(), x.size() - 7, s, f, &amax);
      if (!tg::cpu::quantize_lanes_available()) {
        CHECK(done == 0);
        continue;
      }
      REQUIRE(done == (x.size() - 7) / 32 * 32);  // whole runs of 32 only
      uint32_t m = 0;
      int bad = 0;
      for (size_t i = 0; i < done; i++) {
        m = std::max(m, magnitude_bits(x[i]));
        if (std::isfinite(x[i])) bad += got[i] != reference_code(x[i] * s, f);
      }
      CHECK(amax == m);
      CHECK_MESSAGE(bad == 0, tg::elem_format_name(f) << " scale " << s << ": " << bad);
    }
}

TEST_CASE("quantize tensor: codes, amax and scale equal formats.h's, from bf16 and fp32") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const size_t n = 70001;  // the parts' lanes and a scalar tail
  std::vector<float> xf(n + 1);
  std::vector<bf16> xb(n + 1);
  for (size_t i = 0; i < xf.size(); i++) {
    xb[i] = bf16{uint16_t(tg::f32_bits(nd(rng) * std::ldexp(1.0f, int(rng() % 40) - 20)) >> 16)};
    xf[i] = i % 3 ? tg::bf16_to_f32(xb[i].bits) : nd(rng);
  }
  for (ElemFormat f : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (bool current : {false, true})
      for (size_t off : {size_t(0), size_t(1)}) {  // an unaligned start too
        tg::cpu::TensorQuant q{0.37f, current, 1, f};
        std::vector<bf16> cb(n), cf(n);
        float amax_b = 0, amax_f = 0;
        const float sb = tg::cpu::quantize_tensor_fp8(cb.data(), xb.data() + off, n, q, &amax_b);
        const float sf = tg::cpu::quantize_tensor_fp8(cf.data(), xf.data() + off, n, q, &amax_f);
        float mb = 0, mf = 0;
        for (size_t i = 0; i < n; i++) {
          mb = std::max(mb, std::fabs(tg::bf16_to_f32(xb[off + i].bits)));
          mf = std::max(mf, std::fabs(xf[off + i]));
        }
        CHECK(amax_b == mb);
        CHECK(amax_f == mf);
        const float fmax = tg::elem_format_max(f);
        CHECK(sb == (current ? tg::fp8_scale_from_amax(mb, fmax, 1) : 0.37f));
        CHECK(sf == (current ? tg::fp8_scale_from_amax(mf, fmax, 1) : 0.37f));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
          bad += cb[i].bits != reference_code(tg::bf16_to_f32(xb[off + i].bits) * sb, f);
          bad += cf[i].bits != reference_code(xf[off + i] * sf, f);
        }
        CHECK_MESSAGE(bad == 0, tg::elem_format_name(f) << " current " << current << ": " << bad);
      }
}

TEST_CASE("quantize tensor: one non-finite value anywhere makes every code NaN and amax inf") {
  const size_t n = 40000;
  for (size_t at : {size_t(0), size_t(12345), n - 3})  // in a run of 32, or in the tail
    for (float bad_value : {INFINITY, -INFINITY, NAN})
      for (bool current : {false, true}) {
        std::vector<float> xf(n, 0.5f);
        std::vector<bf16> xb(n, bf16{0x3f00});
        xf[at] = bad_value;
        xb[at] = bf16{uint16_t(tg::f32_bits(bad_value) >> 16)};
        tg::cpu::TensorQuant q{2.0f, current, 0, ElemFormat::E4M3};
        std::vector<bf16> cb(n), cf(n);
        float amax_b = 0, amax_f = 0;
        tg::cpu::quantize_tensor_fp8(cb.data(), xb.data(), n, q, &amax_b);
        tg::cpu::quantize_tensor_fp8(cf.data(), xf.data(), n, q, &amax_f);
        CHECK(std::isinf(amax_b));
        CHECK(std::isinf(amax_f));
        int not_nan = 0;
        for (size_t i = 0; i < n; i++) not_nan += (cb[i].bits != 0x7fc0) + (cf[i].bits != 0x7fc0);
        CHECK(not_nan == 0);
        // The exact path's quantize-dequantize: every value NaN.
        float amax_q = 0;
        tg::cpu::qdq_tensor_fp8(xf.data(), n, q, &amax_q);
        CHECK(std::isinf(amax_q));
        for (size_t i = 0; i < n; i++) not_nan += !std::isnan(xf[i]);
        CHECK(not_nan == 0);
      }
}

TEST_CASE("quantize tensor: the exact path's quantize-dequantize is the codes times 1 / s") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(50000);
  for (float& v : x) v = nd(rng) * std::ldexp(1.0f, int(rng() % 30) - 15);
  for (ElemFormat f : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (bool current : {false, true}) {
      tg::cpu::TensorQuant q{5.0f, current, 0, f};
      std::vector<float> y = x;
      float amax = 0;
      const float s = tg::cpu::qdq_tensor_fp8(y.data(), y.size(), q, &amax);
      int bad = 0;
      for (size_t i = 0; i < x.size(); i++) {
        const float want = tg::bits_f32(uint32_t(reference_code(x[i] * s, f)) << 16) * (1.0f / s);
        bad += tg::f32_bits(y[i]) != tg::f32_bits(want);
      }
      CHECK_MESSAGE(bad == 0, tg::elem_format_name(f) << " current " << current << ": " << bad);
    }
}
