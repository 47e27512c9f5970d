// host_operand_view.h: the operand view (src/numerics/operand_view.h) of an fp32 matrix in host
// memory: its statistics computed by the CPU ops (src/backends/cpu/quant_error.h) on the
// matrix or on a prepared copy. The CPU backend hands these out; the tests and the probes' host
// entry point (LinearProbe::take, src/model/model.h) make them directly.
#pragma once
#include <utility>
#include <vector>

#include "src/numerics/operand_view.h"

namespace tg {

// The host view: x is fp32 in host memory (borrowed, or owned when moved in). quant_error is
// cpu::quant_error on x or on a prepared copy (the transposed and the smoothed/split copies
// are made once per view and reused across recipes).
class HostOperandView final : public OperandView {
 public:
  HostOperandView(const float* x, int rows, int cols) : OperandView(rows, cols), x_(x) {}
  HostOperandView(std::vector<float> x, int rows, int cols)
      : OperandView(rows, cols), own_(std::move(x)), x_(own_.data()) {}
  float amax() override;
  std::vector<float> column_amax() override;
  QuantError quant_error(const OperandRecipe& o, uint64_t seed, const OperandVariant& v) override;
  std::vector<float> values() override {
    return std::vector<float>(x_, x_ + size_t(rows()) * cols());
  }

 private:
  std::vector<float> own_;
  const float* x_;
  std::vector<float> xt_;  // x^T, once asked for
  // The last smoothed / split copy (before any transpose) and what it was made with.
  std::vector<float> prep_, prep_t_;
  OperandVariant prep_key_;
  std::vector<int> prep_split_;
  bool have_prep_ = false, have_prep_t_ = false;
  const float* prepared(const OperandVariant& v);
};

// x(rows, cols) transposed into a new (cols, rows) matrix (the operands the backward GEMMs
// take transposed).
std::vector<float> transposed(const float* x, int rows, int cols);

}  // namespace tg
