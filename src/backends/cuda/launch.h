// launch.h: what the CUDA backend's translation units share (nvcc only): the launch context
// (stream, device properties, BLAS handles, scratch memory), error checks, type dispatch and
// the host-side launchers of each op (one .cu per kernels/*.cuh; the FP8 ones in fp8.h).
//
// Launchers take raw device pointers and element types; they only enqueue work on the
// stream (no host synchronisation) unless their comment says they return a value.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cublaslt.h"
#include "kernels/amax.cuh"
#include "kernels/common.cuh"
#include "src/backends/backend.h"
#include "staging.h"

namespace tg::gpu {

[[noreturn]] inline void cuda_fail(const char* what, const char* file, int line) {
  throw Error(strf("CUDA error at %s:%d: %s", file, line, what));
}
#define TG_CUDA_CHECK(x)                                                     \
  do {                                                                       \
    cudaError_t tg_err_ = (x);                                               \
    if (tg_err_ != cudaSuccess)                                              \
      ::tg::gpu::cuda_fail(cudaGetErrorString(tg_err_), __FILE__, __LINE__); \
  } while (0)
#define TG_CUBLAS_CHECK(x)                                                     \
  do {                                                                         \
    cublasStatus_t tg_st_ = (x);                                               \
    if (tg_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::tg::gpu::cuda_fail(cublasGetStatusString(tg_st_), __FILE__, __LINE__); \
  } while (0)
// After a launch: a bad configuration shows up here, not at the next synchronisation.
#define TG_LAUNCH_CHECK() TG_CUDA_CHECK(cudaGetLastError())

// kernel<<<grid, block, smem, stream>>>(args...), written as a call so that the emulated
// tests (tests/cuda/cuda_emulation.h, which defines TG_CUDA_EMULATION) run these same
// launchers on the CPU, the kernels' threads emulated and the launch queued on the stream.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            A... args) {
#ifdef TG_CUDA_EMULATION
  emu::launch(grid, block, smem, stream, kernel, args...);
#else
  // (clang-format reads the chevrons of a .h as shifts)
  // clang-format off
  kernel<<<grid, block, smem, stream>>>(args...);
  // clang-format on
#endif
}

// Scratch buffers the ops keep between calls (grown on demand, counted in the backend's
// bytes_in_use). Two live uses at once must have different slots.
enum ScratchSlot {
  kScratchPartialA,  // reduction partials
  kScratchPartialB,
  kScratchResult,  // small results read back by the host
  kScratchQ,       // attention: q, k, v, y / dy in (B, NH, T, hs)
  kScratchK,
  kScratchV,
  kScratchY,
  kScratchS,   // attention: scores / dP in T (B, NH, T, T)
  kScratchDS,  // attention: dS in T (B, NH, T, T)
  kScratchDQ,
  kScratchDK,
  kScratchDV,
  kScratchWideA,  // matmul_forward: fp32 copies of mixed-type operands (none in training)
  kScratchWideB,
  kScratchWideC,
  kScratchWideOut,
  kScratchAcc,      // matmul fallback: fp32 products
  kScratchBuckets,  // encoder backward: token buckets
  kScratchQStageA,  // block-scaled linears (scaled.h): fp32 operands, transposed as needed
  kScratchQStageB,
  kScratchQA,  // their quantize-dequantized copies (bf16 or fp32)
  kScratchQB,
  kScratchQAmax,    // per (row, column group) amax
  kScratchQScales,  // per group scale pairs
  kScratchQWords,   // tensor amax bits, the GEMM's tensor factors, a backward's dout^T amax
  kScratchQAcc,     // fp32 GEMM products
  kScratchQSplitA,  // precision.mode=auto's split channels: their columns and product
  kScratchQSplitB,
  kScratchQSplitAcc,
  kScratchQSmooth,      // channel smoothing's factors (the recipe's, uploaded per forward)
  kScratchQScaleA,      // native block-scaled GEMMs (matmul_native.cu): the operands' scale
  kScratchQScaleB,      // tensors in cuBLASLt's layouts (their codes go in kScratchQA / QB)
  kScratchQCheck,       // the native path's self-check: its random operands
  kScratchQCheckAcc,    // and its two results
  kScratchStatsAmax,    // operand statistics (operand_stats.h): per (row, column group) amax
  kScratchStatsScales,  // per group scale pairs
  kScratchStatsSums,    // per block partial sums
  kScratchStatsWords,   // maxima, counts and totals read back by the host
  kScratchStatsArgs,    // smoothing factors and split channels
  kScratchCudnn,        // cuDNN's attention workspace (attention_cudnn.cu), sized by its graphs
  kNumScratch
};

// A grid-stride launch size for n elements of `threads` per block: enough blocks to fill each
// of the `sms` multiprocessors `blocks_per_sm` times over, never more than the work needs,
// at least one.
inline unsigned grid_stride_blocks(size_t n, int threads, int sms, int blocks_per_sm) {
  size_t blocks = (n + threads - 1) / threads;
  const size_t cap = size_t(sms > 0 ? sms : 1) * size_t(blocks_per_sm);
  if (blocks > cap) blocks = cap;
  return unsigned(blocks > 0 ? blocks : 1);
}

struct CudnnAttention;  // attention_cudnn.cu: the cuDNN handle and its graphs, made on first use

struct Ctx {
  cudaStream_t stream = nullptr;
  cudaDeviceProp prop{};
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  std::function<void*(ScratchSlot, size_t)> scratch;  // device memory of at least `bytes`
  HostStaging* staging = nullptr;  // pinned memory for upload / download (one per stream)
  BackendOptions opt;              // cuda.gemm, cuda.gelu_epilogue, cuda.attention
  std::shared_ptr<CudnnAttention> cudnn;  // cuda.attention=cudnn|auto once cuDNN has run

  LtContext lt_context() const { return {lt, lt_workspace, lt_workspace_bytes, stream}; }

  // A grid-stride launch size for n elements (grid_stride_blocks, 32 blocks per SM).
  unsigned grid(size_t n, int threads) const {
    return grid_stride_blocks(n, threads, prop.multiProcessorCount, 32);
  }
};

// The stream of a CUDA backend (backend.cu): what a communicator orders its collectives with.
cudaStream_t backend_stream(Backend& b);

// dst (device) <- host, queued on c's stream through its pinned staging (staging.h): the host
// buffer may be reused when this returns.
inline void upload(Ctx& c, void* dst, const void* host, size_t bytes) {
  stage_upload(*c.staging, c.stream, dst, host, bytes);
}
// host <- src (device) after the work queued on c's stream; returns once host holds it.
inline void download(Ctx& c, void* host, const void* src, size_t bytes) {
  stage_download(*c.staging, c.stream, host, src, bytes);
}

// Calls f(T{}) with T the device storage type of dtype (fp32, bf16, fp16).
template <typename F>
void dispatch(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::BF16: f(bf16{}); break;
    case DType::F16: f(f16{}); break;
    default: throw Error(strf("cuda backend: %s does not support %s tensors", op, dtype_name(t)));
  }
}

// ---- encoder.cu ----
void encoder_forward(Ctx& c, DType t, void* out, const int32_t* tokens, const void* wte,
                     const void* wpe, int B, int T, int C);
// Groups positions by token on the host: from host_tokens (a host copy of tokens) when
// given, else it reads the tokens back (a small copy the host waits for).
void encoder_backward(Ctx& c, DType t, void* dwte, void* dwpe, const void* dout,
                      const int32_t* tokens, const int32_t* host_tokens, int B, int T, int C);
// ---- residual.cu, gelu.cu ----
void residual_forward(Ctx& c, DType t, void* out, const void* a, const void* b, size_t n);
// The producers of a per-tensor-scaled linear's input (GELU's, the layernorms', the cuBLAS
// attention's output) take `amax` (device, when given; must start at 0): the max of their
// output's |x| bits as stored (kernels/amax.cuh), the amax that linear's quantizer then reads
// instead of taking it again (Backend's InputAmax). Without it they do as before.
void gelu_forward(Ctx& c, DType t, void* out, const void* inp, size_t n, unsigned* amax = nullptr);
void gelu_backward(Ctx& c, DType t, void* dinp, const void* inp, const void* dout, size_t n);
// ---- loss_scale.cu, adamw.cu ----
// Queues loss_scale_step_kernel: d's state updated from check = {sum of squares, non-finite}.
void loss_scale_decide(Ctx& c, LossScaleDevice* d, const float* check, const LossScaleParams& p,
                       double clip);
// With d: the gradient factor and skip flag come from d (a.grad_scale unused). m and v hold
// a.m_format's and a.v_format's storage (fp32, or bf16 / fp16 codes). master is per a.master
// (src/backends/backend.h's AdamWArgs): the fp32 master weights, unused (bf16-sr), or the bf16
// compensation (bf16-kahan). amax (its words zeroed before): where the kernel takes the
// linears' weight amaxes as it writes the weights (Backend's WeightAmax; kernels/amax.cuh).
void adamw(Ctx& c, DType pt, void* params, void* master, const void* grads, void* m, void* v,
           size_t n, const AdamWArgs& a, const LossScaleDevice* d = nullptr,
           const SegmentAmax& amax = {});
void convert(Ctx& c, DType dt, void* dst, DType stype, const void* src, size_t n,
             const Rounding& r);
// ---- wire.cu: gradients on the wire (src/numerics/wire_format.h), rows of `part` elements ----
// out (rows x wire_bytes(part) bytes) = the fp32 rows of x encoded.
void wire_encode(Ctx& c, const float* x, size_t part, size_t rows, WireFormat f, uint8_t* out);
// sum (part) = -0 + every row of `in` decoded, added in row order.
void wire_sum(Ctx& c, const uint8_t* in, size_t part, size_t rows, WireFormat f, float* sum);
// out (rows x part) = every row of `in` decoded.
void wire_decode(Ctx& c, const uint8_t* in, size_t part, size_t rows, WireFormat f, float* out);
// ---- global_norm.cu, classifier.cu ----
// Enqueues the two norm passes; out (device, 2 floats) = {sum of (x * inv_scale)^2,
// non-finite count}.
void norm(Ctx& c, DType t, const void* x, size_t n, float inv_scale, float* out);
// With dloss != 0 the gradient goes to dlogits in type g, row n at element n * ld: the logits
// themselves (fp32), or bf16 / fp16 over the first half of each fp32 row (dlogits_view).
void classifier(Ctx& c, const float* logits, float* losses, const int32_t* targets, DType g,
                void* dlogits, size_t ld, float dloss, int N, int V, int Vp);

// ---- layernorm.cu ----
// amax: out's, as gelu_forward's above.
void layernorm_forward(Ctx& c, DType t, void* out, float* mean, float* rstd, const void* inp,
                       const void* w, const void* b, int N, int C, unsigned* amax = nullptr);
void residual_layernorm_forward(Ctx& c, DType t, void* res, void* out, float* mean, float* rstd,
                                const void* a, const void* bb, const void* w, const void* b, int N,
                                int C, unsigned* amax = nullptr);
void layernorm_backward(Ctx& c, DType t, void* dinp, void* dw, void* db, const void* dout,
                        const void* inp, const void* w, const float* mean, const float* rstd, int N,
                        int C);

// ---- matmul.cu ----
// Row-major D(M,N) = op(A)(M,K) op(B)(K,N) + bias(N) + beta D, fp32 accumulation, one
// rounding into D's type. A and B share a type; D is that type or fp32; bias (may be null)
// has D's type. cuBLASLt (bias in its epilogue); plain cuBLAS + an epilogue kernel when
// cuBLASLt has no algorithm for the shapes and alignments.
// c.opt.gemm_fallback (cuda.gemm=fallback) skips cuBLASLt (the fallback for every GEMM;
// the tests run both paths).
void gemm(Ctx& c, bool trans_a, bool trans_b, int M, int N, int K, DType ab, const void* A, int lda,
          const void* B, int ldb, DType dt, void* D, int ldd, float beta, const void* bias);
// c.opt.gelu_epilogue (cuda.gelu_epilogue): the MLP's first linear runs as one cuBLASLt
// GEMM with the GELU_AUX_BIAS epilogue (pre-activation and GELU output written together;
// the GELU then sees the unrounded pre-activation, a small difference from the CPU in
// 16-bit). Returns false (nothing enqueued) when disabled or not applicable.
bool gemm_bias_gelu(Ctx& c, int M, int N, int K, DType t, const void* A, const void* B,
                    const void* bias, void* pre, void* out);
// dbias(OC) += column sums of dout(N, OC), deterministic.
void bias_backward(Ctx& c, DType t, void* dbias, const void* dout, int N, int OC);

// ---- attention.cu ----
// The cuBLAS path (cuda.attention=cublas, auto where cuDNN does not run, and the forward of a
// shape cuDNN refuses after start-up): the T x T scores and probabilities materialised in the
// compute type, as the CPU's reference keeps them (kernels/attention.cuh). amax: out's, as
// gelu_forward's above.
void attention_forward(Ctx& c, DType t, void* out, void* att, const void* qkv, int B, int T, int C,
                       int NH, unsigned* amax = nullptr);
void attention_backward(Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* att, int B, int T, int C, int NH);

// ---- attention_cudnn.cu ----
// cuDNN's fused flash attention (SDPA, through the header-only cudnn-frontend), the CUDA
// backend's attention_forward_lse / attention_backward_lse: q, k, v read in place from
// qkv (B, T, 3, NH, hs), out (B, T, NH, hs), lse (B, NH, T) fp32 natural-log logsumexp of the
// scaled causal scores, dqkv written in place (every element: no accumulation). bf16 and fp16
// only. Built with TG_CUDNN (the Makefile defines it when cudnn_frontend.h is found); libcudnn
// is opened with dlopen on first use, never linked.
// The library's state: whether the build has cuDNN, whether libcudnn loaded, and a line that
// says which library (version, file) or why not. `lib` is cuda.cudnn_lib ("" searches); the
// first call loads for the process and later calls return the same answer.
CudnnProbe cudnn_probe(const std::string& lib);
void attention_forward_cudnn(Ctx& c, DType t, void* out, float* lse, const void* qkv, int B,
                             int T, int C, int NH);
void attention_backward_cudnn(Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse, int B, int T, int C, int NH);
// Builds (and keeps for the run) the forward graph with lse and, with `backward`, the backward
// graph of one shape on c's device, as the two calls above will: "" when they build, else
// which graph failed and cuDNN's message. The backend's start-up check (settle_attention,
// both graphs) and a forward-only shape's after it (sampling's B 1 x T t: the forward's).
std::string cudnn_build_graphs(Ctx& c, DType t, int B, int T, int C, int NH, bool backward);
// The three graphs of one shape (forward with and without lse, backward) checked by the
// frontend's validate() as for compute capability `sm` (e.g. 90), which needs no GPU: "" when
// valid, else the frontend's message.
std::string cudnn_validate_graphs(int B, int T, int C, int NH, DType t, int sm);

}  // namespace tg::gpu
