// Tests of the gradient wire formats (src/numerics/wire_format.h): the registry, sizes, bf16
// code for code against the project's conversion, FP8 blocks against their definition (amax
// mapped to 448, nearest even, saturation), non-finite blocks kept non-finite, and sums over
// ranks that start from -0.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "src/base/common.h"
#include "src/numerics/formats.h"
#include "src/numerics/wire_format.h"

using tg::WireFormat;

namespace {
bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

std::vector<float> round_trip(const std::vector<float>& x, WireFormat f) {
  std::vector<char> buf(tg::wire_bytes(x.size(), f));
  tg::wire_encode(x.data(), x.size(), f, buf.data());
  std::vector<float> y(x.size());
  tg::wire_decode(buf.data(), x.size(), f, y.data());
  return y;
}

std::vector<float> gaussian(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}
}  // namespace

TEST_CASE("wire formats: the registry names, parses and sizes every format") {
  CHECK(tg::wire_format_names() ==
        std::vector<std::string>{"fp32", "bf16", "fp8-e4m3", "fp8-e5m2"});
  for (const tg::WireFormatInfo& r : tg::wire_formats())
    CHECK(tg::parse_wire_format(r.name, "k") == r.format);
  CHECK_THROWS_AS(tg::parse_wire_format("fp8", "precision.state.grad_comm"), tg::UsageError);
  CHECK_THROWS_WITH(tg::parse_wire_format("e4m3", "precision.state.grad_comm"),
                    doctest::Contains("'precision.state.grad_comm': unknown wire format 'e4m3'"));
  CHECK(tg::wire_bytes(1000, WireFormat::FP32) == 4000);
  CHECK(tg::wire_bytes(1000, WireFormat::BF16) == 2000);
  CHECK(tg::wire_bytes(1000, WireFormat::FP8E4M3) == 1000 + 4 * 8);  // 8 blocks, the last short
  CHECK(tg::wire_bytes(256, WireFormat::FP8E4M3) == 256 + 8);
  CHECK(tg::wire_bytes(0, WireFormat::FP8E4M3) == 0);
  CHECK(tg::wire_bytes_per_element(WireFormat::FP8E4M3) == doctest::Approx(1.03125));
  CHECK(tg::wire_bytes(1000, WireFormat::FP8E5M2) == 1000 + 4 * 8);
  CHECK(tg::wire_bytes_per_element(WireFormat::FP8E5M2) == doctest::Approx(1.03125));
}

TEST_CASE("wire formats: fp32 and bf16 are the project's conversions, code for code") {
  std::vector<float> x = gaussian(4096, 1e-3f, 1);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-0.f);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(3.3e38f);  // rounds to bf16 inf
  const std::vector<float> a = round_trip(x, WireFormat::FP32), b = round_trip(x, WireFormat::BF16);
  for (size_t i = 0; i < x.size(); i++) {
    INFO("element " << i << " = " << x[i]);
    CHECK(same_bits(a[i], x[i]));
    const float want = tg::bf16_to_f32(tg::f32_to_bf16(x[i]));
    CHECK((same_bits(b[i], want) || (std::isnan(want) && std::isnan(b[i]))));
  }
}

// One fp8 wire format's constants, as the project's conversions define them.
struct Fp8Wire {
  WireFormat format;
  float max;                     // the element format's largest finite value
  float relative;                // half a mantissa step, relative to the element
  float subnormal;               // the element format's smallest step
  uint8_t (*code)(float, bool);  // f32 -> code, saturating
  float (*value)(uint8_t);       // code -> f32
};

TEST_CASE(
    "wire formats: fp8 blocks map their amax to the format's largest value and round each "
    "element once (e4m3: 448, e5m2: 57344)") {
  // Blocks of very different magnitudes, a short last block, and an all-zero block.
  std::vector<float> x;
  for (float sigma : {1e-6f, 1.f, 3e4f}) {
    const std::vector<float> g = gaussian(tg::kWireBlock, sigma, uint32_t(sigma * 1e6f) + 7);
    x.insert(x.end(), g.begin(), g.end());
  }
  x.insert(x.end(), tg::kWireBlock, 0.f);
  const std::vector<float> tail = gaussian(37, 0.5f, 3);
  x.insert(x.end(), tail.begin(), tail.end());
  const Fp8Wire formats[] = {
      {WireFormat::FP8E4M3, tg::E4M3_MAX, 1.f / 16, 0x1p-9f, tg::f32_to_e4m3, tg::e4m3_to_f32},
      {WireFormat::FP8E5M2, tg::E5M2_MAX, 1.f / 8, 0x1p-16f, tg::f32_to_e5m2, tg::e5m2_to_f32}};
  for (const Fp8Wire& w : formats) {
    INFO(std::string(tg::wire_format_name(w.format)));
    const std::vector<float> y = round_trip(x, w.format);
    for (size_t lo = 0; lo < x.size(); lo += tg::kWireBlock) {
      const size_t hi = std::min(x.size(), lo + tg::kWireBlock);
      float amax = 0;
      for (size_t i = lo; i < hi; i++) amax = std::max(amax, std::fabs(x[i]));
      const float s = tg::fp8_scale_from_amax(amax, w.max, 0), descale = 1.f / s;
      for (size_t i = lo; i < hi; i++) {
        INFO("element " << i << " = " << x[i]);
        const float want = w.value(w.code(x[i] * s, true)) * descale;
        CHECK(same_bits(y[i], want));
        // Within half a mantissa step of the element, or half the format's subnormal step.
        CHECK(std::fabs(y[i] - x[i]) <=
              std::max(std::fabs(x[i]) * w.relative * 1.001f, amax / w.max * w.subnormal * 1.01f));
      }
      if (amax > 0) {  // the block's largest element lands on max x descale, nearly itself
        float ymax = 0;
        for (size_t i = lo; i < hi; i++) ymax = std::max(ymax, std::fabs(y[i]));
        CHECK(ymax == doctest::Approx(amax).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("wire formats: a block holding inf or NaN decodes as NaN, its neighbours intact") {
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> x = gaussian(3 * tg::kWireBlock, 1.f, 5);
    x[tg::kWireBlock + 3] = bad;
    for (WireFormat f : {WireFormat::FP8E4M3, WireFormat::FP8E5M2}) {
      const std::vector<float> y = round_trip(x, f);
      for (size_t i = 0; i < x.size(); i++) {
        const bool in_bad_block = i / tg::kWireBlock == 1;
        INFO("element " << i);
        CHECK(std::isnan(y[i]) == in_bad_block);
      }
    }
  }
}

TEST_CASE("wire formats: a sum over ranks from -0 gives one rank's part back bit for bit") {
  std::vector<float> x = gaussian(300, 1.f, 9);
  x[0] = -0.f;
  x[1] = 0.f;
  for (const tg::WireFormatInfo& r : tg::wire_formats()) {
    std::vector<char> buf(tg::wire_bytes(x.size(), r.format));
    tg::wire_encode(x.data(), x.size(), r.format, buf.data());
    std::vector<float> acc(x.size(), -0.f), once(x.size());
    tg::wire_decode_add(buf.data(), x.size(), r.format, acc.data());
    tg::wire_decode(buf.data(), x.size(), r.format, once.data());
    INFO(std::string(r.name));
    for (size_t i = 0; i < x.size(); i++) CHECK(same_bits(acc[i], once[i]));
    CHECK(std::signbit(acc[0]));
    // Two ranks' parts: their fp32 sum, in rank order.
    tg::wire_decode_add(buf.data(), x.size(), r.format, acc.data());
    for (size_t i = 0; i < x.size(); i++) CHECK(same_bits(acc[i], once[i] + once[i]));
  }
}
