#include "memory_gpu.h"

#include <cstdio>

#include "src/base/common.h"
#include "src/config/config.h"
#include "src/model/model.h"
#include "src/precision/cuda_scratch.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"

namespace tg {

namespace {

// Which attention path each mode was planned with, where that is not simply the key's value.
void print_attention_plan(const Config& cfg, const GPTConfig& mc, const std::vector<Mode>& modes) {
  using R = AttentionRequest;
  const R a = cfg.cuda.attention;
  const int hs = mc.n_embd / mc.n_head;
  if (a == R::Auto) {
    printf(
        "cuda.attention=auto is planned as cublas (T x T probabilities), the larger of its two "
        "outcomes; where cuDNN runs (the start-up line says), --cuda.attention=cudnn shows "
        "its plan: lse (B, NH, T) and cuDNN's workspace instead.\n");
    return;
  }
  if (effective_attention(a) != R::Cudnn) return;
  for (Mode m : modes) {
    std::string why;
    if (!cudnn_attention_supported(mode_dtype(m), hs, &why))
      printf(
          "%s: cuda.attention=%s cannot run (%s): planned as cublas; a run stops with that "
          "error.\n",
          mode_name(m), enum_name(a), why.c_str());
  }
  printf(
      "cuDNN's workspace is in the attention column: its backward's fp32 dQ accumulator "
      "(B, NH, T, hs) and row sums (B, NH, T); the model keeps lse (B, NH, T) instead of the "
      "T x T probabilities.\n");
}

}  // namespace

void print_cuda_scratch(const Config& cfg, const GPTConfig& mc, const std::vector<Mode>& modes) {
  if (modes.empty()) return;
  auto mib = [](size_t b) { return strf("%.1f MiB", double(b) / 1048576.0); };
  const int B = cfg.data.batch_size, T = cfg.data.seq_len;
  printf(
      "\nOn a GPU the CUDA backend also holds its own scratch (src/precision/cuda_scratch.h; "
      "cuda.attention=%s%s):\n\n"
      "| mode | cuBLASLt workspace | attention scratch | partials, buckets, results | GPU total "
      "per process |\n|---|---:|---:|---:|---:|\n",
      enum_name(cfg.cuda.attention),
      cfg.cuda.gemm == CudaGemm::Fallback ? ", cuda.gemm=fallback" : "");
  for (Mode m : modes) {
    Config c = cfg;
    set_precision_mode(c, m);
    const CudaScratchPlan p =
        plan_cuda_scratch(mc, mode_dtype(m), B, T, cfg.cuda.attention,
                          cfg.cuda.gemm == CudaGemm::Fallback);
    const size_t rest = p.total() - p.workspace - p.attention();
    printf("| %s | %s | %s | %s | %s |\n", mode_name(m), mib(p.workspace).c_str(),
           mib(p.attention()).c_str(), mib(rest).c_str(),
           mib(planned_gpu_bytes(c, mc, 1)).c_str());
  }
  printf(
      "\nThe GPU total is the first table's plan with this scratch (and, for the block-scaled "
      "modes, their native path's copies and scratch below); the CUDA context and the "
      "allocator's slack come on top.\n");
  print_attention_plan(cfg, mc, modes);
}

}  // namespace tg
