// gemm_bf16_problem.h: random bf16 GEMM problems and the scope guard of cpu.narrow_gemm's path,
// the hardware paths this CPU has, for the tests of the bf16 kernels (test_gemm_bf16.cpp,
// test_gemm_amx.cpp, test_matmul_fp8.cpp).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "src/numerics/formats.h"

namespace tgt {

// Sets the process-wide path for one scope.
struct NarrowPath {
  explicit NarrowPath(tg::cpu::NarrowGemm g) { tg::cpu::set_narrow_gemm(g); }
  ~NarrowPath() { tg::cpu::set_narrow_gemm(tg::cpu::NarrowGemm::Exact); }
};

// The hardware paths this CPU has: AVX512-BF16, and AMX where the process may use the tiles
// (the path is left exact).
inline std::vector<tg::cpu::NarrowGemm> hardware_paths() {
  using tg::cpu::NarrowGemm;
  std::vector<NarrowGemm> v;
  for (NarrowGemm g : {NarrowGemm::Avx512Bf16, NarrowGemm::AmxBf16}) {
    tg::cpu::set_narrow_gemm(g);
    if (tg::cpu::narrow_gemm() == g) v.push_back(g);
  }
  tg::cpu::set_narrow_gemm(NarrowGemm::Exact);
  if (v.size() < 2) MESSAGE("some paths skipped: this CPU has " << tg::cpu::cpu_isa_summary());
  return v;
}

// vdpbf16ps's fp32 arithmetic: subnormals in and out count as zero.
inline float ftz(float x) { return std::fabs(x) < 0x1p-126f ? 0.0f * x : x; }

struct Problem {
  int M, N, K;
  bool ta, tb;
  float beta;
  std::vector<uint16_t> A, B;
  std::vector<float> C0;
  int lda() const { return ta ? M : K; }
  int ldb() const { return tb ? K : N; }
  float a(int i, int k) const {
    return tg::bf16_to_f32(ta ? A[size_t(k) * M + i] : A[size_t(i) * K + k]);
  }
  float b(int k, int j) const {
    return tg::bf16_to_f32(tb ? B[size_t(j) * K + k] : B[size_t(k) * N + j]);
  }
};

inline Problem random_problem(int M, int N, int K, bool ta, bool tb, float beta, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  Problem p{M, N, K, ta, tb, beta, {}, {}, {}};
  p.A.resize(size_t(M) * K);
  p.B.resize(size_t(K) * N);
  p.C0.resize(size_t(M) * N);
  for (auto& x : p.A) x = tg::f32_to_bf16(nd(rng));
  for (auto& x : p.B) x = tg::f32_to_bf16(nd(rng));
  for (auto& x : p.C0) x = nd(rng);
  return p;
}

inline std::vector<float> run_kernel(const Problem& p) {
  std::vector<float> C = p.C0;
  tg::cpu::gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.A.data(), p.lda(), p.B.data(), p.ldb(), p.beta,
                     C.data(), p.N);
  return C;
}

// Awkward shapes: edges in every blocking dimension of both kernels (AVX512-BF16: MR 8, NR 32,
// KC 256, MC 96, NC 1024; AMX: 32 x 32 micro-tiles, K tiles of 32, KC 256, MC 64, NC 512),
// odd K, K spanning several slices, a single element.
inline const int kShapes[][3] = {{1, 1, 1},      {3, 5, 7},     {9, 33, 17},
                                 {8, 32, 256},   {13, 70, 513}, {200, 41, 300},
                                 {97, 1030, 65}, {17, 19, 1},   {160, 64, 1100}};

// f(p) for a random problem of every shape of kShapes, both transposes of each operand and
// beta 0 and 1 (seeds from `seed` up), with the problem's dimensions captured for a failure.
template <typename F>
void for_each_problem(uint64_t seed, F&& f) {
  for (const auto& s : kShapes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (float beta : {0.0f, 1.0f}) {
          const Problem p = random_problem(s[0], s[1], s[2], ta, tb, beta, seed++);
          CAPTURE(p.M);
          CAPTURE(p.N);
          CAPTURE(p.K);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(beta);
          f(p);
        }
}

}  // namespace tgt
