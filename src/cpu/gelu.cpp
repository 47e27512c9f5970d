// gelu (tanh approximation, as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#include <cmath>

#include "ops.h"

namespace tg::cpu {

namespace {
template <typename T>
constexpr T kGeluScale = T(0.7978845608028654);  // sqrt(2/pi)
}

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    T x = inp[i];
    T cube = T(0.044715) * x * x * x;
    out[i] = T(0.5) * x * (T(1) + std::tanh(kGeluScale<T> * (x + cube)));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    T x = inp[i];
    T cube = T(0.044715) * x * x * x;
    T th = std::tanh(kGeluScale<T> * (x + cube));
    T dth = (T(1) - th * th) * kGeluScale<T> * (T(1) + T(3 * 0.044715) * x * x);
    dinp[i] = (T(0.5) * (T(1) + th) + T(0.5) * x * dth) * dout[i];
  }
}

#define TG_INSTANTIATE(T)                              \
  template void gelu_forward<T>(T*, const T*, size_t); \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
