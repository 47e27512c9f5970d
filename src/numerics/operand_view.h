// operand_view.h: one block-linear operand as the probes measure it (precision.mode=auto,
// quantization telemetry, channel smoothing), wherever the tensor lives.
//
// The probes (LinearProbe, src/model/model.h) ask an operand x(rows, cols) for a few statistics
// and never for its values, so a backend can reduce them where the tensor is and hand back
// only the numbers: the CPU (and any backend without device statistics) measures a host fp32
// copy with HostOperandView (src/backends/cpu/host_operand_view.h); the CUDA backend runs its
// reductions on the device (src/backends/cuda/operand_stats.cu) and downloads a few words per
// statistic. Both compute the same things: the maxima and the counts exactly, the two sums of
// squares up to their order of summation (cpu::quant_error's sums run in fp64 over the elements in
// order; a device sums per block and then the blocks).
//
// The statistics:
//   amax()         max |x| over the tensor (NaN ignored; 0 for an empty tensor)
//   column_amax()  max |x| of every column (the input channels of a linear's input or
//                  weight), NaN ignored
//   quant_error(o, seed, v)  cpu::quant_error of the operand variant v (OperandVariant) in
//                  recipe operand o with random bits from seed (the CUDA view measures
//                  quantized operands only: a bf16 one loses nothing, and no probe asks)
//   values()       the operand itself in fp32 on the host (a full download on a device: for
//                  what no statistic here covers, and the tests that compare the two views)
// A view is valid while the tensor it shows is unchanged: during LinearProbe::take.
#pragma once
#include <cstdint>
#include <vector>

#include "quant_error.h"
#include "recipe.h"

namespace tg {

// Which matrix quant_error measures, from the operand x(rows, cols): x's columns multiplied
// by smooth (smooth_divide: divided by it; one factor per column: a smoothed forward operand,
// src/precision/smoothing.h), the columns in split set to zero (the outlier channels a forward GEMM
// runs unquantized), then, when transposed, the transpose (cols, rows) (the backward GEMMs'
// operands, whose reduction runs along x's rows). Null pointers and empty lists: none.
struct OperandVariant {
  bool transposed = false;
  const std::vector<float>* smooth = nullptr;
  bool smooth_divide = false;
  const std::vector<int>* split = nullptr;
};

class OperandView {
 public:
  OperandView(int rows, int cols) : rows_(rows), cols_(cols) {}
  virtual ~OperandView() = default;
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  virtual float amax() = 0;
  virtual std::vector<float> column_amax() = 0;
  virtual QuantError quant_error(const OperandRecipe& o, uint64_t seed,
                                 const OperandVariant& v) = 0;
  virtual std::vector<float> values() = 0;

 private:
  int rows_, cols_;
};

}  // namespace tg
