// classifier: softmax cross-entropy over the first V of Vp logits per row, fused with its
// gradient. loss = logsumexp(z) - z[target], from the logits in their own type (fp32, or fp64
// in the gradient checks); when dloss != 0 the gradient dloss * (softmax(z) - onehot(target)),
// zeros in the padding, is computed in that type and rounded once into dlogits (G: the logits'
// type in place, or bf16 / fp16 over the first half of each fp32 row, see Backend::
// classifier), so the probabilities never need a buffer of their own.
#include <cmath>
#include <cstring>

#include "ops.h"

namespace tg::cpu {

namespace {
// g[i] = v through memcpy: a store the compiler may not reorder with the fp32 loads of the same
// bytes (a typed 16-bit store could be, strict aliasing telling it the two never overlap).
template <typename G>
inline void put(G* g, int i, G v) {
  std::memcpy(reinterpret_cast<char*>(g) + size_t(i) * sizeof(G), &v, sizeof(G));
}
}  // namespace

template <typename T, typename G>
void classifier(const T* logits, T* losses, const int32_t* targets, G* dlogits, size_t ld,
                float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* z = logits + size_t(n) * Vp;
    T maxv = -INFINITY;
    for (int i = 0; i < V; i++) maxv = z[i] > maxv ? z[i] : maxv;
    T sum = 0;
    for (int i = 0; i < V; i++) sum += std::exp(z[i] - maxv);
    int tgt = targets[n];
    T lse = maxv + std::log(sum);
    losses[n] = lse - z[tgt];
    if (dloss != 0) {
      // dlogits may be this row's own memory: element i (in place, or 2-byte values at byte
      // 2i) lands on logits already read (indices <= i), so ascending order is safe.
      G* g = dlogits + size_t(n) * ld;
      T inv = T(1) / sum;
      for (int i = 0; i < V; i++) {
        T p = std::exp(z[i] - maxv) * inv;
        put(g, i, st<G>(T(dloss) * (p - (i == tgt ? T(1) : T(0)))));
      }
      for (int i = V; i < Vp; i++) put(g, i, st<G>(T(0)));
    }
  }
}

#define TG_INSTANTIATE(T, G) \
  template void classifier<T, G>(const T*, T*, const int32_t*, G*, size_t, float, int, int, int);
TG_INSTANTIATE(float, float)
TG_INSTANTIATE(float, bf16)
TG_INSTANTIATE(float, f16)
TG_INSTANTIATE(double, double)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
