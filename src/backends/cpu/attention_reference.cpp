// attention_reference: the scalar loops src/backends/cpu/attention.cpp replaced, kept verbatim
// (only the names changed, the lines reflowed and, since the CUDA path stores them in the compute
// type, the scores and dP of the att pair rounded to it) as the bit-for-bit reference that
// attention.cpp checks itself against at first use and its tests compare with. Their compiled
// code (GCC 12, -O3 -march=native) is what the regression fixtures were recorded with. They
// compute causal multi-head self-attention on qkv(B,T,3C) = [q | k | v], head size hs = C/NH,
// scores scaled by 1/sqrt(hs):
//   att[b,h,t,:] = softmax(q_t . k_u * scale for u <= t; 0 for u > t)
//   out[b,t,h]   = sum_u att[b,h,t,u] v_u
// Backward, per (b,h), with P = att and dP = dout . v:
//   dv_u += P[t,u] dout_t;  dS[t,u] = P[t,u] (dP[t,u] - sum_u' P[t,u'] dP[t,u'])
//   dq_t = scale sum_u dS[t,u] k_u;  dk_u += scale dS[t,u] q_t
// Scores, softmax and sums run in the accumulation type; att (kept for the backward pass)
// and the outputs are rounded to T once. The materialised pair (attention_forward_reference,
// attention_backward_reference: the CUDA backend's cuBLAS path) rounds each score q_t . k_u
// * scale and each dP = dout_t . v_u to T too, where the GPU's GEMMs store them (their fp32
// sums rounded once); the lse pair (the cuDNN twin) keeps them in the accumulation
// type, as those kernels do. Both passes parallelise over (b,h): each thread
// widens one head's q, k, v once and accumulates its dq/dk/dv in the accumulation type.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention_store.h"
#include "ops.h"

namespace tg::cpu {

namespace {
// Widens head h of batch row b of qkv into q, k, v (each T x hs, accumulation type), so the
// inner loops read each stored element once.
template <typename T, typename A>
void load_head(const T* qkv, int b, int h, int T_, int C, int hs, A* q, A* k, A* v) {
  for (int t = 0; t < T_; t++) {
    const T* row = qkv + (size_t(b) * T_ + t) * 3 * C + h * hs;
    for (int i = 0; i < hs; i++) {
      q[size_t(t) * hs + i] = ld(row[i]);
      k[size_t(t) * hs + i] = ld(row[C + i]);
      v[size_t(t) * hs + i] = ld(row[2 * C + i]);
    }
  }
}

// Row t of a causal head: s[u] = exp(q_t . k_u * scale - max) for u <= t, each score rounded to
// S first (S = A: not rounded); returns the max and the sum of s (the softmax is s / sum; its
// logsumexp max + log(sum)).
template <typename S, typename A>
void causal_scores(const A* qt, const A* k, int t, int hs, A scale, A* s, A* maxv, A* sum) {
  A m = -INFINITY;
  for (int u = 0; u <= t; u++) {
    const A* ku = k + size_t(u) * hs;
    A dot = 0;
    for (int i = 0; i < hs; i++) dot += qt[i] * ku[i];
    s[u] = round_as<S>(dot * scale);
    if (s[u] > m) m = s[u];
  }
  A total = 0;
  for (int u = 0; u <= t; u++) {
    s[u] = std::exp(s[u] - m);
    total += s[u];
  }
  *maxv = m;
  *sum = total;
}

// One query row of the forward after its causal scores: s[u] = exp(scale q_t.k_u - maxv) for
// u <= t, sum their total. The row's function adds sum_u p_u v_u into o (hs, zeroed), which
// forward_rows then rounds into out.
template <typename A>
struct Row {
  int b, h, t;
  const A* s;
  A maxv, sum;
  const A* v;  // the head's values (T x hs)
  A* o;
};

// row(r) for every (b, h, t), in parallel over (b, h) (each thread widens one head's q, k, v
// once), the scores rounded to S; then out[b,t,h] = o.
template <typename S, typename T, typename F>
void forward_rows(T* out, const T* qkv, int B, int T_, int C, int NH, F&& row) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    std::vector<A> q(size_t(T_) * hs), k(size_t(T_) * hs), v(size_t(T_) * hs), s(T_), o(hs);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        load_head(qkv, b, h, T_, C, hs, q.data(), k.data(), v.data());
        for (int t = 0; t < T_; t++) {
          Row<A> r{b, h, t, s.data(), A(0), A(0), v.data(), o.data()};
          causal_scores<S>(q.data() + size_t(t) * hs, k.data(), t, hs, scale, s.data(), &r.maxv,
                           &r.sum);
          for (int i = 0; i < hs; i++) o[i] = 0;
          row(r);
          T* out_t = out + (size_t(b) * T_ + t) * C + h * hs;
          for (int i = 0; i < hs; i++) out_t[i] = st<T>(o[i]);
        }
      }
  }
}
}  // namespace

template <typename T>
void attention_forward_reference(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  forward_rows<T>(out, qkv, B, T_, C, NH, [&](const Row<A>& r) {
    T* a = att + ((size_t(r.b) * NH + r.h) * T_ + r.t) * T_;
    A inv = A(1) / r.sum;
    for (int u = 0; u <= r.t; u++) {
      A p = r.s[u] * inv;
      a[u] = st<T>(p);
      const A* vu = r.v + size_t(u) * hs;
      for (int i = 0; i < hs; i++) r.o[i] += p * vu[i];
    }
    for (int u = r.t + 1; u < T_; u++) a[u] = st<T>(A(0));
  });
}

template <typename T>
void attention_backward_reference(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_,
                                  int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    const size_t th = size_t(T_) * hs;
    std::vector<A> q(th), k(th), v(th), dq(th), dk(th), dv(th), go(hs), dp(T_), p(T_);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        load_head(qkv, b, h, T_, C, hs, q.data(), k.data(), v.data());
        std::fill(dq.begin(), dq.end(), A(0));
        std::fill(dk.begin(), dk.end(), A(0));
        std::fill(dv.begin(), dv.end(), A(0));
        for (int t = 0; t < T_; t++) {
          const T* a = att + ((size_t(b) * NH + h) * T_ + t) * T_;
          const T* got = dout + (size_t(b) * T_ + t) * C + h * hs;
          for (int i = 0; i < hs; i++) go[i] = ld(got[i]);
          A dot = 0;
          for (int u = 0; u <= t; u++) {
            const A* vu = v.data() + size_t(u) * hs;
            A* dvu = dv.data() + size_t(u) * hs;
            A pu = ld(a[u]), s = 0;
            for (int i = 0; i < hs; i++) {
              s += go[i] * vu[i];
              dvu[i] += pu * go[i];
            }
            p[u] = pu;
            dp[u] = round_as<T>(s);
            dot += pu * dp[u];
          }
          const A* qt = q.data() + size_t(t) * hs;
          A* dqt = dq.data() + size_t(t) * hs;
          for (int u = 0; u <= t; u++) {
            A ds = p[u] * (dp[u] - dot) * scale;
            const A* ku = k.data() + size_t(u) * hs;
            A* dku = dk.data() + size_t(u) * hs;
            for (int i = 0; i < hs; i++) {
              dqt[i] += ds * ku[i];
              dku[i] += ds * qt[i];
            }
          }
        }
        store_head_grads(dqkv, b, h, T_, C, hs, dq.data(), dk.data(), dv.data());
      }
  }
}

template <typename T>
void attention_forward_lse_reference(T* out, acc_t<T>* lse, const T* qkv, int B, int T_, int C,
                                     int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  forward_rows<A>(out, qkv, B, T_, C, NH, [&](const Row<A>& r) {
    const A inv = A(1) / r.sum;
    for (int u = 0; u <= r.t; u++) {
      const A* vu = r.v + size_t(u) * hs;
      for (int i = 0; i < hs; i++) r.o[i] += r.s[u] * inv * vu[i];
    }
    lse[(size_t(r.b) * NH + r.h) * T_ + r.t] = r.maxv + std::log(r.sum);
  });
}

template <typename T>
void attention_backward_lse_reference(T* dqkv, const T* dout, const T* qkv, const T* out,
                                      const acc_t<T>* lse, int B, int T_, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    const size_t th = size_t(T_) * hs;
    std::vector<A> q(th), k(th), v(th), dq(th), dk(th), dv(th), go(hs);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        load_head(qkv, b, h, T_, C, hs, q.data(), k.data(), v.data());
        std::fill(dq.begin(), dq.end(), A(0));
        std::fill(dk.begin(), dk.end(), A(0));
        std::fill(dv.begin(), dv.end(), A(0));
        for (int t = 0; t < T_; t++) {
          const T* got = dout + (size_t(b) * T_ + t) * C + h * hs;
          const T* ot = out + (size_t(b) * T_ + t) * C + h * hs;
          A D = 0;
          for (int i = 0; i < hs; i++) {
            go[i] = ld(got[i]);
            D += go[i] * A(ld(ot[i]));
          }
          const A L = lse[(size_t(b) * NH + h) * T_ + t];
          const A* qt = q.data() + size_t(t) * hs;
          A* dqt = dq.data() + size_t(t) * hs;
          for (int u = 0; u <= t; u++) {
            const A* ku = k.data() + size_t(u) * hs;
            const A* vu = v.data() + size_t(u) * hs;
            A sd = 0, dp = 0;
            for (int i = 0; i < hs; i++) {
              sd += qt[i] * ku[i];
              dp += go[i] * vu[i];
            }
            const A p = std::exp(sd * scale - L), ds = p * (dp - D) * scale;
            A* dku = dk.data() + size_t(u) * hs;
            A* dvu = dv.data() + size_t(u) * hs;
            for (int i = 0; i < hs; i++) {
              dvu[i] += p * go[i];
              dqt[i] += ds * ku[i];
              dku[i] += ds * qt[i];
            }
          }
        }
        store_head_grads(dqkv, b, h, T_, C, hs, dq.data(), dk.data(), dv.data());
      }
  }
}

#define TG_INSTANTIATE(T)                                                                        \
  template void attention_forward_reference<T>(T*, T*, const T*, int, int, int, int);            \
  template void attention_backward_reference<T>(T*, const T*, const T*, const T*, int, int, int, \
                                                int);                                            \
  template void attention_forward_lse_reference<T>(T*, acc_t<T>*, const T*, int, int, int, int); \
  template void attention_backward_lse_reference<T>(T*, const T*, const T*, const T*,            \
                                                    const acc_t<T>*, int, int, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
