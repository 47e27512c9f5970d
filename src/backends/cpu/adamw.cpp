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
// stored back stochastically (bf16-sr) or with their compensation (bf16-kahan, adamw_math.h).
// weight_decay is 0 for the tensors that take none (biases, layernorm), chosen by the caller
// per tensor, or per element from a.decay's ranges when one call spans several tensors.
// fp8 moments (src/numerics/moment_block.h) go through adamw_block_loop: a block of elements
// at a time, decoded with its scale, updated as above, encoded with its new scale.
//
// global norm: sum of squares accumulated in fp64 per thread block and added in thread
// order, so clipping and skip decisions are reproducible.
//
// convert: narrowing copies (master -> compute weights at init and resume).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "parallel.h"
#include "src/numerics/adamw_math.h"
#include "src/numerics/moment_block.h"

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
  AdamWConsts<M> k0 = k;  // the tensors that take no weight decay
  k0.wd = M(0);
  const MomentFormat fm = a.m_format, fv = a.v_format;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const M g = M(ld(grads[i])) * M(a.grad_scale);
    M mi = load_moment<M>(m[i], fm), vi = load_moment<M>(v[i], fv), w = load_w(i);
    adamw_math(g, mi, vi, w, decays_at(a.decay, i) ? k : k0);
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

namespace {
// A block of a moment, read into fp32 values and stored back in its format: FP8 codes with
// the block's meta (moment_block.h), 16-bit codes, or fp32 as it is.
void load_block(const MomentSpan& s, size_t i0, int len, float* x) {
  const MomentFormat& f = s.format;
  if (moment_is_blocked(f))
    return moment_decode_block(static_cast<const uint8_t*>(s.data) + i0,
                               s.meta + i0 / f.block * moment_meta_words(f), len, f, x);
  if (moment_is_plain(f)) {
    for (int j = 0; j < len; j++) x[j] = static_cast<const float*>(s.data)[i0 + j];
    return;
  }
  for (int j = 0; j < len; j++) x[j] = moment_decode16(static_cast<const uint16_t*>(s.data)[i0 + j], f);
}
void store_block(const MomentSpan& s, size_t i0, int len, const float* x, uint64_t offset) {
  const MomentFormat& f = s.format;
  if (moment_is_blocked(f))
    return moment_encode_block(x, len, f, static_cast<uint8_t*>(s.data) + i0,
                               s.meta + i0 / f.block * moment_meta_words(f));
  if (moment_is_plain(f)) {
    for (int j = 0; j < len; j++) static_cast<float*>(s.data)[i0 + j] = x[j];
    return;
  }
  for (int j = 0; j < len; j++)
    static_cast<uint16_t*>(s.data)[i0 + j] =
        moment_encode16(x[j], f, f.stochastic ? sr_hash(s.seed, offset + i0 + j) : 0u);
}

// The loop for FP8 moments: a block at a time (the block size of whichever moment is
// blocked; both share precision.state.moment_block), decoded, updated element by element as
// adamw_loop does, and encoded with the block's new scale.
template <typename G, typename LoadW, typename StoreW>
void adamw_block_loop(const G* grads, const MomentSpan& m, const MomentSpan& v, size_t n,
                      const AdamWArgs& a, LoadW load_w, StoreW store_w) {
  const int block = moment_is_blocked(m.format) ? m.format.block : v.format.block;
  const float b1 = a.beta1, b2 = a.beta2;
  const AdamWConsts<float> k{b1,   b2,    1.f - std::pow(b1, float(a.step)),
                             1.f - std::pow(b2, float(a.step)), a.lr, a.eps, a.weight_decay};
  AdamWConsts<float> k0 = k;
  k0.wd = 0.f;
  const size_t blocks = moment_blocks(n, block);
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; b++) {
    float mb[kMomentBlockMax], vb[kMomentBlockMax];
    const size_t i0 = b * size_t(block);
    const int len = int(std::min(size_t(block), n - i0));
    load_block(m, i0, len, mb);
    load_block(v, i0, len, vb);
    for (int j = 0; j < len; j++) {
      const size_t i = i0 + size_t(j);
      float w = load_w(i);
      adamw_math(ld(grads[i]) * a.grad_scale, mb[j], vb[j], w, decays_at(a.decay, i) ? k : k0);
      store_w(i, w);
    }
    store_block(m, i0, len, mb, a.rounding.offset);
    store_block(v, i0, len, vb, a.rounding.offset);
  }
}
}  // namespace

template <typename P>
void adamw_blocked(P* params, float* master, const P* grads, const MomentSpan& m,
                   const MomentSpan& v, size_t n, const AdamWArgs& a) {
  adamw_block_loop(
      grads, m, v, n, a, [&](size_t i) { return master[i]; },
      [&](size_t i, float w) {
        master[i] = w;
        params[i] = round_to<P>(acc_t<P>(w), a.rounding, i);
      });
}

void adamw_bf16_master_blocked(bf16* params, bf16* comp, const bf16* grads, const MomentSpan& m,
                               const MomentSpan& v, size_t n, const AdamWArgs& a) {
  if (comp) {
    adamw_block_loop(
        grads, m, v, n, a, [&](size_t i) { return kahan_load(params[i].bits, comp[i].bits); },
        [&](size_t i, float w) { kahan_store(w, params[i].bits, comp[i].bits); });
    return;
  }
  adamw_block_loop(
      grads, m, v, n, a, [&](size_t i) { return bf16_to_f32(params[i].bits); },
      [&](size_t i, float w) { params[i] = round_to<bf16>(w, a.rounding, i); });
}

template void adamw_blocked<float>(float*, float*, const float*, const MomentSpan&,
                                   const MomentSpan&, size_t, const AdamWArgs&);
template void adamw_blocked<bf16>(bf16*, float*, const bf16*, const MomentSpan&,
                                  const MomentSpan&, size_t, const AdamWArgs&);
template void adamw_blocked<f16>(f16*, float*, const f16*, const MomentSpan&, const MomentSpan&,
                                 size_t, const AdamWArgs&);

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
