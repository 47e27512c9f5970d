// gelu (tanh approximation, as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// A 16-bit input (bf16, fp16) has only 65536 values, so for those types both passes read
// tables built once by the formulas' own loops over every code: the forward's table holds the
// rounded outputs (the same bits by construction), the backward's the fp32 local gradient,
// multiplied by dout and rounded as the loop does (tests/precision/test_precision.cpp checks every
// code against the loop). tanhf was a fifth of a bf16 training step. fp32 goes through blocks: the
// block's tanh arguments, their tanhs sixteen at a time (tanh_fp32, glibc's bits), then the rest of
// the formula, written as in the loops (the compiler rounds and fuses the same expressions the same
// way; tests/precision/test_precision.cpp checks both passes against the loops bit for bit).
// Without AVX-512F the loops run. The backward recomputes th rather than keeping the forward's:
// that would be one more activation-sized buffer per layer.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "tanh_fp32.h"

namespace tg::cpu {

namespace {
template <typename A>
constexpr A kGeluScale = A(0.7978845608028654);  // sqrt(2/pi)

template <typename T>
void gelu_forward_loop(T* out, const T* inp, size_t n) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    A x = ld(inp[i]);
    A cube = A(0.044715) * x * x * x;
    out[i] = st<T>(A(0.5) * x * (A(1) + std::tanh(kGeluScale<A> * (x + cube))));
  }
}

// The loop's local gradient alone, for the table (checked equal to the loop's, see above).
template <typename A>
inline A gelu_local_grad(A x) {
  A cube = A(0.044715) * x * x * x;
  A th = std::tanh(kGeluScale<A> * (x + cube));
  A dth = (A(1) - th * th) * kGeluScale<A> * (A(1) + A(3 * 0.044715) * x * x);
  return A(0.5) * (A(1) + th) + A(0.5) * x * dth;
}

template <typename T>
void gelu_backward_loop(T* dinp, const T* inp, const T* dout, size_t n) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    A x = ld(inp[i]);
    A cube = A(0.044715) * x * x * x;
    A th = std::tanh(kGeluScale<A> * (x + cube));
    A dth = (A(1) - th * th) * kGeluScale<A> * (A(1) + A(3 * 0.044715) * x * x);
    dinp[i] = st<T>((A(0.5) * (A(1) + th) + A(0.5) * x * dth) * ld(dout[i]));
  }
}

// fp32 in blocks of kBlock: the expressions are the loops' (keep them the same).
constexpr size_t kBlock = 512;

template <typename F>
void for_blocks(size_t n, F&& f) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; b++) f(b * kBlock, std::min(kBlock, n - b * kBlock));
}

// th[i] = tanh(sqrt(2/pi) (x + 0.044715 x^3)) for inp[0..m).
inline void gelu_tanh_block(float* th, const float* inp, size_t m) {
  for (size_t i = 0; i < m; i++) {
    float x = inp[i];
    float cube = float(0.044715) * x * x * x;
    th[i] = kGeluScale<float> * (x + cube);
  }
  tanh_fp32(th, m);
}

void gelu_forward_blocks(float* out, const float* inp, size_t n) {
  for_blocks(n, [&](size_t lo, size_t m) {
    float th[kBlock];
    gelu_tanh_block(th, inp + lo, m);
    for (size_t i = 0; i < m; i++) {
      float x = inp[lo + i];
      out[lo + i] = 0.5f * x * (1.f + th[i]);
    }
  });
}

void gelu_backward_blocks(float* dinp, const float* inp, const float* dout, size_t n) {
  for_blocks(n, [&](size_t lo, size_t m) {
    float th[kBlock];
    gelu_tanh_block(th, inp + lo, m);
    for (size_t i = 0; i < m; i++) {
      float x = inp[lo + i];
      float dth = (1.f - th[i] * th[i]) * kGeluScale<float> * (1.f + float(3 * 0.044715) * x * x);
      dinp[lo + i] = (0.5f * (1.f + th[i]) + 0.5f * x * dth) * dout[lo + i];
    }
  });
}

template <typename T>
constexpr bool kSixteenBit = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// Every 16-bit code's gelu (rounded) and local gradient (fp32), built on first use.
template <typename T>
struct GeluTables {
  std::vector<T> out;
  std::vector<float> grad;
  GeluTables() : out(65536), grad(65536) {
    std::vector<T> codes(65536);
    for (uint32_t c = 0; c < 65536; c++) codes[c] = T{uint16_t(c)};
    gelu_forward_loop(out.data(), codes.data(), codes.size());
    for (uint32_t c = 0; c < 65536; c++) grad[c] = gelu_local_grad(ld(codes[c]));
  }
};
template <typename T>
const GeluTables<T>& gelu_tables() {
  static const GeluTables<T> t;
  return t;
}
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  if constexpr (kSixteenBit<T>) {
    const T* table = gelu_tables<T>().out.data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = table[inp[i].bits];
  } else {
    if constexpr (std::is_same_v<T, float>)
      if (tanh_fp32_vectorized()) return gelu_forward_blocks(out, inp, n);
    gelu_forward_loop(out, inp, n);
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  if constexpr (kSixteenBit<T>) {
    const float* grad = gelu_tables<T>().grad.data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = st<T>(grad[inp[i].bits] * ld(dout[i]));
  } else {
    if constexpr (std::is_same_v<T, float>)
      if (tanh_fp32_vectorized()) return gelu_backward_blocks(dinp, inp, dout, n);
    gelu_backward_loop(dinp, inp, dout, n);
  }
}

template <typename T>
void gelu_forward_reference(T* out, const T* inp, size_t n) {
  gelu_forward_loop(out, inp, n);
}
template <typename T>
void gelu_backward_reference(T* dinp, const T* inp, const T* dout, size_t n) {
  gelu_backward_loop(dinp, inp, dout, n);
}

#define TG_INSTANTIATE(T)                              \
  template void gelu_forward<T>(T*, const T*, size_t); \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
TG_INSTANTIATE(bf16)
TG_INSTANTIATE(f16)
#undef TG_INSTANTIATE
template void gelu_forward_reference<float>(float*, const float*, size_t);
template void gelu_backward_reference<float>(float*, const float*, const float*, size_t);
template void gelu_forward_reference<bf16>(bf16*, const bf16*, size_t);
template void gelu_forward_reference<f16>(f16*, const f16*, size_t);
template void gelu_backward_reference<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void gelu_backward_reference<f16>(f16*, const f16*, const f16*, size_t);

}  // namespace tg::cpu
