// gelu (tanh approximation, as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#include <cmath>

#include "ops.h"

namespace tg::cpu {

namespace {
template <typename A>
constexpr A kGeluScale = A(0.7978845608028654);  // sqrt(2/pi)
}

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    A x = ld(inp[i]);
    A cube = A(0.044715) * x * x * x;
    out[i] = st<T>(A(0.5) * x * (A(1) + std::tanh(kGeluScale<A> * (x + cube))));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    A x = ld(inp[i]);
    A cube = A(0.044715) * x * x * x;
    A th = std::tanh(kGeluScale<A> * (x + cube));
    A dth = (A(1) - th * th) * kGeluScale<A> * (A(1) + A(3 * 0.044715) * x * x);
    dinp[i] = st<T>((A(0.5) * (A(1) + th) + A(0.5) * x * dth) * ld(dout[i]));
  }
}

#define TG_INSTANTIATE(T)                              \
  template void gelu_forward<T>(T*, const T*, size_t); \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
