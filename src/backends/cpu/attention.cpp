// attention: causal multi-head self-attention on qkv(B,T,3C) = [q | k | v], head size
// hs = C/NH, scores scaled by 1/sqrt(hs):
//   att[b,h,t,:] = softmax(q_t . k_u * scale for u <= t; 0 for u > t)
//   out[b,t,h]   = sum_u att[b,h,t,u] v_u
// Backward, per (b,h), with P = att and dP = dout . v:
//   dv_u += P[t,u] dout_t;  dS[t,u] = P[t,u] (dP[t,u] - sum_u' P[t,u'] dP[t,u'])
//   dq_t = scale sum_u dS[t,u] k_u;  dk_u += scale dS[t,u] q_t
// Scores, softmax and sums run in the accumulation type; att (kept for the backward pass)
// and the outputs are rounded to T once, and so, in attention_forward / attention_backward (the
// twin of the CUDA backend's cuBLAS path, whose GEMMs store them in T), each score and dP. Both
// passes parallelise over (b,h): each thread
// widens one head's q, k, v once and accumulates its dq/dk/dv in the accumulation type.
//
// Speed without new bits. The results equal the scalar loops this file replaced, kept verbatim
// in attention_reference.cpp, bit for bit, and must: the regression fixtures are those loops'
// training losses. Their cost was serial: each dot product q_t . k_u and dout_t . v_u is a sum
// over i that no compiler may reorder, and the row updates (o += p v_u, dq_t += ds k_u) went
// through memory. Here:
//  - one row's dot products run side by side, lanes across the keys u, over k and v transposed
//    (hs x T), each lane summing over i in the scalar order (dots_across);
//  - the weighted sums of rows (out_t, dq_t, and each key's dv_u and dk_u, summed over the query
//    rows t from stored P and dS) keep their accumulators in registers, in the scalar order for
//    every element (accumulate_rows);
//  - the fp32 softmax's exp runs in lanes with glibc's expf bits (exp_fp32.h).
// Sums over u (the softmax total, P . dP) and the max stay in u order, as in the reference.
// So that every rounding is the reference's, this file is compiled with -ffp-contract=off
// (Makefile) and spells out each fused multiply-add the reference's compiled code makes (GCC 12,
// -O3 -march=native, AVX-512): the row updates are fused; a serial dot over n elements is
// vectorised by GCC as in-order sums of rounded products over whole 32-byte groups (16 then 8
// floats, 8 then 4 doubles) with the remaining n mod 8 (mod 4) terms fused (unfused_terms); P . dP
// is unfused; the lse twin's exp argument s scale - L is fused. At first use the lanes are compared
// with the reference on a fixed sample for each element type and not used if one bit differs (a
// compiler that rounds the reference otherwise); tests/precision/test_precision.cpp compares the
// two on many shapes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention_store.h"
#include "exp_fp32.h"
#include "ops.h"

#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define TG_ATTENTION_LANES 1
// GCC 12 warns on its own _mm512_undefined_* (self-initialised) in the intrinsics that use it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace tg::cpu {

#ifdef TG_ATTENTION_LANES
namespace {

// The lanes: AVX-512F registers of 16 floats or 8 doubles, plain and masked loads and stores, the
// two ways the reference rounds a multiply-add.
template <typename A>
struct Lanes;
template <>
struct Lanes<float> {
  using V = __m512;
  using M = __mmask16;
  static constexpr int n = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul_add(V a, V b, V c) { return _mm512_add_ps(c, _mm512_mul_ps(a, b)); }  // 2 roundings
  static M first(int k) { return M((1u << k) - 1); }
};
template <>
struct Lanes<double> {
  using V = __m512d;
  using M = __mmask8;
  static constexpr int n = 8;
  static V set1(double x) { return _mm512_set1_pd(x); }
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static V load(const double* p, M m) { return _mm512_maskz_loadu_pd(m, p); }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static void store(double* p, V v, M m) { _mm512_mask_storeu_pd(p, m, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V mul_add(V a, V b, V c) { return _mm512_add_pd(c, _mm512_mul_pd(a, b)); }
  static M first(int k) { return M((1u << k) - 1); }
};

// How many leading terms of a reference dot over n elements are rounded products added in order
// (the vectorised part, whole 32-byte groups); the terms after those are fused.
template <typename A>
int unfused_terms(int n) {
  constexpr int group = 32 / int(sizeof(A));
  return n / group * group;
}

// a . b summed in order, rounded as the reference's dot over n elements.
template <typename A>
A dot_ordered(const A* a, const A* b, int n) {
  const int m = unfused_terms<A>(n);
  A s = 0;
  for (int i = 0; i < m; i++) s = s + a[i] * b[i];
  for (int i = m; i < n; i++) s = std::fma(a[i], b[i], s);
  return s;
}

// R registers of lanes of dot_ordered(x, column u of mt), u = 0..R n - 1, where mt is hs x ld
// (row i at mt + i ld): one accumulator per lane, kept in registers, summing in i order.
template <typename A, int R>
void dots_block(const A* x, const A* mt, size_t ld, int hs, A* out) {
  using L = Lanes<A>;
  const int m = unfused_terms<A>(hs);
  typename L::V acc[R];
  for (int j = 0; j < R; j++) acc[j] = L::zero();
  for (int i = 0; i < m; i++) {
    const typename L::V xi = L::set1(x[i]);
    const A* r = mt + size_t(i) * ld;
    for (int j = 0; j < R; j++) acc[j] = L::mul_add(xi, L::load(r + j * L::n), acc[j]);
  }
  for (int i = m; i < hs; i++) {
    const typename L::V xi = L::set1(x[i]);
    const A* r = mt + size_t(i) * ld;
    for (int j = 0; j < R; j++) acc[j] = L::fma(xi, L::load(r + j * L::n), acc[j]);
  }
  for (int j = 0; j < R; j++) L::store(out + j * L::n, acc[j]);
}

// x[i] = std::exp(x[i]): glibc's expf bits in lanes for float (exp_fp32.h), the calls for double.
inline void exp_in_place(float* x, int n) { exp_fp32(x, size_t(n)); }
inline void exp_in_place(double* x, int n) {
  for (int i = 0; i < n; i++) x[i] = std::exp(x[i]);
}

constexpr int kPad = 16;  // k and v's transposed columns are padded to a multiple of this

int padded(int n) { return (n + kPad - 1) / kPad * kPad; }

// out[u] = x . column u of mt for u < padded(n) (mt's ld columns, ld >= padded(n); the lanes past
// n are computed and ignored).
template <typename A>
void dots_across(const A* x, const A* mt, size_t ld, int hs, int n, A* out) {
  constexpr int w = Lanes<A>::n;
  const int np = padded(n);
  int u = 0;
  for (; u + 4 * w <= np; u += 4 * w) dots_block<A, 4>(x, mt + u, ld, hs, out + u);
  for (; u < np; u += w) dots_block<A, 1>(x, mt + u, ld, hs, out + u);
}

// For each of P outputs: o[k][i] = fma(w[k][u ws], rows[k][u hs + i], o[k][i]) for u = 0..n-1 in
// turn, every i < hs: the reference's fused row updates, in its order for each element, with the
// outputs held in registers across u (4 registers of each at a time, then masked ones). P
// independent outputs keep more multiply-adds in flight than one.
template <typename A, int P>
void accumulate_rows(A* const (&o)[P], const A* const (&w)[P], const A* const (&rows)[P], int n,
                     int hs, size_t ws = 1) {
  using L = Lanes<A>;
  using V = typename L::V;
  constexpr int R = 4;
  int i = 0;
  for (; i + R * L::n <= hs; i += R * L::n) {
    V acc[P][R];
    for (int k = 0; k < P; k++)
      for (int j = 0; j < R; j++) acc[k][j] = L::load(o[k] + i + j * L::n);
    for (int u = 0; u < n; u++)
      for (int k = 0; k < P; k++) {
        const V wu = L::set1(w[k][u * ws]);
        const A* r = rows[k] + size_t(u) * hs + i;
        for (int j = 0; j < R; j++) acc[k][j] = L::fma(wu, L::load(r + j * L::n), acc[k][j]);
      }
    for (int k = 0; k < P; k++)
      for (int j = 0; j < R; j++) L::store(o[k] + i + j * L::n, acc[k][j]);
  }
  for (; i < hs; i += L::n) {
    const typename L::M m = hs - i >= L::n ? typename L::M(~0u) : L::first(hs - i);
    V acc[P];
    for (int k = 0; k < P; k++) acc[k] = L::load(o[k] + i, m);
    for (int u = 0; u < n; u++)
      for (int k = 0; k < P; k++)
        acc[k] = L::fma(L::set1(w[k][u * ws]), L::load(rows[k] + size_t(u) * hs + i, m), acc[k]);
    for (int k = 0; k < P; k++) L::store(o[k] + i, acc[k], m);
  }
}

template <typename A>
void accumulate_rows(A* o, const A* w, const A* rows, int n, int hs) {
  accumulate_rows<A, 1>({o}, {w}, {rows}, n, hs);
}

// Two consecutive query rows' sums: o0 = sum_{u <= t} w0[u] rows_u, o1 = sum_{u <= t+1} w1[u]
// rows_u (row t+1's last term added last, as in its own sum).
template <typename A>
void accumulate_two_rows(A* o0, const A* w0, A* o1, const A* w1, const A* rows, int t, int hs) {
  accumulate_rows<A, 2>({o0, o1}, {w0, w1}, {rows, rows}, t + 1, hs);
  accumulate_rows(o1, w1 + t + 1, rows + size_t(t + 1) * hs, 1, hs);
}

// o_t = sum_{u <= t} w[t tw + u] rows_u for every t < T_, two rows at a time (o zeroed before).
template <typename A>
void accumulate_causal(A* o, const A* w, size_t tw, const A* rows, int T_, int hs) {
  int t = 0;
  for (; t + 1 < T_; t += 2)
    accumulate_two_rows(o + size_t(t) * hs, w + t * tw, o + size_t(t + 1) * hs, w + (t + 1) * tw,
                        rows, t, hs);
  if (t < T_) accumulate_rows(o + size_t(t) * hs, w + t * tw, rows, t + 1, hs);
}

// One head's widened q, k, v (T x hs each, accumulation type) and, for the lanes, k and v
// transposed (hs x tp, tp = T padded, plus kPad so that the rows do not share cache sets when T is
// a power of two; the padding columns stay zero).
template <typename A>
struct Head {
  int T, hs, tp;
  std::vector<A> q, k, v, kt, vt;
  Head(int T_, int hs_)
      : T(T_),
        hs(hs_),
        tp(padded(T_) + kPad),
        q(size_t(T_) * hs_),
        k(q.size()),
        v(q.size()),
        kt(size_t(hs_) * tp, A(0)),
        vt(kt.size(), A(0)) {}
  const A* q_row(int t) const { return q.data() + size_t(t) * hs; }
};

// Widens head h of batch row b of qkv into hd, so the inner loops read each stored element once,
// then transposes k and v by tiles of kPad rows (reads within a few cache lines, writes whole
// rows of lanes).
template <typename T, typename A>
void load_head(Head<A>& hd, const T* qkv, int b, int h, int C) {
  const int T_ = hd.T, hs = hd.hs;
  for (int t = 0; t < T_; t++) {
    const T* row = qkv + (size_t(b) * T_ + t) * 3 * C + h * hs;
    for (int i = 0; i < hs; i++) {
      hd.q[size_t(t) * hs + i] = ld(row[i]);
      hd.k[size_t(t) * hs + i] = ld(row[C + i]);
      hd.v[size_t(t) * hs + i] = ld(row[2 * C + i]);
    }
  }
  for (int t0 = 0; t0 < T_; t0 += kPad) {
    const int t1 = std::min(T_, t0 + kPad);
    for (int i = 0; i < hs; i++)
      for (int t = t0; t < t1; t++) {
        hd.kt[size_t(i) * hd.tp + t] = hd.k[size_t(t) * hs + i];
        hd.vt[size_t(i) * hd.tp + t] = hd.v[size_t(t) * hs + i];
      }
  }
}

// Row t of a causal head: s[u] = exp(q_t . k_u * scale - max) for u <= t, each score rounded to
// S first (S = A: not rounded); returns the max and the sum of s (the softmax is s / sum; its
// logsumexp max + log(sum)). s has hd.tp entries.
template <typename S, typename A>
void causal_scores(const Head<A>& hd, int t, A scale, A* s, A* maxv, A* sum) {
  dots_across(hd.q_row(t), hd.kt.data(), hd.tp, hd.hs, t + 1, s);
  A m = -INFINITY;
  for (int u = 0; u <= t; u++) {
    s[u] = round_as<S>(s[u] * scale);
    if (s[u] > m) m = s[u];
  }
  for (int u = 0; u <= t; u++) s[u] = s[u] - m;
  exp_in_place(s, t + 1);
  A total = 0;
  for (int u = 0; u <= t; u++) total += s[u];
  *maxv = m;
  *sum = total;
}

// One query row of the forward after its causal scores: s[u] = exp(scale q_t.k_u - maxv) for
// u <= t, sum their total. The row's function sets w[u] (the weight of v_u), which forward_rows
// then sums into out[b,t,h] = sum_u w[u] v_u, rounded once.
template <typename A>
struct Row {
  int b, h, t;
  const A* s;
  A maxv, sum;
  A* w;
};

// row(r) for every (b, h, t), in parallel over (b, h) (each thread widens one head's q, k, v
// once), the scores rounded to S, and the weighted sums of v.
template <typename S, typename T, typename F>
void forward_rows(T* out, const T* qkv, int B, int T_, int C, int NH, F&& row) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    Head<A> hd(T_, hs);
    std::vector<A> s(hd.tp), w(2 * size_t(T_)), o(2 * size_t(hs));
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        load_head(hd, qkv, b, h, C);
        for (int t = 0; t < T_; t += 2) {
          const int rows = std::min(2, T_ - t);
          for (int k = 0; k < rows; k++) {
            Row<A> r{b, h, t + k, s.data(), A(0), A(0), w.data() + k * size_t(T_)};
            causal_scores<S>(hd, t + k, scale, s.data(), &r.maxv, &r.sum);
            row(r);
          }
          std::fill(o.begin(), o.end(), A(0));
          if (rows == 2)
            accumulate_two_rows(o.data(), w.data(), o.data() + hs, w.data() + T_, hd.v.data(), t,
                                hs);
          else
            accumulate_rows(o.data(), w.data(), hd.v.data(), t + 1, hs);
          for (int k = 0; k < rows; k++) {
            T* out_t = out + (size_t(b) * T_ + t + k) * C + h * hs;
            for (int i = 0; i < hs; i++) out_t[i] = st<T>(o[size_t(k) * hs + i]);
          }
        }
      }
  }
}

// The backward's scratch for one head: dout widened (T x hs), row t's dp[u] = dout_t . v_u
// (tp entries), and P and dS (dS[t,u] = P[t,u] (dP[t,u] - sum_u' P dP) scale), T x tp, for the
// sums over t.
template <typename A>
struct Back {
  int tp;
  std::vector<A> go, dp, p, ds, dq, dk, dv;
  Back(int T_, int hs, int tp_)
      : tp(tp_),
        go(size_t(T_) * hs),
        dp(tp_),
        p(size_t(T_) * tp_),
        ds(p.size()),
        dq(go.size()),
        dk(go.size()),
        dv(go.size()) {}
  A* p_row(int t) { return p.data() + size_t(t) * tp; }
  A* ds_row(int t) { return ds.data() + size_t(t) * tp; }
};

// dout's rows of head h of batch row b, widened into bk.go.
template <typename T, typename A>
void widen_dout(Back<A>& bk, const T* dout, int b, int h, int T_, int C, int hs) {
  for (int t = 0; t < T_; t++) {
    const T* got = dout + (size_t(b) * T_ + t) * C + h * hs;
    for (int i = 0; i < hs; i++) bk.go[size_t(t) * hs + i] = ld(got[i]);
  }
}

// dq_t = sum_{u <= t} dS[t,u] k_u, and each key's dv_u = sum_{t >= u} P[t,u] dout_t and
// dk_u = sum_{t >= u} dS[t,u] q_t, in t order: the reference's fused updates, one per (t, u), in
// its order for each element, from zero.
template <typename A>
void head_grads(const Head<A>& hd, Back<A>& bk) {
  const int T_ = hd.T, hs = hd.hs;
  std::fill(bk.dq.begin(), bk.dq.end(), A(0));
  accumulate_causal(bk.dq.data(), bk.ds.data(), hd.tp, hd.k.data(), T_, hs);  // dq_t, u order
  std::fill(bk.dk.begin(), bk.dk.end(), A(0));
  std::fill(bk.dv.begin(), bk.dv.end(), A(0));
  for (int u = 0; u < T_; u++) {
    const size_t from = size_t(u) * hd.tp + u, row = size_t(u) * hs;  // P[u,u], rows u..
    accumulate_rows<A, 2>({bk.dv.data() + row, bk.dk.data() + row},
                          {bk.p.data() + from, bk.ds.data() + from},
                          {bk.go.data() + row, hd.q.data() + row}, T_ - u, hs, hd.tp);
  }
}

// The four passes in lanes (the public functions below choose them or the reference).
template <typename T>
void forward_lanes(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  using A = acc_t<T>;
  forward_rows<T>(out, qkv, B, T_, C, NH, [&](const Row<A>& r) {
    T* a = att + ((size_t(r.b) * NH + r.h) * T_ + r.t) * T_;
    A inv = A(1) / r.sum;
    for (int u = 0; u <= r.t; u++) {
      r.w[u] = r.s[u] * inv;
      a[u] = st<T>(r.w[u]);
    }
    for (int u = r.t + 1; u < T_; u++) a[u] = st<T>(A(0));
  });
}

template <typename T>
void backward_lanes(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                    int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    Head<A> hd(T_, hs);
    Back<A> bk(T_, hs, hd.tp);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        load_head(hd, qkv, b, h, C);
        widen_dout(bk, dout, b, h, T_, C, hs);
        for (int t = 0; t < T_; t++) {
          const T* a = att + ((size_t(b) * NH + h) * T_ + t) * T_;
          const A* go = bk.go.data() + size_t(t) * hs;
          dots_across(go, hd.vt.data(), hd.tp, hs, t + 1, bk.dp.data());  // dp[u] = go . v_u
          // dP rounded to T as the GPU stores it; the reference adds P dP as rounded products (its
          // compiled code does not fuse them).
          A dot = 0, *p = bk.p_row(t), *ds = bk.ds_row(t);
          for (int u = 0; u <= t; u++) {
            p[u] = ld(a[u]);
            bk.dp[u] = round_as<T>(bk.dp[u]);
            dot = dot + p[u] * bk.dp[u];
          }
          for (int u = 0; u <= t; u++) ds[u] = p[u] * (bk.dp[u] - dot) * scale;
        }
        head_grads(hd, bk);
        store_head_grads(dqkv, b, h, T_, C, hs, bk.dq.data(), bk.dk.data(), bk.dv.data());
      }
  }
}

template <typename T>
void forward_lse_lanes(T* out, acc_t<T>* lse, const T* qkv, int B, int T_, int C, int NH) {
  using A = acc_t<T>;
  forward_rows<A>(out, qkv, B, T_, C, NH, [&](const Row<A>& r) {
    const A inv = A(1) / r.sum;
    for (int u = 0; u <= r.t; u++) r.w[u] = r.s[u] * inv;
    lse[(size_t(r.b) * NH + r.h) * T_ + r.t] = r.maxv + std::log(r.sum);
  });
}

template <typename T>
void backward_lse_lanes(T* dqkv, const T* dout, const T* qkv, const T* out, const acc_t<T>* lse,
                        int B, int T_, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    Head<A> hd(T_, hs);
    Back<A> bk(T_, hs, hd.tp);
    std::vector<A> ow(hs), sd(hd.tp);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        load_head(hd, qkv, b, h, C);
        widen_dout(bk, dout, b, h, T_, C, hs);
        for (int t = 0; t < T_; t++) {
          const T* ot = out + (size_t(b) * T_ + t) * C + h * hs;
          for (int i = 0; i < hs; i++) ow[i] = A(ld(ot[i]));
          const A* go = bk.go.data() + size_t(t) * hs;
          const A D = dot_ordered(go, ow.data(), hs);
          const A L = lse[(size_t(b) * NH + h) * T_ + t];
          dots_across(hd.q_row(t), hd.kt.data(), hd.tp, hs, t + 1, sd.data());  // q_t . k_u
          dots_across(go, hd.vt.data(), hd.tp, hs, t + 1, bk.dp.data());        // go . v_u
          // The reference fuses the score's scaling with the subtraction of L.
          A *p = bk.p_row(t), *ds = bk.ds_row(t);
          for (int u = 0; u <= t; u++) p[u] = std::fma(sd[u], scale, -L);
          exp_in_place(p, t + 1);
          for (int u = 0; u <= t; u++) ds[u] = p[u] * (bk.dp[u] - D) * scale;
        }
        head_grads(hd, bk);
        store_head_grads(dqkv, b, h, T_, C, hs, bk.dq.data(), bk.dk.data(), bk.dv.data());
      }
  }
}

// Whether the lanes equal the reference for element type T in this build, checked once, at first
// use: all four passes on a fixed sample (T 9, every head size 1 to 24, and 64). The reference's
// roundings are the compiler's choices (see the top of this file); should a build round otherwise,
// the reference runs and the tests say so.
template <typename T>
bool lanes_match_reference() {
  using A = acc_t<T>;
  uint32_t seed = 12345;
  auto fill = [&](std::vector<T>& x) {
    for (auto& v : x) {
      seed = seed * 1664525u + 1013904223u;
      v = st<T>(A(int32_t(seed >> 8) - (1 << 23)) * A(0x1p-22));  // in [-2, 2)
    }
  };
  const int B = 1, NH = 2, T_ = 9;
  std::vector<int> sizes;
  for (int hs = 1; hs <= 24; hs++) sizes.push_back(hs);
  sizes.push_back(64);
  for (int hs : sizes) {
    const int C = hs * NH;
    const size_t n = size_t(B) * T_ * C, na = size_t(B) * NH * T_ * T_, nl = size_t(B) * NH * T_;
    std::vector<T> qkv(3 * n), dout(n), out(n), out_r(n), att(na), att_r(na), d(3 * n), d_r(3 * n);
    std::vector<A> lse(nl), lse_r(nl);
    fill(qkv);
    fill(dout);
    forward_lanes(out.data(), att.data(), qkv.data(), B, T_, C, NH);
    attention_forward_reference(out_r.data(), att_r.data(), qkv.data(), B, T_, C, NH);
    backward_lanes(d.data(), dout.data(), qkv.data(), att_r.data(), B, T_, C, NH);
    attention_backward_reference(d_r.data(), dout.data(), qkv.data(), att_r.data(), B, T_, C, NH);
    bool same = std::memcmp(out.data(), out_r.data(), n * sizeof(T)) == 0 &&
                std::memcmp(att.data(), att_r.data(), na * sizeof(T)) == 0 &&
                std::memcmp(d.data(), d_r.data(), 3 * n * sizeof(T)) == 0;
    forward_lse_lanes(out.data(), lse.data(), qkv.data(), B, T_, C, NH);
    attention_forward_lse_reference(out_r.data(), lse_r.data(), qkv.data(), B, T_, C, NH);
    backward_lse_lanes(d.data(), dout.data(), qkv.data(), out_r.data(), lse_r.data(), B, T_, C, NH);
    attention_backward_lse_reference(d_r.data(), dout.data(), qkv.data(), out_r.data(),
                                     lse_r.data(), B, T_, C, NH);
    same = same && std::memcmp(out.data(), out_r.data(), n * sizeof(T)) == 0 &&
           std::memcmp(lse.data(), lse_r.data(), nl * sizeof(A)) == 0 &&
           std::memcmp(d.data(), d_r.data(), 3 * n * sizeof(T)) == 0;
    if (!same) return false;
  }
  return true;
}

template <typename T>
bool use_lanes() {
  static const bool on = lanes_match_reference<T>();
  return on;
}
}  // namespace
#endif  // TG_ATTENTION_LANES

template <typename T>
bool attention_lanes() {
#ifdef TG_ATTENTION_LANES
  return use_lanes<T>();
#else
  return false;
#endif
}

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
#ifdef TG_ATTENTION_LANES
  if (use_lanes<T>()) return forward_lanes(out, att, qkv, B, T_, C, NH);
#endif
  attention_forward_reference(out, att, qkv, B, T_, C, NH);
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH) {
#ifdef TG_ATTENTION_LANES
  if (use_lanes<T>()) return backward_lanes(dqkv, dout, qkv, att, B, T_, C, NH);
#endif
  attention_backward_reference(dqkv, dout, qkv, att, B, T_, C, NH);
}

template <typename T>
void attention_forward_lse(T* out, acc_t<T>* lse, const T* qkv, int B, int T_, int C, int NH) {
#ifdef TG_ATTENTION_LANES
  if (use_lanes<T>()) return forward_lse_lanes(out, lse, qkv, B, T_, C, NH);
#endif
  attention_forward_lse_reference(out, lse, qkv, B, T_, C, NH);
}

template <typename T>
void attention_backward_lse(T* dqkv, const T* dout, const T* qkv, const T* out, const acc_t<T>* lse,
                            int B, int T_, int C, int NH) {
#ifdef TG_ATTENTION_LANES
  if (use_lanes<T>()) return backward_lse_lanes(dqkv, dout, qkv, out, lse, B, T_, C, NH);
#endif
  attention_backward_lse_reference(dqkv, dout, qkv, out, lse, B, T_, C, NH);
}

#define TG_INSTANTIATE(T)                                                                         \
  template bool attention_lanes<T>();                                                             \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                       \
  template void attention_backward<T>(T*, const T*, const T*, const T*, int, int, int, int);      \
  template void attention_forward_lse<T>(T*, acc_t<T>*, const T*, int, int, int, int);            \
  template void attention_backward_lse<T>(T*, const T*, const T*, const T*, const acc_t<T>*, int, \
                                          int, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
