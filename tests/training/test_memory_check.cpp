// The memory check of `train` on a GPU (src/training/memory_check.h): the GPU memory plan
// against the device's free memory, with the margin, and the refusal's wording.
#include <doctest/doctest.h>

#include "src/config/config.h"
#include "src/precision/quant_memory.h"
#include "src/training/memory_check.h"

namespace {
bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}
}  // namespace

TEST_CASE("memory check: a GPU run whose plan passes the device's free memory is refused") {
  tg::Config cfg;
  cfg.data.batch_size = 8;
  cfg.data.seq_len = 1024;
  tg::MemoryPlan p;
  p.weights = size_t(500) << 20;
  p.activations = size_t(8000) << 20;
  const size_t gib = size_t(1) << 30;
  // 9 GiB planned: 9.43 GiB with the margin.
  const size_t planned = 9 * gib;
  CHECK(tg::gpu_memory_refusal(cfg, p, planned, 10 * gib, 80 * gib, "H100").empty());
  const std::string e =
      tg::gpu_memory_refusal(cfg, p, planned, 9 * gib + gib / 4, 80 * gib, "H100");
  INFO(e);
  CHECK(has(e,
            "this run plans 9.0 GiB of GPU memory (with 2% and 256 MiB for the allocator, "
            "9.4 GiB) and H100 has 9.2 GiB free of 80.0 GiB"));
  CHECK(has(e, "shrink data.batch_size (now 8) or data.seq_len (now 1024)"));
  CHECK(has(e, "--train.memory_check=false skips this check"));
  // Free memory not known: no refusal.
  CHECK(tg::gpu_memory_refusal(cfg, p, planned, 0, 0, "H100").empty());
}
