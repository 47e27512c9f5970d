// tensor_access.h: how the CPU backend's ops reach a Tensor's elements: a typed pointer, the
// dispatch over storage types, and the fp32 views its matmuls take of 16-bit operands (a
// tensor's own memory when it is fp32, else a widened copy in kept scratch, rounded back once).
// Shared by cpu_backend.cpp and tensor_scaled_linears.cpp, inside src/backends/cpu/ only.
#pragma once
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "src/backends/backend.h"
#include "storage.h"

namespace tg::cpu {

[[noreturn]] void unsupported(const char* op, DType t);

template <typename T>
T* P(const Tensor& t) {
  return static_cast<T*>(t.data);
}
#define TG_ELEM(tag) std::remove_pointer_t<decltype(tag)>

// Calls f with a typed null pointer for the storage type of dtype t.
template <typename F>
void dispatch(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::F32: f(static_cast<float*>(nullptr)); break;
    case DType::F64: f(static_cast<double*>(nullptr)); break;
    case DType::BF16: f(static_cast<bf16*>(nullptr)); break;
    case DType::F16: f(static_cast<f16*>(nullptr)); break;
    default: unsupported(op, t);
  }
}
// The same, for ops that exist only in float and double.
template <typename F>
void dispatch_wide(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::F32: f(static_cast<float*>(nullptr)); break;
    case DType::F64: f(static_cast<double*>(nullptr)); break;
    default: unsupported(op, t);
  }
}

// dst = src converted (Backend::convert on host memory): between fp32 / fp64 and every type.
void convert_tensor(Tensor dst, Tensor src, const Rounding& r);

// Scratch holds at least n elements. It never shrinks: resize() to a smaller size and back
// would zero the regrown part on every call (a few percent of an fp8 step).
template <typename V>
void grow(V& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
}

// Whether every given tensor is fp32, or every one fp64 (empty ones ignored).
bool all_wide_and_same(std::initializer_list<Tensor> ts);
// Whether the bf16 GEMM takes these operands: the hardware path is on and all are bf16.
bool hardware_bf16(std::initializer_list<Tensor> ts);

// Scratch for widened matmul operands, kept between calls: out (outputs, dinp), a, b, c
// (operands, bias), dw, db (gradients accumulated into), g (dout's copy).
struct MatmulScratch {
  std::vector<float> out, a, b, c, dw, db, g;
};

// fp32 view of a tensor: its own memory when it is fp32, else `buf` (filled with the widened
// values when `load`). Empty tensors give nullptr.
float* wide(Tensor t, std::vector<float>& buf, bool load);
// A private fp32 copy of t in buf (for quantizing in place).
float* copy_wide(Tensor t, std::vector<float>& buf);
// Rounds fp32 results back into t when wide() handed out a buffer.
void narrow_back(Tensor t, float* f);

}  // namespace tg::cpu
