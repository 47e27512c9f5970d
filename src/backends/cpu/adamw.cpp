// adamw: decoupled weight decay Adam (Loshchilov & Hutter), as torch.optim.AdamW:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   master -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * master)
// then params (the copy the model computes with) receives master rounded to its type, to
// nearest even or stochastically. weight_decay is 0 for the tensors that take none (biases,
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
}  // namespace

template <typename P, typename G, typename M>
void adamw(P* params, M* master, const G* grads, M* m, M* v, size_t n, const AdamWArgs& a) {
  const M b1 = a.beta1, b2 = a.beta2;
  const M c1 = M(1) - std::pow(b1, M(a.step)), c2 = M(1) - std::pow(b2, M(a.step));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    M g = M(ld(grads[i])) * M(a.grad_scale);
    M mi = b1 * m[i] + (M(1) - b1) * g;
    M vi = b2 * v[i] + (M(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    M w = master[i];
    w -= M(a.lr) * ((mi / c1) / (std::sqrt(vi / c2) + M(a.eps)) + M(a.weight_decay) * w);
    master[i] = w;
    params[i] = round_to<P>(acc_t<P>(w), a.rounding, i);
  }
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

template void adamw<float, float, float>(float*, float*, const float*, float*, float*, size_t,
                                         const AdamWArgs&);
template void adamw<double, double, double>(double*, double*, const double*, double*, double*,
                                            size_t, const AdamWArgs&);
template void adamw<bf16, bf16, float>(bf16*, float*, const bf16*, float*, float*, size_t,
                                       const AdamWArgs&);
template void adamw<f16, f16, float>(f16*, float*, const f16*, float*, float*, size_t,
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
