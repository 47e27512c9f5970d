// host_operand_view.cpp: the host operand view (see host_operand_view.h): the probes'
// statistics of an fp32 host copy, computed as the probes computed them before the views
// existed (the same loops, in the same order, so the CPU backend's runs are unchanged bit for
// bit).
#include "host_operand_view.h"

#include <algorithm>
#include <cmath>

#include "ops.h"

namespace tg {

std::vector<float> transposed(const float* x, int rows, int cols) {
  std::vector<float> t(size_t(rows) * cols);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) t[size_t(c) * rows + r] = x[size_t(r) * cols + c];
  return t;
}

float HostOperandView::amax() {
  const size_t n = size_t(rows()) * cols();
  float m = 0;
  for (size_t i = 0; i < n; i++) m = std::max(m, std::fabs(x_[i]));  // NaN: ignored
  return m;
}

std::vector<float> HostOperandView::column_amax() {
  std::vector<float> m(size_t(cols()), 0.0f);
  for (int r = 0; r < rows(); r++)
    for (int c = 0; c < cols(); c++)
      m[size_t(c)] = std::max(m[size_t(c)], std::fabs(x_[size_t(r) * cols() + c]));
  return m;
}

namespace {
bool has_smooth(const OperandVariant& v) { return v.smooth && !v.smooth->empty(); }
bool has_split(const OperandVariant& v) { return v.split && !v.split->empty(); }
}  // namespace

// x with v's smoothing and split applied (x itself when neither): one copy per view while the
// probes ask for the same variant, as they do for every recipe of one operand.
const float* HostOperandView::prepared(const OperandVariant& v) {
  if (!has_smooth(v) && !has_split(v)) return x_;
  const bool same = have_prep_ && prep_key_.smooth == v.smooth &&
                    prep_key_.smooth_divide == v.smooth_divide &&
                    prep_split_ == (has_split(v) ? *v.split : std::vector<int>{});
  if (same) return prep_.data();
  prep_.assign(x_, x_ + size_t(rows()) * cols());
  if (has_smooth(v)) cpu::smooth_columns(prep_.data(), rows(), cols(), *v.smooth, v.smooth_divide);
  prep_split_ = has_split(v) ? *v.split : std::vector<int>{};
  for (int r = 0; r < rows(); r++)
    for (int c : prep_split_) prep_[size_t(r) * cols() + c] = 0.0f;
  prep_key_ = v;
  have_prep_ = true;
  have_prep_t_ = false;
  return prep_.data();
}

QuantError HostOperandView::quant_error(const OperandRecipe& o, uint64_t seed,
                                        const OperandVariant& v) {
  const float* x = prepared(v);
  if (!v.transposed) return cpu::quant_error(x, rows(), cols(), o, seed);
  if (x == x_) {
    if (xt_.empty()) xt_ = transposed(x_, rows(), cols());
    return cpu::quant_error(xt_.data(), cols(), rows(), o, seed);
  }
  if (!have_prep_t_) {
    prep_t_ = transposed(x, rows(), cols());
    have_prep_t_ = true;
  }
  return cpu::quant_error(prep_t_.data(), cols(), rows(), o, seed);
}

}  // namespace tg
