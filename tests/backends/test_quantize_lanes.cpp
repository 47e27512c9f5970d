// test_quantize_lanes.cpp: the AVX-512 lanes of the block quantizer and the Hadamard transform
// (src/backends/cpu/quantize_lanes.cpp) against the scalar loops they replace
// (quantize_dequantize_reference, hadamard_rows_reference), bit for bit: every operand recipe
// of every block-scaled preset, with stochastic rounding and the Hadamard transform on, on
// random and adversarial tensors (partial blocks, odd row lengths, all-zero blocks, fp32
// subnormals, values near fp32's top, NaN and infinities). Without AVX-512 the fast paths are
// the scalar loops and the tests say so.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/quantize_lanes.h"
#include "src/backends/cpu/storage.h"
#include "src/backends/cpu/transpose.h"
#include "src/numerics/formats.h"
#include "src/numerics/recipe.h"

using tg::ElemFormat;
using tg::OperandRecipe;
using tg::RoundMode;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Every distinct operand recipe of the block-scaled presets (all GEMM roles, both operands),
// each also with stochastic rounding, and FP8 E5M2 / E4M3 with it (no preset's, same code).
std::vector<OperandRecipe> preset_operands() {
  std::vector<OperandRecipe> out;
  auto add = [&](OperandRecipe o) {
    for (const OperandRecipe& p : out)
      if (std::memcmp(&p, &o, sizeof o) == 0) return;
    out.push_back(o);
  };
  for (const char* mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"}) {
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, tg::RecipeOptions{});
    for (const tg::GemmRecipe& g : r.gemm)
      for (OperandRecipe o : {g.a, g.b}) {
        o.transform = tg::Transform::None;  // the transform is tested on its own below
        o.transform_size = 0;
        add(o);
        o.rounding = RoundMode::Stochastic;
        add(o);
        if (o.elem == ElemFormat::E4M3) {
          o.elem = ElemFormat::E5M2;
          add(o);
        }
      }
  }
  return out;
}

std::string describe(const OperandRecipe& o) {
  return std::string(tg::elem_format_name(o.elem)) + " g" + std::to_string(int(o.granularity)) +
         " b" + std::to_string(o.block) + " s" + std::to_string(int(o.scale)) +
         (o.rounding == RoundMode::Stochastic ? " SR" : "");
}

// Random and adversarial (rows x cols) tensors, the finite ones first.
std::vector<std::vector<float>> tensors(int rows, int cols, uint64_t seed, bool nonfinite) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::vector<float>> m;
  std::vector<float> x(size_t(rows) * cols);
  for (auto& v : x) v = nd(rng);
  m.push_back(x);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 1000;  // outliers set the scales
  m.push_back(x);
  for (auto& v : x) v = nd(rng) * std::exp2(float(int(rng() % 80)) - 40);  // wide range
  m.push_back(x);
  for (int r = 0; r < rows; r++)  // all-zero blocks beside full ones
    for (int c = 0; c < cols; c++)
      if ((c / 16 + r) % 3 == 0) x[size_t(r) * cols + c] = (c % 2) ? -0.0f : 0.0f;
  m.push_back(x);
  for (auto& v : x) v = nd(rng) * 1e-40f;  // fp32 subnormals
  m.push_back(x);
  for (auto& v : x) v = nd(rng) * 3e37f;  // near fp32's top
  m.push_back(x);
  for (auto& v : x) v = float(int(rng() % 25) - 12) * 0.25f;  // grid points and ties
  m.push_back(x);
  std::fill(x.begin(), x.end(), 0.0f);  // all zero
  m.push_back(x);
  if (nonfinite)
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      for (auto& v : x) v = nd(rng);
      x[x.size() / 3] = bad;
      m.push_back(x);
    }
  return m;
}

int mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  int n = 0;
  for (size_t i = 0; i < got.size(); i++) n += bits(got[i]) != bits(want[i]);
  return n;
}

}  // namespace

TEST_CASE("quantize lanes: every preset operand recipe equals the scalar loops bit for bit") {
  if (!tg::cpu::quantize_lanes_available())
    MESSAGE("no AVX-512 DQ/BW/VL: the fast path is the scalar loop itself");
  tg::cpu::set_parallelism(2, 2);
  const std::vector<OperandRecipe> ops = preset_operands();
  CHECK(ops.size() >= 10);
  int sr_ops = 0;
  for (const OperandRecipe& o : ops) {
    sr_ops += o.rounding == RoundMode::Stochastic;
    // 33 and 77 columns: partial blocks and rows that start at odd element indices.
    for (auto [rows, cols] :
         {std::pair{24, 256}, std::pair{9, 33}, std::pair{130, 77}, std::pair{300, 160}}) {
      int cases = 0;
      for (const auto& x : tensors(rows, cols, uint64_t(rows) * 7 + cols, true)) {
        std::vector<float> want = x, got = x;
        size_t sat_want = 0, sat_got = 0;
        const float fw = tg::cpu::quantize_dequantize_reference(want.data(), rows, cols, o,
                                                                99 + cases, &sat_want);
        const float fg =
            tg::cpu::quantize_dequantize(got.data(), rows, cols, o, 99 + cases, &sat_got);
        CHECK(bits(fw) == bits(fg));
        CHECK(sat_want == sat_got);
        const int bad = mismatches(got, want);
        CHECK_MESSAGE(bad == 0, describe(o) << " " << rows << "x" << cols << " case " << cases
                                            << ": " << bad << " values differ");
        // Without the saturation count, whole rows of blocks take one call into the lanes.
        std::vector<float> fast = x;
        CHECK(bits(tg::cpu::quantize_dequantize(fast.data(), rows, cols, o, 99 + cases)) ==
              bits(fw));
        CHECK_MESSAGE(mismatches(fast, want) == 0,
                      describe(o) << " " << rows << "x" << cols << " case " << cases << " fast");
        cases++;
      }
    }
  }
  CHECK(sr_ops >= 5);
}

TEST_CASE("quantize lanes: the stochastic round trip equals formats.h's encoder and decoder") {
  if (!tg::cpu::quantize_lanes_available()) {
    MESSAGE("no AVX-512 DQ/BW/VL: sr_round_lanes rounds nothing (checked)");
    std::vector<float> x(32, 1.0f);
    CHECK(tg::cpu::sr_round_lanes(x.data(), 32, 1.0f, 1.0f, 1, 0, ElemFormat::E2M1) == 0);
    return;
  }
  // Values of every binade from 2^-149 to 2^127 and past (inf, NaN), both signs, the scale
  // enc = 1 (the format's own range) and others, and every random-bit pattern's extremes.
  std::mt19937_64 rng(3);
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); i++) {
    const uint32_t u = uint32_t(rng());
    x[i] = tg::bits_f32(i % 64 == 5   ? 0x7f800000u | (u & 0x80000000u)
                        : i % 64 == 9 ? 0x7fc00001u | (u & 0x80000000u)
                                      : u);
  }
  for (size_t i = 0; i < x.size(); i += 3) x[i] = std::ldexp(float(int(rng() % 33) - 16), -3);
  for (ElemFormat f : {ElemFormat::E2M1, ElemFormat::E4M3, ElemFormat::E5M2})
    for (float enc : {1.0f, 0.125f, 1024.0f})
      for (uint64_t mixed : {uint64_t(0), uint64_t(12345), ~uint64_t(0)}) {
        const float dec = 1.0f / enc;
        std::vector<float> got = x, want = x;
        const uint64_t idx0 = 2 * mixed % 1000;  // even
        const int done =
            tg::cpu::sr_round_lanes(got.data(), int(got.size()) - 5, enc, dec, mixed, idx0, f);
        CHECK(done == int(got.size()) - 16);  // whole registers only: 4091 -> 4080
        for (int i = 0; i < done; i++) {
          const float v = x[i] * enc;
          const uint32_t rb = tg::quant_sr_bits(mixed, idx0 + uint64_t(i));
          const float r = f == ElemFormat::E2M1   ? tg::e2m1_to_f32(tg::f32_to_e2m1_sr(v, rb))
                          : f == ElemFormat::E4M3 ? tg::e4m3_to_f32(tg::f32_to_e4m3_sr(v, rb))
                                                  : tg::e5m2_to_f32(tg::f32_to_e5m2_sr(v, rb));
          want[i] = r * dec;
        }
        const int bad = mismatches(got, want);
        CHECK_MESSAGE(bad == 0, tg::elem_format_name(f) << " enc " << enc << ": " << bad);
      }
  std::vector<float> odd(32, 1.0f);  // an odd start index is the caller's to peel
  CHECK(tg::cpu::sr_round_lanes(odd.data(), 32, 1.0f, 1.0f, 1, 3, ElemFormat::E2M1) == 0);
}

TEST_CASE("quantize lanes: E2M1's nearest-even round trip equals storage.h's bit for bit") {
  std::vector<float> x(1 << 14);
  const int groups = int(x.size()) / 16;
  if (!tg::cpu::quantize_lanes_available()) {
    std::vector<tg::GroupScale> sg(static_cast<size_t>(groups));
    CHECK(tg::cpu::rne_round_groups_e2m1_lanes(x.data(), groups, 16, sg.data()) == 0);
    return;
  }
  // Random bits (every binade, NaN, inf), every multiple of 1/16 from -8 to 8 (the ties of
  // each step and the saturation), and the values one ulp beside them.
  std::mt19937_64 rng(5);
  for (size_t i = 0; i < x.size(); i++) x[i] = tg::bits_f32(uint32_t(rng()));
  for (int q = -128; q <= 128; q++) {
    const float t = float(q) / 16;
    x[size_t(q + 128) * 3] = t;
    x[size_t(q + 128) * 3 + 1] = std::nextafter(t, 100.0f);
    x[size_t(q + 128) * 3 + 2] = std::nextafter(t, -100.0f);
  }
  x[1000] = INFINITY, x[1001] = -INFINITY, x[1002] = NAN, x[1003] = -0.0f;
  std::vector<tg::GroupScale> sg(static_cast<size_t>(groups));
  for (int j = 0; j < groups; j++)  // the scale 1 for the ties, others elsewhere
    sg[size_t(j)] =
        j < 64 ? tg::GroupScale{1.0f, 1.0f}
               : tg::GroupScale{std::ldexp(1.0f, j % 40 - 20), std::ldexp(1.0f, 20 - j % 40)};
  std::vector<float> got = x, want = x;
  CHECK(tg::cpu::rne_round_groups_e2m1_lanes(got.data(), groups, 16, sg.data()) == groups);
  for (size_t i = 0; i < x.size(); i++) {
    const tg::GroupScale& g = sg[i / 16];
    want[i] = tg::cpu::e2m1_round_trip(x[i] * g.enc) * g.dec;
  }
  CHECK(mismatches(got, want) == 0);
}

TEST_CASE("quantize lanes: stochastic rounding 24 to 48 bits below the format's last digit") {
  // Where the scalar code's 64-bit sum of mantissa and random bits crosses 32 bits (the lanes
  // take its carry from a 32-bit add): magnitudes whose shift is 24..48, for each format, with
  // mantissas near 2^24 so that the rare round-ups past 32 dropped bits happen too.
  if (!tg::cpu::quantize_lanes_available()) return;
  std::mt19937_64 rng(11);
  struct Fmt {
    ElemFormat f;
    int shift0;  // biased fp32 exponent at which the shift is 32
  };
  for (Fmt fm :
       {Fmt{ElemFormat::E2M1, 117}, Fmt{ElemFormat::E4M3, 109}, Fmt{ElemFormat::E5M2, 102}})
    for (uint64_t mixed : {uint64_t(1), uint64_t(987654321)}) {
      std::vector<float> x(1 << 16);
      for (size_t i = 0; i < x.size(); i++) {
        const uint32_t e = uint32_t(fm.shift0 + 8 - int(rng() % 25));  // shifts 24..48
        const uint32_t m = (i % 2) ? 0x7fffffu - uint32_t(rng() % 64) : uint32_t(rng()) & 0x7fffffu;
        x[i] = tg::bits_f32((uint32_t(rng() & 1) << 31) | (e << 23) | m);
      }
      std::vector<float> got = x, want = x;
      const int done =
          tg::cpu::sr_round_lanes(got.data(), int(got.size()), 1.0f, 1.0f, mixed, 0, fm.f);
      CHECK(done == int(got.size()));
      int ups = 0;
      for (int i = 0; i < done; i++) {
        const uint32_t rb = tg::quant_sr_bits(mixed, uint64_t(i));
        want[i] = fm.f == ElemFormat::E2M1   ? tg::e2m1_to_f32(tg::f32_to_e2m1_sr(x[i], rb))
                  : fm.f == ElemFormat::E4M3 ? tg::e4m3_to_f32(tg::f32_to_e4m3_sr(x[i], rb))
                                             : tg::e5m2_to_f32(tg::f32_to_e5m2_sr(x[i], rb));
        ups += want[i] != 0.0f;
      }
      CHECK(ups > 100);  // round-ups happen on both sides of 32 dropped bits
      CHECK_MESSAGE(mismatches(got, want) == 0, tg::elem_format_name(fm.f));
    }
}

TEST_CASE("quantize lanes: the Hadamard transform equals the scalar butterflies bit for bit") {
  if (!tg::cpu::quantize_lanes_available())
    MESSAGE("no AVX-512 DQ/BW/VL: the fast path is the scalar loop itself");
  tg::cpu::set_parallelism(2, 2);
  for (int n : {2, 4, 8, 16, 32, 64, 128})
    for (auto [rows, cols] : {std::pair{8, 256}, std::pair{5, 200}, std::pair{300, 128}})
      for (bool inverse : {false, true}) {
        int cases = 0;
        for (const auto& x : tensors(rows, cols, uint64_t(n) * 31 + cols, true)) {
          std::vector<float> want = x, got = x;
          tg::cpu::hadamard_rows_reference(want.data(), rows, cols, n, 17 + cases, inverse);
          tg::cpu::hadamard_rows(got.data(), rows, cols, n, 17 + cases, inverse);
          const int bad = mismatches(got, want);
          CHECK_MESSAGE(bad == 0, "n " << n << " " << rows << "x" << cols << " inverse " << inverse
                                       << " case " << cases << ": " << bad);
          cases++;
        }
      }
}

TEST_CASE("quantize lanes: the tiled transpose copies every value's bits to its place") {
  tg::cpu::set_parallelism(2, 2);
  std::mt19937_64 rng(8);
  for (auto [rows, cols] : {std::pair{1, 1}, std::pair{7, 9}, std::pair{8, 8}, std::pair{33, 17},
                            std::pair{40, 96}, std::pair{1024, 200}, std::pair{130, 1027}}) {
    std::vector<float> src(size_t(rows) * cols), got(src.size(), -1.0f), want(src.size(), 1.0f);
    for (auto& v : src) v = tg::bits_f32(uint32_t(rng()));  // every pattern, NaN payloads too
    tg::cpu::transpose(got.data(), src.data(), rows, cols);
    tg::cpu::transpose_reference(want.data(), src.data(), rows, cols);
    CHECK_MESSAGE(mismatches(got, want) == 0, rows << "x" << cols);
    CHECK(bits(want[size_t(cols - 1) * rows]) == bits(src[size_t(cols - 1)]));  // (0, c) -> (c, 0)
  }
}

TEST_CASE("quantize lanes: the transpose from bf16 widens every code exactly") {
  tg::cpu::set_parallelism(2, 2);
  std::mt19937_64 rng(9);
  for (auto [rows, cols] : {std::pair{1, 1}, std::pair{7, 9}, std::pair{8, 8}, std::pair{33, 17},
                            std::pair{40, 96}, std::pair{1024, 200}, std::pair{130, 1027}}) {
    std::vector<tg::cpu::bf16> src(size_t(rows) * cols);
    std::vector<float> wide(src.size()), got(src.size(), -1.0f), want(src.size(), 1.0f);
    for (size_t i = 0; i < src.size(); i++) {  // every pattern, NaN payloads too
      src[i] = tg::cpu::bf16{uint16_t(rng())};
      wide[i] = tg::bf16_to_f32(src[i].bits);
    }
    tg::cpu::transpose(got.data(), src.data(), rows, cols);
    tg::cpu::transpose_reference(want.data(), wide.data(), rows, cols);
    CHECK_MESSAGE(mismatches(got, want) == 0, rows << "x" << cols);
  }
}

TEST_CASE("quantize lanes: the quantizer's bf16 copy is the converted result, bit for bit") {
  tg::cpu::set_parallelism(2, 2);
  for (const OperandRecipe& o : preset_operands())
    for (auto [rows, cols] : {std::pair{9, 33}, std::pair{130, 77}, std::pair{300, 160}}) {
      int cases = 0;
      for (const auto& x : tensors(rows, cols, uint64_t(rows) * 5 + cols, true)) {
        std::vector<float> want = x, got = x, codes = x, codes_want = x;
        std::vector<tg::cpu::bf16> narrow(x.size(), tg::cpu::bf16{0x1234}), conv(x.size());
        const float fw = tg::cpu::quantize_dequantize(want.data(), rows, cols, o, 3 + cases);
        const float fg = tg::cpu::quantize_dequantize_narrow(got.data(), narrow.data(), rows, cols,
                                                             o, 3 + cases);
        CHECK(bits(fw) == bits(fg));
        CHECK(mismatches(got, want) == 0);
        tg::cpu::convert(conv.data(), want.data(), want.size(), tg::Rounding{});
        int bad = 0;
        for (size_t i = 0; i < x.size(); i++) bad += narrow[i].bits != conv[i].bits;
        CHECK_MESSAGE(bad == 0, describe(o) << " " << rows << "x" << cols << " case " << cases);
        std::vector<float> dw, dg;  // the codes' copy likewise
        tg::cpu::quantize_to_codes(codes_want.data(), rows, cols, o, 3 + cases, &dw);
        tg::cpu::quantize_to_codes(codes.data(), rows, cols, o, 3 + cases, &dg, narrow.data());
        CHECK(mismatches(codes, codes_want) == 0);
        CHECK(dw == dg);
        tg::cpu::convert(conv.data(), codes_want.data(), codes_want.size(), tg::Rounding{});
        bad = 0;
        for (size_t i = 0; i < x.size(); i++) bad += narrow[i].bits != conv[i].bits;
        CHECK_MESSAGE(bad == 0, describe(o)
                                    << " codes " << rows << "x" << cols << " case " << cases);
        cases++;
      }
    }
}

TEST_CASE("quantize lanes: NVFP4 block scales at every UE4M3 code and midpoint match group_scale") {
  // One 16-value block per row, its amax sweeping UE4M3's codes and the midpoints between
  // them (ties), subnormal codes included; a row of 448 fixes the tensor scale to 6 / 1.
  const tg::QuantRecipe r = tg::block_scaled_recipe("nvfp4", tg::RecipeOptions{});
  OperandRecipe o = r.gemm[tg::kForward].a;
  o.granularity = tg::Granularity::Block;
  o.block = 16;
  std::vector<float> amaxes;
  for (int code = 0; code < 0x7f; code++) {
    const float v = tg::ue4m3_to_f32(uint8_t(code)), next = tg::ue4m3_to_f32(uint8_t(code + 1));
    amaxes.push_back(v);
    amaxes.push_back(0.5f * (v + next));
    amaxes.push_back(std::nextafter(0.5f * (v + next), 0.0f));
  }
  for (float scale : {1.0f, 0.37f, 1e-30f}) {  // exact ties; rounded; a clamped tensor scale
    const int cols = 48, rows = int(amaxes.size()) + 1;
    std::vector<float> x(size_t(rows) * cols, 0.0f);
    x[0] = 448.0f * scale;
    for (size_t i = 0; i < amaxes.size(); i++)
      for (int c = 0; c < cols; c++)
        x[(i + 1) * cols + c] = amaxes[i] * scale * (c % 16 == 5 ? -1.0f : float(c % 16) / 16);
    std::vector<float> want = x, got = x;
    tg::cpu::quantize_dequantize_reference(want.data(), rows, cols, o, 1);
    tg::cpu::quantize_dequantize(got.data(), rows, cols, o, 1);
    CHECK(mismatches(got, want) == 0);
  }
}

TEST_CASE("quantize lanes: MX block scales at every fp32 exponent match group_scale") {
  // One 32-value block per row, its amax 2^e x {1, 1.5, just below 2} for every fp32 exponent
  // (subnormals and fp32's largest included), for both scale rules and element formats.
  std::vector<float> amaxes;
  for (int e = -149; e <= 127; e++)
    for (float m : {1.0f, 1.5f, std::nextafter(2.0f, 0.0f)}) {
      const float v = std::ldexp(m, e);
      if (v > 0 && std::isfinite(v)) amaxes.push_back(v);
    }
  const int cols = 64, rows = int(amaxes.size());
  std::vector<float> x(size_t(rows) * cols, 0.0f);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      x[size_t(r) * cols + c] = amaxes[size_t(r)] * (c % 32 == 7 ? -1.0f : float(c % 32) / 32);
  for (const char* mode : {"mxfp8", "mxfp4"})
    for (tg::ScaleRule rule : {tg::ScaleRule::Ocp, tg::ScaleRule::Ceil}) {
      CAPTURE(mode);
      OperandRecipe o = tg::block_scaled_recipe(mode, tg::RecipeOptions{}).gemm[tg::kForward].a;
      o.scale_rule = rule;
      std::vector<float> want = x, got = x;
      tg::cpu::quantize_dequantize_reference(want.data(), rows, cols, o, 1);
      tg::cpu::quantize_dequantize(got.data(), rows, cols, o, 1);
      CHECK(mismatches(got, want) == 0);
    }
}
