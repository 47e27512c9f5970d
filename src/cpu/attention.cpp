// attention: causal multi-head self-attention on qkv(B,T,3C) = [q | k | v], head size
// hs = C/NH, scores scaled by 1/sqrt(hs):
//   att[b,h,t,:] = softmax(q_t . k_u * scale for u <= t; 0 for u > t)
//   out[b,t,h]   = sum_u att[b,h,t,u] v_u
// Backward, per (b,h), with P = att and dP = dout . v:
//   dv_u += P[t,u] dout_t;  dS[t,u] = P[t,u] (dP[t,u] - sum_u' P[t,u'] dP[t,u'])
//   dq_t = scale sum_u dS[t,u] k_u;  dk_u += scale dS[t,u] q_t
// Scores, softmax and sums run in the accumulation type; att (kept for the backward pass)
// and the outputs are rounded to T once. The forward parallelises over (b,h,t); the
// backward over (b,h), accumulating dq/dk/dv for one head in the accumulation type.
#include <cmath>
#include <vector>

#include "ops.h"

namespace tg::cpu {

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH, C3 = 3 * C;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    std::vector<A> s(T_), o(hs);
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++)
        for (int t = 0; t < T_; t++) {
          const T* q = qkv + (size_t(b) * T_ + t) * C3 + h * hs;
          T* a = att + ((size_t(b) * NH + h) * T_ + t) * T_;
          A maxv = -INFINITY;
          for (int u = 0; u <= t; u++) {
            const T* k = qkv + (size_t(b) * T_ + u) * C3 + C + h * hs;
            A dot = 0;
            for (int i = 0; i < hs; i++) dot += ld(q[i]) * ld(k[i]);
            s[u] = dot * scale;
            if (s[u] > maxv) maxv = s[u];
          }
          A sum = 0;
          for (int u = 0; u <= t; u++) {
            s[u] = std::exp(s[u] - maxv);
            sum += s[u];
          }
          A inv = A(1) / sum;
          for (int i = 0; i < hs; i++) o[i] = 0;
          for (int u = 0; u <= t; u++) {
            A p = s[u] * inv;
            a[u] = st<T>(p);
            const T* v = qkv + (size_t(b) * T_ + u) * C3 + 2 * C + h * hs;
            for (int i = 0; i < hs; i++) o[i] += p * ld(v[i]);
          }
          for (int u = t + 1; u < T_; u++) a[u] = st<T>(A(0));
          T* out_t = out + (size_t(b) * T_ + t) * C + h * hs;
          for (int i = 0; i < hs; i++) out_t[i] = st<T>(o[i]);
        }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH) {
  using A = acc_t<T>;
  const int hs = C / NH, C3 = 3 * C;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    // One head's q/k/v gradients, rows of 3*hs, and one row of dP.
    std::vector<A> g(size_t(T_) * 3 * hs), dp(T_);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        std::fill(g.begin(), g.end(), A(0));
        for (int t = 0; t < T_; t++) {
          const T* a = att + ((size_t(b) * NH + h) * T_ + t) * T_;
          const T* go = dout + (size_t(b) * T_ + t) * C + h * hs;
          const T* q = qkv + (size_t(b) * T_ + t) * C3 + h * hs;
          A* dq = g.data() + size_t(t) * 3 * hs;
          A dot = 0;
          for (int u = 0; u <= t; u++) {
            const T* v = qkv + (size_t(b) * T_ + u) * C3 + 2 * C + h * hs;
            A* dv = g.data() + size_t(u) * 3 * hs + 2 * hs;
            A pu = ld(a[u]), s = 0;
            for (int i = 0; i < hs; i++) {
              A gi = ld(go[i]);
              s += gi * ld(v[i]);
              dv[i] += pu * gi;
            }
            dp[u] = s;
            dot += pu * s;
          }
          for (int u = 0; u <= t; u++) {
            A ds = ld(a[u]) * (dp[u] - dot) * scale;
            const T* k = qkv + (size_t(b) * T_ + u) * C3 + C + h * hs;
            A* dk = g.data() + size_t(u) * 3 * hs + hs;
            for (int i = 0; i < hs; i++) {
              dq[i] += ds * ld(k[i]);
              dk[i] += ds * ld(q[i]);
            }
          }
        }
        for (int t = 0; t < T_; t++) {
          T* d = dqkv + (size_t(b) * T_ + t) * C3 + h * hs;
          const A* gt = g.data() + size_t(t) * 3 * hs;
          for (int i = 0; i < hs; i++) {
            d[i] = st<T>(gt[i]);
            d[C + i] = st<T>(gt[hs + i]);
            d[2 * C + i] = st<T>(gt[2 * hs + i]);
          }
        }
      }
  }
}

#define TG_INSTANTIATE(T)                                                   \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int); \
  template void attention_backward<T>(T*, const T*, const T*, const T*, int, int, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
