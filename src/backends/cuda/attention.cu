// attention.cu: causal self-attention from batched GEMMs (cuBLASLt, one batch entry per
// (b, h)) and the kernels of kernels/attention.cuh. Row-major throughout; see matmul.cu for
// how a row-major product maps onto column-major cuBLAS. Scores and dP are (B, NH, T, T)
// scratch in the compute type (the GEMMs' fp32 sums rounded once, as the CPU twin rounds
// them), computed per row block over the causal columns only (src/backends/attention_blocks.h,
// which says why 4 blocks); the softmax probabilities live in the model's att tensor. The
// softmax kernels stage each row in shared memory where a block's rows fit (every T up to
// 6144), and read it from global memory more than once otherwise.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cublaslt.h"
#include "kernels/attention.cuh"
#include "launch.h"
#include "src/backends/attention_blocks.h"

namespace tg::gpu {

namespace {

constexpr int kThreads = 256;

// Launches a permute (kernels/attention.cuh) of n elements through f(V, grid): V a 16-byte pack's
// count of E where hs is a whole number of packs and every tensor is aligned, else 1; the grid
// covers n / V runs.
template <typename E, typename F>
void permute_runs(const Ctx& c, int hs, size_t n, std::initializer_list<const void*> ptrs, F&& f) {
  with_run_width<E>(hs % Pack16<E>::N == 0 && can_pack16<E>(n, ptrs),
                    [&](auto run) { f(run, c.grid(n / decltype(run)::value, kThreads)); });
  TG_LAUNCH_CHECK();
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::F32 ? CUDA_R_32F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

// Row-major, for each of `count` entries: D(M,N) = alpha op(A)(M,K) op(B)(K,N), through the
// cuBLASLt wrapper as one batched GEMM (column-major: D^T = op(B)^T op(A)^T), or cuBLAS's
// strided-batched GEMM when cuda.gemm=fallback or cuBLASLt has no algorithm.
void bgemm(Ctx& c, bool ta, bool tb, int M, int N, int K, DType ab, const void* A, int lda,
           long long sa, const void* B, int ldb, long long sb, DType dt, void* D, int ldd,
           long long sd, float alpha, int count) {
  const float beta = 0.f;
  LtGemm g = lt_gemm_of(cuda_type(ab), cuda_type(ab), cuda_type(dt), tb, ta, N, M, K, B, ldb, A,
                        lda, D, ldd);
  g.alpha = &alpha;
  g.beta = &beta;
  g.batch = count;
  g.stride_a = sb;
  g.stride_b = sa;
  g.stride_d = sd;
  if (!c.opt.gemm_fallback && lt_matmul(c.lt_context(), g)) return;
  lt_log("cublasGemmStridedBatchedEx");
  TG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      c.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
      cuda_type(ab), ldb, sb, A, cuda_type(ab), lda, sa, &beta, D, cuda_type(dt), ldd, sd, count,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

unsigned row_blocks(size_t rows) { return unsigned((rows + 7) / 8); }  // 8 warps per block

// The softmax kernels' warps (rows) per block where they stage their rows in shared memory:
// 8 where 8 rows of `row_bytes` fit the block's shared memory without opting in (the device's
// sharedMemPerBlock, 48 KiB: at T 1024 the forward's 4 KiB rows and the bf16 backward's 4 KiB
// fit 8), fewer for longer rows, 0 (the kernels that read the row from global memory more
// than once) when not even one fits: T over 12288 forward, 12288 (bf16, fp16) or 6144 (fp32)
// backward.
int softmax_warps(const Ctx& c, size_t row_bytes) {
  return int(std::min<size_t>(8, size_t(c.prop.sharedMemPerBlock) / row_bytes));
}

// att = causal softmax(S) rows (kernels/attention.cuh), staged in shared memory where they fit.
template <typename E>
void softmax_forward(Ctx& c, E* att, const E* S, int rows, int T) {
  const size_t row = size_t(T) * sizeof(float);
  const int warps = softmax_warps(c, row);
  with_run_width<E>(can_pack16<E>(size_t(T), {att, S}), [&](auto run) {
    constexpr int V = decltype(run)::value;
    if (warps > 0)
      launch(attention_softmax_forward_smem_kernel<E, V>, unsigned((rows + warps - 1) / warps),
             32 * warps, warps * row, c.stream, att, S, rows, T);
    else
      launch(attention_softmax_forward_kernel<E, V>, row_blocks(size_t(rows)), kThreads, 0,
             c.stream, att, S, rows, T);
  });
  TG_LAUNCH_CHECK();
}

// dS = the softmax backward of dP and att (kernels/attention.cuh), staged where the rows fit,
// written up to the end of each row's block.
template <typename E>
void softmax_backward(Ctx& c, E* dS, const E* dP, const E* att, int rows, int T, float scale) {
  const size_t row = size_t(T) * 2 * sizeof(E);
  const int warps = softmax_warps(c, row), block = attention_row_block(T);
  with_run_width<E>(can_pack16<E>(size_t(T), {dS, dP, att}), [&](auto run) {
    constexpr int V = decltype(run)::value;
    if (warps > 0)
      launch(attention_softmax_backward_smem_kernel<E, V>, unsigned((rows + warps - 1) / warps),
             32 * warps, warps * row, c.stream, dS, dP, att, rows, T, block, scale);
    else
      launch(attention_softmax_backward_kernel<E, V>, row_blocks(size_t(rows)), kThreads, 0,
             c.stream, dS, dP, att, rows, T, block, scale);
  });
  TG_LAUNCH_CHECK();
}

// Element `i` of an array of `es`-byte elements.
template <typename P>
P* elem(P* p, size_t i, size_t es) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<Byte*>(p) + i * es;
}

// fn(r0, r1) for each row block [r0, r1) of the causal products (attention_blocks.h).
template <typename F>
void for_row_blocks(int T, F&& fn) {
  const int R = attention_row_block(T);
  for (int r0 = 0; r0 < T; r0 += R) fn(r0, std::min(T, r0 + R));
}

// The causal products of one head's (T, T) and (T, hs) matrices, per row block [r0, r1), in the
// compute type t, for every (b, h) at once. Row-block shapes:
//   scores: D(T, T) = alpha X Y^T, rows r0..r1 over columns 0..r1 (S, dP);
//   rows:   D(T, hs) = P Z, rows r0..r1 summing over u < r1 (y = att v, dq = dS k; P is zero
//           above the diagonal);
//   cols:   D(T, hs) = P^T Z, rows r0..r1 summing over t >= r0 (dv = att^T dy, dk = dS^T q).
void causal_scores(Ctx& c, DType t, void* D, const void* X, const void* Y, int T, int hs, int BH,
                   float alpha) {
  const size_t es = dtype_size(t);
  const long long th = (long long)T * hs, tt = (long long)T * T;
  for_row_blocks(T, [&](int r0, int r1) {
    bgemm(c, false, true, r1 - r0, r1, hs, t, elem(X, size_t(r0) * hs, es), hs, th, Y, hs, th, t,
          elem(D, size_t(r0) * T, es), T, tt, alpha, BH);
  });
}
void causal_rows(Ctx& c, DType t, void* D, const void* P, const void* Z, int T, int hs, int BH) {
  const size_t es = dtype_size(t);
  const long long th = (long long)T * hs, tt = (long long)T * T;
  for_row_blocks(T, [&](int r0, int r1) {
    bgemm(c, false, false, r1 - r0, hs, r1, t, elem(P, size_t(r0) * T, es), T, tt, Z, hs, th, t,
          elem(D, size_t(r0) * hs, es), hs, th, 1.f, BH);
  });
}
void causal_cols(Ctx& c, DType t, void* D, const void* P, const void* Z, int T, int hs, int BH) {
  const size_t es = dtype_size(t);
  const long long th = (long long)T * hs, tt = (long long)T * T;
  for_row_blocks(T, [&](int r0, int r1) {
    bgemm(c, true, false, r1 - r0, hs, T - r0, t, elem(P, size_t(r0) * T + r0, es), T, tt,
          elem(Z, size_t(r0) * hs, es), hs, th, t, elem(D, size_t(r0) * hs, es), hs, th, 1.f, BH);
  });
}

}  // namespace

void attention_forward(Ctx& c, DType t, void* out, void* att, const void* qkv, int B, int T, int C,
                       int NH, unsigned* amax) {
  const int hs = C / NH, BH = B * NH;
  const size_t btc = size_t(B) * T * C, es = dtype_size(t);
  const size_t tt = size_t(T) * T;
  const float scale = 1.f / std::sqrt(float(hs));
  void* q = c.scratch(kScratchQ, btc * es);
  void* k = c.scratch(kScratchK, btc * es);
  void* v = c.scratch(kScratchV, btc * es);
  void* y = c.scratch(kScratchY, btc * es);
  void* S = c.scratch(kScratchS, size_t(BH) * tt * es);
  dispatch("attention_forward", t, [&](auto tag) {
    using E = decltype(tag);
    permute_runs<E>(c, hs, btc, {q, k, v, qkv}, [&](auto run, unsigned grid) {
      launch(attention_permute_kernel<E, decltype(run)::value>, grid, kThreads, 0, c.stream,
             static_cast<E*>(q), static_cast<E*>(k), static_cast<E*>(v), static_cast<const E*>(qkv),
             B, T, NH, hs);
    });
    causal_scores(c, t, S, q, k, T, hs, BH, scale);
    softmax_forward(c, static_cast<E*>(att), static_cast<const E*>(S), BH * T, T);
    causal_rows(c, t, y, att, v, T, hs, BH);
    permute_runs<E>(c, hs, btc, {out, y}, [&](auto run, unsigned grid) {
      launch(attention_unpermute_kernel<E, decltype(run)::value>, grid, kThreads, 0, c.stream,
             static_cast<E*>(out), static_cast<const E*>(y), B, T, NH, hs, amax);
    });
  });
}

void attention_backward(Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* att, int B, int T, int C, int NH) {
  const int hs = C / NH, BH = B * NH;
  const size_t btc = size_t(B) * T * C, es = dtype_size(t);
  const size_t tt = size_t(T) * T;
  const float scale = 1.f / std::sqrt(float(hs));
  void* q = c.scratch(kScratchQ, btc * es);
  void* k = c.scratch(kScratchK, btc * es);
  void* v = c.scratch(kScratchV, btc * es);
  void* dy = c.scratch(kScratchY, btc * es);
  void* dP = c.scratch(kScratchS, size_t(BH) * tt * es);
  void* dS = c.scratch(kScratchDS, size_t(BH) * tt * es);
  void* dq = c.scratch(kScratchDQ, btc * es);
  void* dk = c.scratch(kScratchDK, btc * es);
  void* dv = c.scratch(kScratchDV, btc * es);
  dispatch("attention_backward", t, [&](auto tag) {
    using E = decltype(tag);
    permute_runs<E>(c, hs, btc, {q, k, v, qkv}, [&](auto run, unsigned grid) {
      launch(attention_permute_kernel<E, decltype(run)::value>, grid, kThreads, 0, c.stream,
             static_cast<E*>(q), static_cast<E*>(k), static_cast<E*>(v), static_cast<const E*>(qkv),
             B, T, NH, hs);
    });
    permute_runs<E>(c, hs, btc, {dy, dout}, [&](auto run, unsigned grid) {
      launch(attention_permute_one_kernel<E, decltype(run)::value>, grid, kThreads, 0, c.stream,
             static_cast<E*>(dy), static_cast<const E*>(dout), B, T, NH, hs);
    });
    // dP = dy v^T;  dv = att^T dy
    causal_scores(c, t, dP, dy, v, T, hs, BH, 1.f);
    causal_cols(c, t, dv, att, dy, T, hs, BH);
    softmax_backward(c, static_cast<E*>(dS), static_cast<const E*>(dP), static_cast<const E*>(att),
                     BH * T, T, scale);
    // dq = dS k;  dk = dS^T q
    causal_rows(c, t, dq, dS, k, T, hs, BH);
    causal_cols(c, t, dk, dS, q, T, hs, BH);
    permute_runs<E>(c, hs, btc, {dqkv, dq, dk, dv}, [&](auto run, unsigned grid) {
      launch(attention_unpermute_qkv_kernel<E, decltype(run)::value>, grid, kThreads, 0, c.stream,
             static_cast<E*>(dqkv), static_cast<const E*>(dq), static_cast<const E*>(dk),
             static_cast<const E*>(dv), B, T, NH, hs);
    });
  });
}

}  // namespace tg::gpu
