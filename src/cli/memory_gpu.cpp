#include "memory_gpu.h"

#include <cstdio>

#include "src/base/common.h"
#include "src/config/config.h"
#include "src/model/model.h"
#include "src/precision/cuda_scratch.h"
#include "src/precision/quant_memory.h"

namespace tg {

void print_cuda_scratch(const Config& cfg, const GPTConfig& mc, const std::vector<Mode>& modes) {
  if (modes.empty()) return;
  auto mib = [](size_t b) { return strf("%.1f MiB", double(b) / 1048576.0); };
  const int B = cfg.data.batch_size, T = cfg.data.seq_len;
  printf(
      "\nOn a GPU the CUDA backend also holds its own scratch (src/precision/cuda_scratch.h; "
      "cuda.attention=%s%s):\n\n"
      "| mode | cuBLASLt workspace | attention scratch | partials, buckets, results | GPU total "
      "per process |\n|---|---:|---:|---:|---:|\n",
      cfg.cuda.attention.c_str(), cfg.cuda.gemm == "fallback" ? ", cuda.gemm=fallback" : "");
  for (Mode m : modes) {
    Config c = cfg;
    c.precision.mode = m;
    const CudaScratchPlan p =
        plan_cuda_scratch(mc, mode_dtype(m), B, T, cfg.cuda.attention, cfg.cuda.gemm == "fallback");
    const size_t rest = p.total() - p.workspace - p.attention();
    printf("| %s | %s | %s | %s | %s |\n", mode_name(m), mib(p.workspace).c_str(),
           mib(p.attention()).c_str(), mib(rest).c_str(),
           mib(planned_gpu_bytes(c, mc, 1)).c_str());
  }
  printf(
      "\nThe GPU total is the first table's plan with this scratch (and, for the block-scaled "
      "modes, their native path's copies and scratch below); the CUDA context and the "
      "allocator's slack come on top.\n");
}

}  // namespace tg
