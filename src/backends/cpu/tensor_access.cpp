// tensor_access.cpp: tensor_access.h's conversions and fp32 views.
#include "tensor_access.h"

#include "gemm_bf16.h"
#include "ops.h"
#include "src/base/common.h"

namespace tg::cpu {

void unsupported(const char* op, DType t) {
  throw Error(strf("cpu backend: %s does not support %s tensors", op, dtype_name(t)));
}

void convert_tensor(Tensor dst, Tensor src, const Rounding& r) {
  if (dst.numel != src.numel) throw Error("cpu backend: convert length mismatch");
  dispatch("convert", dst.dtype, [&](auto* dtag) {
    dispatch("convert", src.dtype, [&](auto* stag) {
      using D = TG_ELEM(dtag);
      using S = TG_ELEM(stag);
      constexpr bool narrow_to_narrow = !std::is_same_v<S, float> && !std::is_same_v<S, double> &&
                                        !std::is_same_v<D, float> && !std::is_same_v<D, double>;
      constexpr bool mixes_double =
          (std::is_same_v<D, double> && !std::is_same_v<S, double> &&
           !std::is_same_v<S, float>) ||
          (std::is_same_v<S, double> && !std::is_same_v<D, double> && !std::is_same_v<D, float>);
      if constexpr (narrow_to_narrow || mixes_double)
        throw Error(strf("cpu backend: no conversion from %s to %s", dtype_name(src.dtype),
                         dtype_name(dst.dtype)));
      else
        convert(P<D>(dst), P<S>(src), dst.numel, r);
    });
  });
}

bool all_wide_and_same(std::initializer_list<Tensor> ts) {
  DType t = DType::F32;
  bool first = true;
  for (const Tensor& x : ts) {
    if (!x) continue;
    if (x.dtype != DType::F32 && x.dtype != DType::F64) return false;
    if (!first && x.dtype != t) return false;
    t = x.dtype;
    first = false;
  }
  return true;
}

bool hardware_bf16(std::initializer_list<Tensor> ts) {
  if (!narrow_gemm_hardware()) return false;
  for (const Tensor& t : ts)
    if (t.dtype != DType::BF16) return false;
  return true;
}

float* wide(Tensor t, std::vector<float>& buf, bool load) {
  if (!t) return nullptr;
  if (t.dtype == DType::F32) return P<float>(t);
  grow(buf, t.numel);
  if (load) convert_tensor(Tensor{buf.data(), DType::F32, t.numel}, t, Rounding{});
  return buf.data();
}

float* copy_wide(Tensor t, std::vector<float>& buf) {
  grow(buf, t.numel);
  convert_tensor(Tensor{buf.data(), DType::F32, t.numel}, t, Rounding{});
  return buf.data();
}

void narrow_back(Tensor t, float* f) {
  if (t && t.dtype != DType::F32) convert_tensor(t, Tensor{f, DType::F32, t.numel}, Rounding{});
}

}  // namespace tg::cpu
