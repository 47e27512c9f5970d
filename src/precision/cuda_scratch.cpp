// cuda_scratch.cpp: the CUDA backend's scratch plan (cuda_scratch.h), slot by slot.
#include "cuda_scratch.h"

#include <algorithm>

namespace tg {

namespace {

// kernels/layernorm.cuh's rows_per_chunk and kernels/matmul.cuh's bias_rows_per_chunk.
int chunk_rows(int N) { return N <= 64 * 4096 ? 64 : (N + 4095) / 4096; }
int chunks(int N) { return (N + chunk_rows(N) - 1) / chunk_rows(N); }
constexpr size_t kNormBlocks = 512;  // kernels/global_norm.cuh

size_t round64(size_t b) { return (b + 63) / 64 * 64; }

void grow(size_t& slot, size_t bytes) { slot = std::max(slot, bytes); }

// The materialised path's slots (forward and backward), or cuDNN's workspace (its backward's
// fp32 dQ accumulator and row sums).
void plan_attention(CudaScratchPlan& p, const GPTConfig& c, DType t, int B, int T,
                    AttentionRequest attention) {
  const int NH = c.n_head, hs = c.n_embd / c.n_head;
  const size_t es = dtype_size(t), btc = size_t(B) * T * c.n_embd, bh = size_t(B) * NH;
  const AttentionPath path = planned_attention(attention, t, hs);
  if (path == AttentionPath::Cudnn) {
    p.cudnn = bh * T * (size_t(hs) + 1) * 4;
    return;
  }
  for (int s : {kCudaQ, kCudaK, kCudaV, kCudaY, kCudaDQ, kCudaDK, kCudaDV}) grow(p.slot[s], btc * es);
  // Scores / dP and dS, (B, NH, T, T) in the compute type (attention.cu's GEMMs write them so).
  grow(p.slot[kCudaS], bh * T * T * es);
  grow(p.slot[kCudaDS], bh * T * T * es);
}

}  // namespace

const char* cuda_slot_name(int slot) {
  static const char* const names[kCudaSlots] = {
      "PartialA", "PartialB", "Result", "Q",     "K",     "V",     "Y",       "S",   "DS",
      "DQ",       "DK",       "DV",     "WideA", "WideB", "WideC", "WideOut", "Acc", "Buckets"};
  return slot >= 0 && slot < kCudaSlots ? names[slot] : "?";
}

AttentionPath planned_attention(AttentionRequest attention, DType t, int hs) {
  using R = AttentionRequest;
  std::string why;
  if (effective_attention(attention) == R::Cudnn && cudnn_attention_supported(t, hs, &why))
    return AttentionPath::Cudnn;
  return AttentionPath::Cublas;
}

size_t CudaScratchPlan::attention() const {
  size_t s = cudnn;
  for (int i = kCudaQ; i <= kCudaDV; i++) s += slot[i];
  return s;
}

size_t CudaScratchPlan::total() const {
  size_t s = round64(workspace) + round64(results) + round64(cudnn);
  for (size_t b : slot)
    if (b) s += round64(b);
  return s;
}

CudaScratchPlan plan_cuda_scratch(const GPTConfig& c, DType t, int B, int T,
                                  AttentionRequest attention, bool gemm_fallback) {
  CudaScratchPlan p;
  const int N = B * T, C = c.n_embd;
  plan_attention(p, c, t, B, T, attention);
  // Layernorm backward: C per chunk in both; the bias gradients: OC per chunk in PartialA
  // (the widest is fc's 4C); the gradient norm: 512 sums in each.
  const size_t ln = size_t(chunks(N)) * C * 4;
  grow(p.slot[kCudaPartialA], std::max({ln, size_t(chunks(N)) * 4 * C * 4, kNormBlocks * 4}));
  grow(p.slot[kCudaPartialB], std::max(ln, kNormBlocks * 4));
  const size_t distinct = std::min<size_t>(size_t(N), size_t(c.vocab_size));
  grow(p.slot[kCudaBuckets], (2 * distinct + 1 + size_t(N)) * 4);
  // The fallback's fp32 products: the widest GEMM output, N x OC or OC x C (a weight
  // gradient) for the widest OC, the lm_head's Vp or fc's 4C.
  if (gemm_fallback) {
    const size_t oc = std::max<size_t>(size_t(c.padded_vocab_size), size_t(4) * C);
    grow(p.slot[kCudaAcc], std::max<size_t>(size_t(N), size_t(C)) * oc * 4);
  }
  return p;
}

}  // namespace tg
