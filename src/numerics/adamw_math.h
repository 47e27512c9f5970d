// adamw_math.h: the arithmetic of one AdamW element, run by both backends
// (src/backends/cpu/adamw.cpp over float or double, kernels/adamw.cuh over float):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr * (m / c1 / (sqrt(v / c2) + eps) + wd * w)
// with c1 = 1 - b1^t, c2 = 1 - b2^t computed by the caller.
//
// Every multiply-add is written as the fused one it is, so that no compiler has a choice
// left: g++ and nvcc contract a * b + c into an FMA wherever they may (g++ -O3 -march=native
// does by default in C++), and differently placed contractions round differently. These
// are exactly the three FMAs g++ made of the fp32 loop before this file existed
// (m: fma(b1, m, (1-b1) g); v: fma(b2, v, ((1-b2) g) g); w: fma(-lr, fma(wd, w, q), w)), so
// fp32 training is unchanged bit for bit (tests/test_regression.cpp), and no a * b + c is
// left for a compiler to fuse, so the CUDA kernel computes the CPU's bits
// (tests/cuda/kernels_emulated.cpp). fma() rounds once on every target, with or without
// FMA instructions.
#pragma once
#include <cmath>
#include <cstdint>

#include "formats.h"  // bf16 conversions, TG_HD

namespace tg {

template <typename M>
struct AdamWConsts {
  M b1, b2, c1, c2, lr, eps, wd;
};

TG_HD inline float adamw_fma(float a, float b, float c) { return fmaf(a, b, c); }
TG_HD inline double adamw_fma(double a, double b, double c) { return fma(a, b, c); }
TG_HD inline float adamw_sqrt(float x) { return sqrtf(x); }
TG_HD inline double adamw_sqrt(double x) { return sqrt(x); }

// One element: the gradient g (already multiplied by the gradient factor), the moments m and
// v as fp32 (or fp64) values, the master weight w; all three updated in place.
template <typename M>
TG_HD inline void adamw_math(M g, M& m, M& v, M& w, const AdamWConsts<M>& k) {
  m = adamw_fma(k.b1, m, (M(1) - k.b1) * g);
  v = adamw_fma(k.b2, v, ((M(1) - k.b2) * g) * g);
  const M q = (m / k.c1) / (adamw_sqrt(v / k.c2) + k.eps);
  w = adamw_fma(-k.lr, adamw_fma(k.wd, w, q), w);
}

// Which elements of one AdamW call take weight decay, when the call spans several parameter
// tensors (FP8 moments: GPT::adamw_step updates a whole shard at once so that no scale block
// is cut): [lo[r], hi[r]) relative to the call's first element, r < n. With n = 0 every
// element takes it.
struct DecayRanges {
  static constexpr int kMax = 16;
  int n = 0;
  uint64_t lo[kMax] = {}, hi[kMax] = {};
};
TG_HD inline bool decays_at(const DecayRanges& d, uint64_t i) {
  if (d.n == 0) return true;
  for (int r = 0; r < d.n; r++)
    if (i >= d.lo[r] && i < d.hi[r]) return true;
  return false;
}

// Master weights kept as bf16 compute weights p plus a bf16 compensation c
// (precision.state.master=bf16-kahan, src/numerics/master_format.h). The value is p + c, added
// in fp32 (exact unless c lies more than 16 binades below p, where it no longer matters);
// the store keeps p = bf16(w) to nearest even and c = bf16(w - p), where w - p is exact in
// fp32 (it is the rounding error of w into bf16), so the pair holds w to about 16 bits.
TG_HD inline float kahan_load(uint16_t p, uint16_t c) { return bf16_to_f32(p) + bf16_to_f32(c); }
TG_HD inline void kahan_store(float w, uint16_t& p, uint16_t& c) {
  p = f32_to_bf16(w);
  c = f32_to_bf16(w - bf16_to_f32(p));
}

}  // namespace tg
