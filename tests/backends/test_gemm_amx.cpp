// test_gemm_amx.cpp: the AMX-BF16 path of cpu.narrow_gemm (src/backends/cpu/gemm_amx.cpp) bit for
// bit against a scalar loop in TDPBF16PS's order as measured (gemm_amx.h): K in tiles of 32,
// per tile an even-k and an odd-k chain of fused multiply-adds from +0, c = c + (e + o), with
// subnormals flushed; the chunked GEMM, the linears' independence of the thread count, the
// dispatch. Cases that need AMX say so and skip on CPUs (or kernels) without it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/gemm_amx.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "tests/backends/gemm_bf16_problem.h"

using tg::cpu::NarrowGemm;
using tgt::ftz, tgt::Problem;

namespace {

bool have_amx() {
  const bool on = tg::cpu::amx_tiles_granted();
  if (!on)
    MESSAGE("skipped: no AMX-BF16 tiles for this process (" << tg::cpu::cpu_isa_summary() << ")");
  return on;
}

// TDPBF16PS's order over a K from k0 of length kc (zero-padded to tiles of 32), from c.
float tiles_dot(const Problem& p, int i, int j, int k0, int kc, float c) {
  c = ftz(c);
  for (int t = k0; t < k0 + kc; t += 32) {
    float e = 0.0f, o = 0.0f;
    for (int k = t; k < std::min(t + 32, k0 + kc); k += 2) {
      e = ftz(std::fmaf(ftz(p.a(i, k)), ftz(p.b(k, j)), e));
      if (k + 1 < k0 + kc) o = ftz(std::fmaf(ftz(p.a(i, k + 1)), ftz(p.b(k + 1, j)), o));
    }
    c = ftz(c + ftz(e + o));
  }
  return c;
}

// Mismatches of gemm_bf16 on the AMX path against tiles_dot over the whole K.
int mismatches(const Problem& p) {
  tgt::NarrowPath np(NarrowGemm::AmxBf16);
  const std::vector<float> C = tgt::run_kernel(p);
  int bad = 0;
  for (int i = 0; i < p.M; i++)
    for (int j = 0; j < p.N; j++) {
      const float c0 = p.beta == 0 ? 0.0f : p.C0[size_t(i) * p.N + j];
      const float want = tiles_dot(p, i, j, 0, p.K, c0), got = C[size_t(i) * p.N + j];
      bad += std::memcmp(&want, &got, 4) != 0;
    }
  return bad;
}

}  // namespace

TEST_CASE("gemm_amx: bit-identical to a scalar loop in TDPBF16PS's order") {
  if (!have_amx()) return;
  tgt::for_each_problem(1, [](const Problem& p) { CHECK(mismatches(p) == 0); });
}

TEST_CASE("gemm_amx: subnormal operands, products and sums flushed as TDPBF16PS does") {
  if (!have_amx()) return;
  // Values around 2^-64 make products and sums near 2^-126; some operands and C subnormal.
  Problem p = tgt::random_problem(37, 45, 70, false, true, 1.0f, 77);
  std::mt19937_64 rng(78);
  std::uniform_int_distribution<int> ex(-70, -58), pick(0, 9);
  auto tiny = [&](uint16_t& x) {
    const float v = std::ldexp(tg::bf16_to_f32(x), pick(rng) == 0 ? -128 : ex(rng));
    x = tg::f32_to_bf16(v);
  };
  for (auto& x : p.A) tiny(x);
  for (auto& x : p.B) tiny(x);
  for (auto& c : p.C0) c = std::ldexp(c, pick(rng) < 3 ? -128 : -125);
  CHECK(mismatches(p) == 0);
  // and the order differs from gemm_bf16.h's (vdpbf16ps): a product below 2^-126 is flushed
  // before it is added, not kept.
  const uint16_t a[2] = {0x8080, 0}, b[2] = {0x3f00, 0};  // -2^-126 x 0.5 = -2^-127
  float c = 0x1.8p-126f;
  {
    tgt::NarrowPath np(NarrowGemm::AmxBf16);
    tg::cpu::gemm_bf16(false, false, 1, 1, 2, a, 2, b, 1, 1.0f, &c, 1);
  }
  CHECK(c == 0x1.8p-126f);  // vdpbf16ps: 2^-126
}

TEST_CASE("gemm_amx: chunks and linears as on the AVX512-BF16 path, in the tiles' order") {
  if (!have_amx()) return;
  // Each chunk of gemm_bf16_chunks is its own tiles from the chunk's start (chunk 16: half a
  // tile, nvfp4's; 48: a tile and a half), scaled into C.
  for (int chunk : {16, 48, 128}) {
    const int M = 45, N = 37, K = 200, nch = (K + chunk - 1) / chunk;
    CAPTURE(chunk);
    const Problem p = tgt::random_problem(M, N, K, false, true, 0.0f, 90 + chunk);
    std::vector<float> sa(size_t(M) * nch), sb(size_t(N) * nch), C(size_t(M) * N);
    for (size_t i = 0; i < sa.size(); i++) sa[i] = std::ldexp(1.0f + i % 7, int(i % 5) - 2);
    for (size_t i = 0; i < sb.size(); i++) sb[i] = std::ldexp(1.0f + i % 3, -int(i % 4));
    {
      tgt::NarrowPath np(NarrowGemm::AmxBf16);
      tg::cpu::gemm_bf16_chunks(M, N, K, chunk, p.A.data(), K, p.B.data(), K, sa.data(), sb.data(),
                                C.data(), N);
    }
    int bad = 0;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float want = 0.0f;
        for (int c = 0; c < nch; c++) {
          const int k0 = c * chunk, kc = std::min(chunk, K - k0);
          const float f = sa[size_t(i) * nch + c] * sb[size_t(j) * nch + c];
          const float part = tiles_dot(p, i, j, k0, kc, 0.0f);
          want = c == 0 ? part * f : std::fmaf(part, f, want);
        }
        bad += want != C[size_t(i) * N + j];
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("narrow gemm dispatch: auto takes AMX where the CPU has it, named paths fall back") {
  tg::cpu::CpuFeatures amx;
  amx.avx512f = amx.avx512bw = amx.avx512vl = amx.avx512_bf16 = true;
  amx.amx_tile = amx.amx_bf16 = true;
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::Auto, false, amx) ==
        NarrowGemm::AmxBf16);
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::Avx512Bf16, false, amx) ==
        NarrowGemm::Avx512Bf16);
  CHECK(tg::cpu::choose_narrow_gemm(tg::NarrowGemmRequest::AmxBf16, true, amx) ==
        NarrowGemm::Exact);  // loops
  CHECK(std::string(tg::cpu::narrow_gemm_name(NarrowGemm::AmxBf16)) == "amx_bf16");
  // AMX asked for without the tiles' permission: AVX512-BF16 where present, else exact.
  tg::cpu::set_narrow_gemm(NarrowGemm::AmxBf16);
  const tg::cpu::CpuFeatures& f = tg::cpu::cpu_features();
  const NarrowGemm want = tg::cpu::amx_tiles_granted()  ? NarrowGemm::AmxBf16
                          : f.avx512_bf16 && f.avx512bw ? NarrowGemm::Avx512Bf16
                                                        : NarrowGemm::Exact;
  CHECK(tg::cpu::narrow_gemm() == want);
  tg::cpu::set_narrow_gemm(NarrowGemm::Exact);
}
