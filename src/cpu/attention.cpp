// attention: causal multi-head self-attention on qkv(B,T,3C) = [q | k | v], head size
// hs = C/NH, scores scaled by 1/sqrt(hs):
//   att[b,h,t,:] = softmax(q_t . k_u * scale for u <= t; 0 for u > t)
//   out[b,t,h]   = sum_u att[b,h,t,u] v_u
// Backward, per (b,h), with P = att and dP = dout . v:
//   dv_u += P[t,u] dout_t;  dS[t,u] = P[t,u] (dP[t,u] - sum_u' P[t,u'] dP[t,u'])
//   dq_t = scale sum_u dS[t,u] k_u;  dk_u += scale dS[t,u] q_t
// The forward parallelises over (b,h,t); the backward over (b,h), whose dk/dv sums stay
// inside one thread.
#include <cmath>

#include "ops.h"

namespace tg::cpu {

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T_; t++) {
        const T* q = qkv + (size_t(b) * T_ + t) * C3 + h * hs;
        T* a = att + ((size_t(b) * NH + h) * T_ + t) * T_;
        T maxv = -INFINITY;
        for (int u = 0; u <= t; u++) {
          const T* k = qkv + (size_t(b) * T_ + u) * C3 + C + h * hs;
          T s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          s *= scale;
          a[u] = s;
          if (s > maxv) maxv = s;
        }
        T sum = 0;
        for (int u = 0; u <= t; u++) {
          a[u] = std::exp(a[u] - maxv);
          sum += a[u];
        }
        T inv = T(1) / sum;
        for (int u = 0; u <= t; u++) a[u] *= inv;
        for (int u = t + 1; u < T_; u++) a[u] = 0;
        T* o = out + (size_t(b) * T_ + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int u = 0; u <= t; u++) {
          const T* v = qkv + (size_t(b) * T_ + u) * C3 + 2 * C + h * hs;
          T p = a[u];
          for (int i = 0; i < hs; i++) o[i] += p * v[i];
        }
      }
}

template <typename T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int T_,
                        int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T_; t++) {
        T* d = dqkv + (size_t(b) * T_ + t) * C3 + h * hs;
        for (int i = 0; i < hs; i++) d[i] = d[C + i] = d[2 * C + i] = 0;
      }
      for (int t = 0; t < T_; t++) {
        const T* a = att + ((size_t(b) * NH + h) * T_ + t) * T_;
        T* da = datt + ((size_t(b) * NH + h) * T_ + t) * T_;
        const T* go = dout + (size_t(b) * T_ + t) * C + h * hs;
        const T* q = qkv + (size_t(b) * T_ + t) * C3 + h * hs;
        T* dq = dqkv + (size_t(b) * T_ + t) * C3 + h * hs;
        T dot = 0;
        for (int u = 0; u <= t; u++) {
          const T* v = qkv + (size_t(b) * T_ + u) * C3 + 2 * C + h * hs;
          T* dv = dqkv + (size_t(b) * T_ + u) * C3 + 2 * C + h * hs;
          T s = 0;
          for (int i = 0; i < hs; i++) {
            s += go[i] * v[i];
            dv[i] += a[u] * go[i];
          }
          da[u] = s;
          dot += a[u] * s;
        }
        for (int u = 0; u <= t; u++) {
          T ds = a[u] * (da[u] - dot) * scale;
          const T* k = qkv + (size_t(b) * T_ + u) * C3 + C + h * hs;
          T* dk = dqkv + (size_t(b) * T_ + u) * C3 + C + h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
}

#define TG_INSTANTIATE(T)                                                   \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int); \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
