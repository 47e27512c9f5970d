// residual: out = a + b, rounded once into T. (The backward is the identity: the model adds
// the gradient into both branches itself.)
#include <omp.h>

#include "ops.h"

namespace tg::cpu {

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = st<T>(ld(a[i]) + ld(b[i]));
}

template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void residual_forward<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void residual_forward<f16>(f16*, const f16*, const f16*, size_t);

}  // namespace tg::cpu
