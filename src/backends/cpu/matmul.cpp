// matmul: out(N,OC) = inp(N,C) W(OC,C)^T + bias, through BLAS (sgemm / dgemm; gemm.h).
// Backward: dinp = dout W (overwrites), dW += dout^T inp, dbias += column sums of dout.
// Each GEMM is split by output rows across the OpenMP threads, every thread calling
// single-threaded BLAS on its block: one thread pool for everything, instead of OpenMP
// and OpenBLAS threads spinning against each other (measured: ~40% of a step on 2 cores).
// The bias sums run over a fixed split of rows per part, added in part order. The row
// blocks are parts (parallel.h), so the bits do not depend on how many threads run them.
// The _bf16 twins take bf16 operands straight from their storage into gemm_bf16 (the
// hardware path of cpu.narrow_gemm), with fp32 outputs and an optional factor on the
// products (the FP8 tensor scales, applied after the GEMM as a GPU applies them).
// matmul_backward_narrow_dout is the exact path's lm_head backward from 16-bit dlogits in
// the fp32 logits' rows (rows 2 Vp apart), widened a block at a time.
#include <algorithm>
#include <vector>

#include "gemm.h"
#include "gemm_bf16.h"
#include "ops.h"
#include "parallel.h"

namespace tg::cpu {

namespace {
constexpr bool CblasNoTrans = false, CblasTrans = true;
}  // namespace

// Rows [r0, r1) of the M output rows that thread `id` of `nt` owns.
inline void thread_rows(int M, int id, int nt, int* r0, int* r1) {
  *r0 = int(int64_t(M) * id / nt);
  *r1 = int(int64_t(M) * (id + 1) / nt);
}

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  for_each_part([&](int id, int nt) {
    int n0, n1;
    thread_rows(N, id, nt, &n0, &n1);
    if (n1 > n0)
      gemm(CblasNoTrans, CblasTrans, n1 - n0, OC, C, inp + size_t(n0) * C, C, w, C, T(0),
           out + size_t(n0) * OC, OC);
  });
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      T* o = out + size_t(n) * OC;
      for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
  }
}

template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC) {
  for_each_part([&](int id, int nt) {
    int r0, r1;
    thread_rows(N, id, nt, &r0, &r1);
    if (dinp && r1 > r0)
      gemm(CblasNoTrans, CblasNoTrans, r1 - r0, C, OC, dout + size_t(r0) * OC, OC, w, C, T(0),
           dinp + size_t(r0) * C, C);
    thread_rows(OC, id, nt, &r0, &r1);
    if (r1 > r0)
      gemm(CblasTrans, CblasNoTrans, r1 - r0, C, N, dout + r0, OC, inp, C, T(1),
           dw + size_t(r0) * C, C);
  });
  if (dbias) bias_backward(dbias, dout, N, OC);
}

// Blocks of dout's rows (kRows x OC, for dinp) and columns (N x kCols, for dW) widened per part:
// at GPT-2's Vp = 50304 and 8192 rows, 3.2 and 2.1 MB, where a whole fp32 copy of the
// logits' gradient would be 1.6 GB. The sums are matmul_backward<float>'s (the loop nest's
// k order does not depend on how the rows are blocked).
template <typename G>
void matmul_backward_narrow_dout(float* dinp, float* dw, const G* dout, size_t ldo,
                                 const float* inp, const float* w, int N, int C, int OC) {
  constexpr int kRows = 16, kCols = 64;
  for_each_part([&](int id, int nt) {
    std::vector<float> buf;
    int r0, r1;
    thread_rows(N, id, nt, &r0, &r1);
    for (int b0 = r0; dinp && b0 < r1; b0 += kRows) {
      const int nb = std::min(kRows, r1 - b0);
      buf.resize(size_t(nb) * OC);
      for (int r = 0; r < nb; r++)
        for (int j = 0; j < OC; j++) buf[size_t(r) * OC + j] = ld(dout[size_t(b0 + r) * ldo + j]);
      gemm(CblasNoTrans, CblasNoTrans, nb, C, OC, buf.data(), OC, w, C, 0.0f, dinp + size_t(b0) * C,
           C);
    }
    thread_rows(OC, id, nt, &r0, &r1);
    for (int c0 = r0; c0 < r1; c0 += kCols) {
      const int nc = std::min(kCols, r1 - c0);
      buf.resize(size_t(N) * nc);
      for (int n = 0; n < N; n++)
        for (int j = 0; j < nc; j++) buf[size_t(n) * nc + j] = ld(dout[size_t(n) * ldo + c0 + j]);
      gemm(CblasTrans, CblasNoTrans, nc, C, N, buf.data(), nc, inp, C, 1.0f, dw + size_t(c0) * C,
           C);
    }
  });
}
template void matmul_backward_narrow_dout<bf16>(float*, float*, const bf16*, size_t, const float*,
                                                const float*, int, int, int);
template void matmul_backward_narrow_dout<f16>(float*, float*, const f16*, size_t, const float*,
                                               const float*, int, int, int);

namespace {
// dbias (A) += column sums of dout (any storage type D, widened exactly to A).
template <typename A, typename D>
void bias_sums(A* dbias, const D* dout, int N, int OC) {
  const int nthreads = num_parts();
  std::vector<A> partial(size_t(nthreads) * OC, A(0));
  for_each_part([&](int id, int nt) {
    int n0 = int(int64_t(N) * id / nt), n1 = int(int64_t(N) * (id + 1) / nt);
    A* p = partial.data() + size_t(id) * OC;
    for (int n = n0; n < n1; n++) {
      const D* d = dout + size_t(n) * OC;
      for (int j = 0; j < OC; j++) p[j] += ld(d[j]);
    }
  });
  for (int t = 0; t < nthreads; t++)
    for (int j = 0; j < OC; j++) dbias[j] += partial[size_t(t) * OC + j];
}

const uint16_t* codes(const bf16* x) { return reinterpret_cast<const uint16_t*>(x); }
}  // namespace

template <typename T>
void bias_backward(T* dbias, const T* dout, int N, int OC) {
  bias_sums(dbias, dout, N, OC);
}
void bias_backward(float* dbias, const bf16* dout, int N, int OC) { bias_sums(dbias, dout, N, OC); }

namespace {
// One copy of a PackQuant per part (each collects its own amax), merged in the end: a max,
// the same whatever the split.
struct PartQuant {
  std::vector<PackQuant> q;
  explicit PartQuant(const PackQuant* p) : q(p ? size_t(num_parts()) : 0, p ? *p : PackQuant{}) {}
  PackQuant* at(int part) { return q.empty() ? nullptr : &q[size_t(part)]; }
  void merge(PackQuant* p) const {
    for (const PackQuant& x : q) p->amax_bits = std::max(p->amax_bits, x.amax_bits);
  }
};

bool finite_amax(const PackQuant* q) { return !q || q->amax_bits < 0x7f800000u; }

void forward_bf16(float* out, const bf16* inp, const bf16* w, const float* bias, float scale, int N,
                  int C, int OC, PackQuant* qi, PackQuant* qw) {
  PartQuant pi(qi), pw(qw);
  for_each_part([&](int id, int nt) {
    int n0, n1;
    thread_rows(N, id, nt, &n0, &n1);
    if (n1 > n0)
      gemm_bf16(false, true, n1 - n0, OC, C, codes(inp) + size_t(n0) * C, C, codes(w), C, 0.0f,
                out + size_t(n0) * OC, OC, pi.at(id), pw.at(id));
  });
  if (qi) pi.merge(qi);
  if (qw) pw.merge(qw);
  if (!bias && scale == 1.0f) return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* o = out + size_t(n) * OC;
    for (int j = 0; j < OC; j++) o[j] = o[j] * scale + (bias ? bias[j] : 0.0f);
  }
}

// qi: inp quantized as dW's GEMM packs it, which then writes its product to a buffer, added to
// dW only where inp was finite. qw: w quantized as dinp's GEMM packs it.
void backward_bf16(float* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, int N,
                   int C, int OC, float dinp_scale, float dw_scale, size_t ld_dout, PackQuant* qi,
                   PackQuant* qw) {
  const int ldo = int(ld_dout ? ld_dout : size_t(OC));
  PartQuant pi(qi), pw(qw);
  for_each_part([&](int id, int nt) {
    int r0, r1;
    thread_rows(N, id, nt, &r0, &r1);
    if (dinp && r1 > r0) {
      gemm_bf16(false, false, r1 - r0, C, OC, codes(dout) + size_t(r0) * ldo, ldo, codes(w), C,
                0.0f, dinp + size_t(r0) * C, C, nullptr, pw.at(id));
      if (dinp_scale != 1.0f)
        for (size_t i = size_t(r0) * C; i < size_t(r1) * C; i++) dinp[i] *= dinp_scale;
    }
    thread_rows(OC, id, nt, &r0, &r1);
    if (!dw || r1 <= r0) return;
    float* dwr = dw + size_t(r0) * C;
    if (dw_scale == 1.0f) {
      gemm_bf16(true, false, r1 - r0, C, N, codes(dout) + r0, ldo, codes(inp), C, 1.0f, dwr, C);
      return;
    }
    // dW += scale x (the product): the product first, as the exact path's scaled GEMMs. The
    // product's buffer is this thread's, kept: a fresh one was zeroed and page-faulted in on
    // every call (2-3% of an fp8 step).
    static thread_local std::vector<float> prod;
    const size_t n = size_t(r1 - r0) * C;
    if (prod.size() < n) prod.resize(n);
    gemm_bf16(true, false, r1 - r0, C, N, codes(dout) + r0, ldo, codes(inp), C, 0.0f, prod.data(),
              C, nullptr, pi.at(id));
    // Every part packs all of inp, so all of them see a non-finite value and add nothing.
    if (!finite_amax(pi.at(id))) return;
    for (size_t i = 0; i < n; i++) dwr[i] += prod[i] * dw_scale;
  });
  if (qi) pi.merge(qi);
  if (qw) pw.merge(qw);
}
}  // namespace

void matmul_forward_bf16(float* out, const bf16* inp, const bf16* w, const float* bias, float scale,
                         int N, int C, int OC) {
  forward_bf16(out, inp, w, bias, scale, N, C, OC, nullptr, nullptr);
}

void matmul_backward_bf16(float* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w,
                          int N, int C, int OC, float dinp_scale, float dw_scale, size_t ld_dout) {
  backward_bf16(dinp, dw, dout, inp, w, N, C, OC, dinp_scale, dw_scale, ld_dout, nullptr, nullptr);
}

void matmul_forward_fp8(float* out, const bf16* inp, const bf16* w, const float* bias, float scale,
                        int N, int C, int OC, PackQuant* qi, PackQuant* qw) {
  forward_bf16(out, inp, w, bias, scale, N, C, OC, qi, qw);
}

void matmul_backward_fp8(float* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w,
                         int N, int C, int OC, float dinp_scale, float dw_scale, PackQuant* qi,
                         PackQuant* qw) {
  if (qi && dw_scale == 1.0f)
    throw Error("matmul_backward_fp8: inp quantized as packed needs dw_scale != 1");
  backward_bf16(dinp, dw, dout, inp, w, N, C, OC, dinp_scale, dw_scale, 0, qi, qw);
}

#define TG_INSTANTIATE(T)                                                                    \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);          \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int); \
  template void bias_backward<T>(T*, const T*, int, int);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

}  // namespace tg::cpu
