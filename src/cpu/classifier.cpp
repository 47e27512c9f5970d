// classifier: softmax cross-entropy over the first V of Vp logits per row, fused with its
// gradient. loss = logsumexp(z) - z[target]; when dloss != 0 the row of logits is
// overwritten by dloss * (softmax(z) - onehot(target)), with zeros in the padding, so the
// probabilities never need a buffer of their own.
#include <cmath>

#include "ops.h"

namespace tg::cpu {

template <typename T>
void classifier(T* logits, T* losses, const int32_t* targets, float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T* z = logits + size_t(n) * Vp;
    T maxv = -INFINITY;
    for (int i = 0; i < V; i++) maxv = z[i] > maxv ? z[i] : maxv;
    T sum = 0;
    for (int i = 0; i < V; i++) sum += std::exp(z[i] - maxv);
    int tgt = targets[n];
    T lse = maxv + std::log(sum);
    losses[n] = lse - z[tgt];
    if (dloss != 0) {
      T inv = T(1) / sum;
      for (int i = 0; i < V; i++) {
        T p = std::exp(z[i] - maxv) * inv;
        z[i] = T(dloss) * (p - (i == tgt ? T(1) : T(0)));
      }
      for (int i = V; i < Vp; i++) z[i] = 0;
    }
  }
}

template void classifier<float>(float*, float*, const int32_t*, float, int, int, int);
template void classifier<double>(double*, double*, const int32_t*, float, int, int, int);

}  // namespace tg::cpu
