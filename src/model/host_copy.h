// host_copy.h: model tensors copied to the host, widened (for losses, checkpoints and tests).
#pragma once

#include <vector>

#include "src/backends/backend.h"

namespace tg {

// A vector of another element type, element by element.
template <typename Dst, typename Src>
std::vector<Dst> convert(const std::vector<Src>& v) {
  return std::vector<Dst>(v.begin(), v.end());
}

// Any tensor as fp64 on the host (16-bit types are widened on the backend first).
std::vector<double> download_f64(Backend& be, Tensor t);
// A bf16, fp16 or fp32 tensor widened on the host (no device scratch: the plan counts none).
std::vector<float> download_host_f32(Backend& be, Tensor t);

}  // namespace tg
