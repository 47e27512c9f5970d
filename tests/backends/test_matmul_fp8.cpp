// test_matmul_fp8.cpp: the fp8 mode's linears with inp and W quantized as the bf16 GEMMs pack
// them (matmul_forward_fp8 / matmul_backward_fp8, gemm_bf16.h's PackQuant) against the same
// GEMMs on the codes quantize_tensor_fp8 writes, bit for bit: on every hardware path of
// cpu.narrow_gemm this CPU has, for 1 and 2 parts, on shapes with partial micro-tiles, several
// K slices and column blocks; the amaxes they report; and a non-finite value, which must leave
// dW as it was and be reported.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gemm_bf16_problem.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "src/backends/cpu/ops.h"
#include "src/backends/cpu/parallel.h"
#include "src/numerics/formats.h"

using tg::ElemFormat;
using tg::cpu::bf16;
using tg::cpu::NarrowGemm;
using tg::cpu::PackQuant;
using tgt::hardware_paths;

namespace {

// bf16 values over a wide range of binades (some below E4M3's subnormals at the scales used,
// some past its largest value).
std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<bf16> x(n);
  for (bf16& v : x) v = bf16{tg::f32_to_bf16(nd(rng) * std::ldexp(1.0f, int(rng() % 24) - 14))};
  return x;
}

std::vector<bf16> codes_of(const std::vector<bf16>& x, float s, ElemFormat f) {
  std::vector<bf16> c(x.size());
  float amax = 0;
  tg::cpu::quantize_tensor_fp8(c.data(), x.data(), x.size(), {s, false, 0, f}, &amax);
  return c;
}

uint32_t amax_bits(const std::vector<bf16>& x) {
  uint32_t m = 0;
  for (bf16 v : x) m = std::max(m, uint32_t(v.bits & 0x7fffu) << 16);
  return m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); i++)
    if (tg::f32_bits(a[i]) != tg::f32_bits(b[i])) return false;
  return a.size() == b.size();
}

struct Shape {
  int N, C, OC;
};

void check_shape(const Shape& sh) {
  const int N = sh.N, C = sh.C, OC = sh.OC;
  const float si = 3.0f, sw = 40.0f, sg = 1000.0f;
  const std::vector<bf16> inp = random_bf16(size_t(N) * C, 1), w = random_bf16(size_t(OC) * C, 2);
  const std::vector<bf16> g = codes_of(random_bf16(size_t(N) * OC, 3), sg, ElemFormat::E5M2);
  const std::vector<bf16> ci = codes_of(inp, si, ElemFormat::E4M3);
  const std::vector<bf16> cw = codes_of(w, sw, ElemFormat::E4M3);
  std::vector<float> bias(static_cast<size_t>(OC));
  for (int j = 0; j < OC; j++) bias[size_t(j)] = 0.01f * float(j % 7);
  const float scale = (1.0f / si) * (1.0f / sw);
  // Forward.
  std::vector<float> want(size_t(N) * OC), got(size_t(N) * OC);
  tg::cpu::matmul_forward_bf16(want.data(), ci.data(), cw.data(), bias.data(), scale, N, C, OC);
  PackQuant pi{si, ElemFormat::E4M3}, pw{sw, ElemFormat::E4M3};
  tg::cpu::matmul_forward_fp8(got.data(), inp.data(), w.data(), bias.data(), scale, N, C, OC, &pi,
                              &pw);
  CHECK(same_bits(got, want));
  CHECK(pi.amax_bits == amax_bits(inp));
  CHECK(pw.amax_bits == amax_bits(w));
  // Backward, dW accumulating onto what it held, at a scale other than 1 and at 1 (inp's codes
  // passed in then).
  for (float dw_scale : {(1.0f / sg) * (1.0f / si), 1.0f}) {
    std::vector<float> di_want(size_t(N) * C), di_got(size_t(N) * C);
    std::vector<float> dw_want(size_t(OC) * C, 0.25f), dw_got(size_t(OC) * C, 0.25f);
    const float dinp_scale = (1.0f / sg) * (1.0f / sw);
    tg::cpu::matmul_backward_bf16(di_want.data(), dw_want.data(), g.data(), ci.data(), cw.data(), N,
                                  C, OC, dinp_scale, dw_scale);
    PackQuant bi{si, ElemFormat::E4M3}, bw{sw, ElemFormat::E4M3};
    const bool packed_inp = dw_scale != 1.0f;
    tg::cpu::matmul_backward_fp8(di_got.data(), dw_got.data(), g.data(),
                                 packed_inp ? inp.data() : ci.data(), w.data(), N, C, OC,
                                 dinp_scale, dw_scale, packed_inp ? &bi : nullptr, &bw);
    CHECK(same_bits(di_got, di_want));
    CHECK(same_bits(dw_got, dw_want));
    CHECK(bw.amax_bits == amax_bits(w));
    if (packed_inp) CHECK(bi.amax_bits == amax_bits(inp));
  }
}

}  // namespace

TEST_CASE("matmul fp8: operands quantized as packed give the codes' products bit for bit") {
  const std::vector<NarrowGemm> paths = hardware_paths();
  for (NarrowGemm path : paths)
    for (int parts : {1, 2})
      for (Shape sh : {Shape{70, 600, 530}, Shape{33, 64, 48}, Shape{128, 1030, 96}}) {
        CAPTURE(tg::cpu::narrow_gemm_name(path));
        CAPTURE(parts);
        CAPTURE(sh.N);
        CAPTURE(sh.C);
        tgt::NarrowPath guard(path);
        tg::cpu::set_parallelism(parts, parts);
        check_shape(sh);
      }
  tg::cpu::set_parallelism(2, 2);
  if (paths.empty()) MESSAGE("no bf16 GEMM hardware: nothing to compare");
}

TEST_CASE("matmul fp8: a non-finite operand is reported and leaves dW as it was") {
  const int N = 40, C = 72, OC = 56;
  for (NarrowGemm path : hardware_paths()) {
    CAPTURE(tg::cpu::narrow_gemm_name(path));
    tgt::NarrowPath guard(path);
    tg::cpu::set_parallelism(2, 2);
    std::vector<bf16> inp = random_bf16(size_t(N) * C, 4), w = random_bf16(size_t(OC) * C, 5);
    const std::vector<bf16> g = codes_of(random_bf16(size_t(N) * OC, 6), 10.0f, ElemFormat::E5M2);
    inp[size_t(N) * C - 3] = bf16{0x7f80};  // +inf, in the last row
    w[7] = bf16{0xffc1};                    // a NaN
    std::vector<float> out(size_t(N) * OC), di(size_t(N) * C), dw(size_t(OC) * C, 0.5f);
    PackQuant pi{2.0f, ElemFormat::E4M3}, pw{2.0f, ElemFormat::E4M3};
    tg::cpu::matmul_forward_fp8(out.data(), inp.data(), w.data(), nullptr, 0.25f, N, C, OC, &pi,
                                &pw);
    CHECK(pi.amax_bits >= 0x7f800000u);
    CHECK(pw.amax_bits >= 0x7f800000u);
    PackQuant bi{2.0f, ElemFormat::E4M3}, bw{2.0f, ElemFormat::E4M3};
    tg::cpu::matmul_backward_fp8(di.data(), dw.data(), g.data(), inp.data(), w.data(), N, C, OC,
                                 0.5f, 0.5f, &bi, &bw);
    CHECK(bi.amax_bits >= 0x7f800000u);
    CHECK(bw.amax_bits >= 0x7f800000u);
    int changed = 0;
    for (float v : dw) changed += tg::f32_bits(v) != tg::f32_bits(0.5f);
    CHECK(changed == 0);
  }
  tg::cpu::set_parallelism(2, 2);
}

TEST_CASE("linear fp8: the packed linears equal the codes' GEMMs, non-finite values included") {
  const int N = 48, C = 80, OC = 64;
  const tg::cpu::TensorQuant qa{4.0f, false, 0, ElemFormat::E4M3},
      qb{30.0f, false, 0, ElemFormat::E4M3};
  const std::vector<bf16> g = codes_of(random_bf16(size_t(N) * OC, 9), 100.0f, ElemFormat::E5M2);
  for (NarrowGemm path : hardware_paths())
    for (int spoilt : {0, 1, 2}) {         // nothing, the input (+inf), the weight (NaN)
      for (float inv_g : {0.01f, 4.0f}) {  // 4 / s_a = 1: dW's GEMM accumulates in place
        CAPTURE(tg::cpu::narrow_gemm_name(path));
        CAPTURE(spoilt);
        CAPTURE(inv_g);
        tgt::NarrowPath guard(path);
        tg::cpu::set_parallelism(2, 2);
        std::vector<bf16> inp = random_bf16(size_t(N) * C, 7), w = random_bf16(size_t(OC) * C, 8);
        if (spoilt == 1) inp[100] = bf16{0x7f80};
        if (spoilt == 2) w[5] = bf16{0x7fc1};
        const std::vector<bf16> ci = codes_of(inp, qa.scale, qa.format);
        const std::vector<bf16> cw = codes_of(w, qb.scale, qb.format);
        std::vector<float> want(size_t(N) * OC), got(size_t(N) * OC);
        tg::cpu::matmul_forward_bf16(want.data(), ci.data(), cw.data(), nullptr,
                                     (1.0f / qa.scale) * (1.0f / qb.scale), N, C, OC);
        float amax_a = 0, amax_b = 0;
        const bool ok = tg::cpu::linear_forward_fp8(got.data(), inp.data(), w.data(), nullptr, N, C,
                                                    OC, qa, qb, &amax_a, &amax_b);
        CHECK(ok == (spoilt == 0));
        if (ok) CHECK(same_bits(got, want));
        if (ok) CHECK(tg::f32_bits(amax_a) == amax_bits(inp));
        std::vector<float> di_want(size_t(N) * C), di_got(size_t(N) * C);
        std::vector<float> dw_want(size_t(OC) * C, 0.125f), dw_got(size_t(OC) * C, 0.125f);
        tg::cpu::matmul_backward_bf16(di_want.data(), dw_want.data(), g.data(), ci.data(),
                                      cw.data(), N, C, OC, inv_g * (1.0f / qb.scale),
                                      inv_g * (1.0f / qa.scale));
        std::vector<bf16> scratch_a, scratch_b;
        const float dinp_scale =
            tg::cpu::linear_backward_fp8(di_got.data(), dw_got.data(), g.data(), inv_g, inp.data(),
                                         w.data(), N, C, OC, qa, qb, scratch_a, scratch_b);
        CHECK(dinp_scale == inv_g * (1.0f / qb.scale));
        for (float& v : di_got) v *= dinp_scale;  // what the caller does
        CHECK(same_bits(di_got, di_want));
        CHECK(same_bits(dw_got, dw_want));
      }
    }
  tg::cpu::set_parallelism(2, 2);
}
