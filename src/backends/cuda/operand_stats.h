// operand_stats.h: the CUDA backend's operand view (src/numerics/operand_view.h): the probes'
// statistics of a block-linear operand reduced on the device (operand_stats.cu over
// kernels/operand_stats.cuh and the block quantizer of scaled.h), so that a measured step
// downloads a few numbers per statistic instead of every operand.
#pragma once
#include <memory>

#include "launch.h"
#include "src/numerics/operand_view.h"

namespace tg::gpu {

// A view of t(rows, cols) (fp32, bf16 or fp16 on the device of c), valid while t is unchanged
// and c outlives it. Its working copies live in c's block-scaled staging scratch, which no
// linear holds between calls.
std::unique_ptr<OperandView> make_operand_view(Ctx& c, Tensor t, int rows, int cols);

}  // namespace tg::gpu
