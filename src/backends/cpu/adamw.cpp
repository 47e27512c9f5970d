// adamw: decoupled weight decay Adam (Loshchilov & Hutter), as torch.optim.AdamW:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   master -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * master)
// the arithmetic of src/numerics/adamw_math.h, which the CUDA kernel shares. m and v are read
// widened to fp32 (fp64 in fp64 models), updated, and stored back in their own format
// (src/numerics/moment_format.h: fp32 as they are, bf16 to nearest even or stochastically,
// fp16 scaled and v as its square root); the update itself uses the fp32 values of this step.
// Then params (the copy the model computes with) receives master rounded to its type, to
// nearest even or stochastically. adamw_bf16_master keeps no fp32 master
// (precision.state.master, src/numerics/master_format.h): the bf16 weights are the master,
// stored back stochastically (bf16-sr) or with their compensation (bf16-kahan, adamw_math.h). weight_decay is 0 for the tensors that take none (biases,
// layernorm), chosen by the caller per tensor.
//
// global norm: sum of squares accumulated in fp64 per thread block and added in thread
// order, so clipping and skip decisions are reproducible.
//
// convert: narrowing copies (master -> compute weights at init and resume).
#include <omp.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "parallel.h"
#include "src/numerics/adamw_math.h"

namespace tg::cpu {

namespace {
// Rounds an accumulation-type value into storage type T per r, for element index i.
template <typename T>
inline T round_to(acc_t<T> v, const Rounding& r, size_t i) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (r.stochastic) return bf16{f32_to_bf16_sr(v, sr_hash(r.seed, r.offset + i))};
  } else if constexpr (std::is_same_v<T, f16>) {
    if (r.stochastic) return f16{f32_to_f16_sr(v, sr_hash(r.seed, r.offset + i))};
  }
  return st<T>(v);
}

// A moment as the update reads it: plain storage (the type M itself) as it is, a 16-bit code
// decoded (exact).
template <typename M>
inline M load_moment(M x, const MomentFormat&) {
  return x;
}
template <typename M>
inline M load_moment(uint16_t code, const MomentFormat& f) {
  return M(moment_decode16(code, f));
}
// The moment stored back: as it is, or rounded into its 16-bit code (stochastic formats draw
// sr_hash(seed, index)).
template <typename S, typename M>
inline S store_moment(M x, const MomentFormat& f, uint64_t seed, uint64_t index) {
  if constexpr (std::is_same_v<S, uint16_t>)
    return moment_encode16(float(x), f, f.stochastic ? sr_hash(seed, index) : 0u);
  else
    return x;
}
}  // namespace

// The loop every master format shares: element i's weight read by load_w(i) and the updated
// one handed to store_w(i, w); the moments read and stored in their formats.
template <typename M, typename G, typename SM, typename SV, typename LoadW, typename StoreW>
void adamw_loop(const G* grads, SM* m, SV* v, size_t n, const AdamWArgs& a, LoadW load_w,
                StoreW store_w) {
  const M b1 = a.beta1, b2 = a.beta2;
  const AdamWConsts<M> k{b1,
                         b2,
                         M(1) - std::pow(b1, M(a.step)),
                         M(1) - std::pow(b2, M(a.step)),
                         M(a.lr),
                         M(a.eps),
                         M(a.weight_decay)};
  const MomentFormat fm = a.m_format, fv = a.v_format;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const M g = M(ld(grads[i])) * M(a.grad_scale);
    M mi = load_moment<M>(m[i], fm), vi = load_moment<M>(v[i], fv), w = load_w(i);
    adamw_math(g, mi, vi, w, k);
    m[i] = store_moment<SM>(mi, fm, a.m_seed, a.rounding.offset + i);
    v[i] = store_moment<SV>(vi, fv, a.v_seed, a.rounding.offset + i);
    store_w(i, w);
  }
}

template <typename P, typename G, typename M, typename SM, typename SV>
void adamw(P* params, M* master, const G* grads, SM* m, SV* v, size_t n, const AdamWArgs& a) {
  adamw_loop<M>(
      grads, m, v, n, a, [&](size_t i) { return master[i]; },
      [&](size_t i, M w) {
        master[i] = w;
        params[i] = round_to<P>(acc_t<P>(w), a.rounding, i);
      });
}

template <typename SM, typename SV>
void adamw_bf16_master(bf16* params, bf16* comp, const bf16* grads, SM* m, SV* v, size_t n,
                       const AdamWArgs& a) {
  if (comp) {  // bf16-kahan
    adamw_loop<float>(
        grads, m, v, n, a, [&](size_t i) { return kahan_load(params[i].bits, comp[i].bits); },
        [&](size_t i, float w) { kahan_store(w, params[i].bits, comp[i].bits); });
    return;
  }
  // bf16-sr: the caller's rounding is stochastic (weight_rounding)
  adamw_loop<float>(
      grads, m, v, n, a, [&](size_t i) { return bf16_to_f32(params[i].bits); },
      [&](size_t i, float w) { params[i] = round_to<bf16>(w, a.rounding, i); });
}

template <typename D, typename S>
void convert(D* dst, const S* src, size_t n, const Rounding& r) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] = round_to<D>(acc_t<D>(ld(src[i])), r, i);
}

template <typename T>
double sum_squares(const T* x, size_t n) {
  const int nthreads = num_parts();
  std::vector<double> partial(nthreads, 0.0);
  for_each_part([&](int id, int nt) {
    size_t i0 = n * id / nt, i1 = n * (id + 1) / nt;
    double s = 0;
    for (size_t i = i0; i < i1; i++) {
      double xi = double(ld(x[i]));
      s += xi * xi;
    }
    partial[id] = s;
  });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

// Parameters P and gradients in fp32, bf16 or fp16 with fp32 master weights, moments fp32 or
// 16-bit codes (uint16_t); the fp64 gradient checks' all-double model.
#define TG_ADAMW(P, SM, SV)                                                        \
  template void adamw<P, P, float, SM, SV>(P*, float*, const P*, SM*, SV*, size_t, \
                                           const AdamWArgs&);
#define TG_ADAMW_MOMENTS(P)    \
  TG_ADAMW(P, float, float)    \
  TG_ADAMW(P, float, uint16_t) \
  TG_ADAMW(P, uint16_t, float) \
  TG_ADAMW(P, uint16_t, uint16_t)
TG_ADAMW_MOMENTS(float)
TG_ADAMW_MOMENTS(bf16)
TG_ADAMW_MOMENTS(f16)
#undef TG_ADAMW_MOMENTS
#define TG_ADAMW_BF16_MASTER(SM, SV)                                                      \
  template void adamw_bf16_master<SM, SV>(bf16*, bf16*, const bf16*, SM*, SV*, size_t, \
                                          const AdamWArgs&);
TG_ADAMW_BF16_MASTER(float, float)
TG_ADAMW_BF16_MASTER(float, uint16_t)
TG_ADAMW_BF16_MASTER(uint16_t, float)
TG_ADAMW_BF16_MASTER(uint16_t, uint16_t)
#undef TG_ADAMW_BF16_MASTER
#undef TG_ADAMW
template void adamw<double, double, double, double, double>(double*, double*, const double*,
                                                            double*, double*, size_t,
                                                            const AdamWArgs&);
#define TG_CONVERT(D, S) template void convert<D, S>(D*, const S*, size_t, const Rounding&);
TG_CONVERT(float, float)
TG_CONVERT(bf16, float)
TG_CONVERT(f16, float)
TG_CONVERT(float, bf16)
TG_CONVERT(float, f16)
TG_CONVERT(double, double)
TG_CONVERT(float, double)
TG_CONVERT(double, float)
#undef TG_CONVERT
namespace {
template <typename T>
constexpr double kMinNormal = 1.1754943508222875e-38;  // fp32 and bf16
template <>
constexpr double kMinNormal<f16> = 6.103515625e-05;
template <>
constexpr double kMinNormal<double> = 2.2250738585072014e-308;
}  // namespace

template <typename T>
TensorStats tensor_stats(const T* x, size_t n) {
  double amax = 0;
  size_t zeros = 0, sub = 0, bad = 0;
#pragma omp parallel for reduction(max : amax) reduction(+ : zeros, sub, bad) schedule(static)
  for (size_t i = 0; i < n; i++) {
    double v = std::fabs(double(ld(x[i])));
    if (!std::isfinite(v)) {
      bad++;
      continue;
    }
    zeros += v == 0;
    sub += v != 0 && v < kMinNormal<T>;
    amax = v > amax ? v : amax;
  }
  TensorStats s;
  s.amax = amax;
  s.n = n;
  s.zeros = zeros;
  s.subnormals = sub;
  s.nonfinite = bad;
  return s;
}

template TensorStats tensor_stats<float>(const float*, size_t);
template TensorStats tensor_stats<double>(const double*, size_t);
template TensorStats tensor_stats<bf16>(const bf16*, size_t);
template TensorStats tensor_stats<f16>(const f16*, size_t);
template double sum_squares<float>(const float*, size_t);
template double sum_squares<double>(const double*, size_t);
template double sum_squares<bf16>(const bf16*, size_t);
template double sum_squares<f16>(const f16*, size_t);

}  // namespace tg::cpu
