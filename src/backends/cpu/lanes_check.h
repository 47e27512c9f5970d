// lanes_check.h: the first-use check of a vectorised twin of a libm function (exp_fp32.cpp,
// tanh_fp32.cpp): both run on a fixed sample, and the lanes are used only if every bit agrees.
// The sample reaches a function's special cases on either sign: `2 half` values, the first half
// |x| up to `span` in even steps, the second 1..2 times 2^0, 2^-2, ..., 2^-126.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

namespace tg::cpu {

inline bool lanes_match(void (*lanes)(float*, size_t), void (*library)(float*, size_t), int half,
                        float span) {
  std::vector<float> got(size_t(2) * half);
  for (int i = 0; i < 2 * half; i++) {
    const float m = float(i % half) / float(half);
    const float v = i < half ? m * span : std::ldexp(1.f + m, -(i % 64) * 2);
    got[i] = i % 2 ? -v : v;
  }
  std::vector<float> want = got;
  lanes(got.data(), got.size());
  library(want.data(), want.size());
  return std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
}

}  // namespace tg::cpu
