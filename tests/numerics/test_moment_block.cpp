// Tests of the FP8 block encoder of Adam's moments (src/numerics/moment_block.h): what a
// block's scale is (amax, or the power of two above it), the round trip's error bound, the
// block's largest value kept exactly, all-zero blocks, COAT's expansion choosing k and what
// it buys, and the storage layout's sizes.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/numerics/moment_block.h"
#include "src/numerics/state_format.h"

using tg::MomentBlocking;
using tg::MomentExpand;
using tg::MomentFormat;
using tg::MomentScale;
using tg::StateFormat;

namespace {

// One block through the encoder and back.
std::vector<float> round_trip(const std::vector<float>& x, const MomentFormat& f, float* meta) {
  std::vector<uint8_t> q(x.size());
  std::vector<float> y(x.size());
  tg::moment_encode_block(x.data(), int(x.size()), f, q.data(), meta);
  tg::moment_decode_block(q.data(), meta, int(x.size()), f, y.data());
  return y;
}

// The largest relative error of y against x (x has no zeros).
double worst_rel(const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); i++)
    worst = std::max(worst, std::fabs(double(y[i]) - x[i]) / std::fabs(double(x[i])));
  return worst;
}

}  // namespace

TEST_CASE("fp8 moments: a block's scale, its largest value exact, the error of the rest") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (StateFormat sf : {StateFormat::FP8E4M3, StateFormat::FP8E5M2})
    for (bool pow2 : {false, true}) {
      const MomentFormat f = tg::moment_format(
          sf, false, {128, pow2 ? MomentScale::E8M0 : MomentScale::FP32, MomentExpand::None});
      CAPTURE(tg::moment_blocking_name(
          sf, {128, pow2 ? MomentScale::E8M0 : MomentScale::FP32, MomentExpand::None}));
      std::vector<float> x(128);
      // values within 2^6 of the amax: normal in either element format, so the relative
      // error is at most half an ulp of the element (2^-4 in e4m3, 2^-3 in e5m2), plus
      // the fp32 roundings of the scaling (a few 2^-24).
      for (float& v : x) v = u(rng) * 3e-4f;
      for (float& v : x)
        if (std::fabs(v) < 3e-4f / 64) v = 3e-4f / 64;
      x[17] = -4e-4f;  // the amax, negative
      float meta[2];
      const std::vector<float> y = round_trip(x, f, meta);
      const double half_ulp = sf == StateFormat::FP8E4M3 ? 1.0 / 16 : 1.0 / 8;
      CHECK(worst_rel(x, y) <= half_ulp * (1 + 1e-5));
      if (!pow2) {
        CHECK(meta[0] == 4e-4f);  // the amax itself
        CHECK(y[17] == -4e-4f);   // stored as +-fmax: exact
      } else {
        CHECK(meta[0] == 0x1p-11f);  // 4e-4 <= 2^-11 = 4.88e-4 < 2 * 4e-4
      }
      for (size_t i = 0; i < x.size(); i++) CHECK(std::signbit(y[i]) == std::signbit(x[i]));
    }
}

TEST_CASE("fp8 moments: v is stored as sqrt(v); zero blocks and zeros stay zero") {
  const MomentFormat v =
      tg::moment_format(StateFormat::FP8E4M3, true, {16, MomentScale::FP32, MomentExpand::None});
  CHECK(v.sqrt);
  std::vector<float> x(16, 0.f);
  float meta[2] = {-1, -1};
  std::vector<float> y = round_trip(x, v, meta);
  CHECK(meta[0] == 1.f);
  for (float t : y) CHECK(t == 0.f);
  // v spans 2^-20 .. 2^-4: sqrt(v) only 2^-10 .. 2^-2, which e4m3 holds as normals.
  for (int i = 0; i < 16; i++) x[i] = std::ldexp(1.3f, -4 - (i % 17));
  x[3] = 0.f;
  y = round_trip(x, v, meta);
  CHECK(y[3] == 0.f);
  for (int i = 0; i < 16; i++)
    if (x[i] > 0) CHECK(std::fabs(y[i] - x[i]) / x[i] <= 0.13);  // (1 +- 2^-4)^2 - 1
}

TEST_CASE(
    "fp8 moments: COAT's expansion picks the largest k in 4, 2, 1 that keeps the block normal, and "
    "divides the error by it") {
  const MomentBlocking coat{128, MomentScale::FP32, MomentExpand::Coat}, plain{128};
  const MomentFormat fc = tg::moment_format(StateFormat::FP8E4M3, false, coat),
                     fp = tg::moment_format(StateFormat::FP8E4M3, false, plain);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(0.5f, 1.f);
  // A narrow block (max / min < 2): (min / max)^4 * 448 >= 2^-6, so k = 4.
  std::vector<float> narrow(128);
  for (float& v : narrow) v = u(rng) * 1e-3f;
  float mc[2], mp[2];
  const std::vector<float> yc = round_trip(narrow, fc, mc), yp = round_trip(narrow, fp, mp);
  CHECK(mc[1] == 4.f);
  // e4m3's 3 mantissa bits give a relative error up to 2^-4; through the 4th root about a
  // quarter of it.
  CHECK(worst_rel(narrow, yp) > 1.0 / 40);
  CHECK(worst_rel(narrow, yc) <= 1.0 / 16 / 4 * 1.1);
  // A wide block (max / min = 2^12): k = 4 and k = 2 would push the smallest below e4m3's
  // normals; k = 1.
  std::vector<float> wide = narrow;
  wide[5] = 1e-3f * 0x1p-12f;
  round_trip(wide, fc, mc);
  CHECK(mc[1] == 1.f);
  // max / min = 2^5: (2^-5)^2 * 448 = 0.44 >= 2^-6, (2^-5)^4 * 448 < 2^-6: k = 2.
  wide[5] = 1e-3f * 0x1p-5f;
  for (float& v : wide) v = std::max(v, 1e-3f * 0x1p-5f);
  wide[9] = 1e-3f;
  round_trip(wide, fc, mc);
  CHECK(mc[1] == 2.f);
  // A meta word that is not 2 or 4 reads as k = 1 (a damaged file cannot ask for a
  // transform the encoder never makes).
  const float bad[2] = {1.f, 3.f};
  CHECK(tg::moment_meta_load(bad, fc).k == 1);
}

TEST_CASE("fp8 moments: storage layout and sizes") {
  const MomentFormat f =
      tg::moment_format(StateFormat::FP8E4M3, false, {128, MomentScale::FP32, MomentExpand::Coat});
  CHECK(tg::moment_blocks(7920, 128) == 62);
  CHECK(tg::moment_meta_offset(7920) == 7920);
  CHECK(tg::moment_meta_offset(7921) == 7936);
  CHECK(tg::moment_storage_bytes(7920, f) == 7920 + 62 * 2 * 4);
  CHECK(tg::moment_storage_bytes(10, tg::moment_format(StateFormat::FP16, true)) == 20);
  // The last block is short: it is encoded over its own elements.
  std::vector<float> x(130, 0.25f);
  x[129] = 0.5f;
  std::vector<uint8_t> q(130);
  std::vector<float> meta(4);
  tg::moment_encode_blocks(x.data(), x.size(), f, q.data(), meta.data());
  CHECK(meta[0] == 0.25f);
  CHECK(meta[2] == 0.5f);
}
