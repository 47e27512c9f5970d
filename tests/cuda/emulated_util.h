// emulated_util.h: what the emulated kernel tests (tests/cuda/*_emulated.cpp, one binary)
// share: poisoned host buffers, the kernels' element types next to the CPU's, error
// measures, the launch context of the real launchers.
#pragma once
#include "cuda_emulation.h"
// (the emulation first: it redefines the CUDA keywords the kernels use)
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common.cuh"
#include "src/backends/cpu/ops.h"
#include "src/backends/cuda/launch.h"

namespace emu_test {

using namespace tg;
using gpu::bf16;
using gpu::f16;

// ---- buffers and values ----

// 64-byte aligned host buffer, poisoned with 0xFF bytes (NaN in every float type).
template <typename T>
struct Buf {
  T* p;
  size_t n;
  explicit Buf(size_t count, unsigned char fill = 0xff) : n(count) {
    p = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64 + 64));
    std::memset(static_cast<void*>(p), fill, n * sizeof(T) + 16);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  // Like cudaFree: no queued work may still use the buffer (tests/cuda/stream_emulation.cpp).
  ~Buf() {
    emu::before_free(p, n * sizeof(T), "a test buffer's free");
    std::free(p);
  }
  T& operator[](size_t i) { return p[i]; }
  const T& operator[](size_t i) const { return p[i]; }
};

// The CPU backend's type for a kernel element type (same 16-bit codes).
template <typename E>
struct CpuOf {
  using type = E;
};
template <>
struct CpuOf<bf16> {
  using type = cpu::bf16;
};
template <>
struct CpuOf<f16> {
  using type = cpu::f16;
};
template <typename E>
using cpu_t = typename CpuOf<E>::type;
template <typename E>
cpu_t<E>* C(E* p) {
  return reinterpret_cast<cpu_t<E>*>(p);
}
template <typename E>
const cpu_t<E>* C(const E* p) {
  return reinterpret_cast<const cpu_t<E>*>(p);
}

// A named test operand, row-major rows x cols, for the quantizer and GEMM tests.
struct TestOperand {
  std::string what;
  int rows, cols;
  std::vector<float> x;
};
// rows x cols values from N(0, scale^2), one stream per object (seeded), so that a test's
// operands follow one another as they are drawn.
struct Randn {
  std::mt19937 rng;
  std::normal_distribution<float> nd{0.f, 1.f};
  explicit Randn(unsigned seed) : rng(seed) {}
  std::vector<float> operator()(int rows, int cols, float scale) {
    std::vector<float> x(size_t(rows) * cols);
    for (float& v : x) v = nd(rng) * scale;
    return x;
  }
};

template <typename E>
float f(E x) {
  return gpu::ld(x);
}
template <typename E>
E e(float v) {
  return gpu::st<E>(v);
}
template <typename E>
uint32_t bits(E x);
// The max of |x|'s fp32 bits over n stored values (what an amax word holds: kernels/amax.cuh).
template <typename E>
uint32_t amax_bits(const E* p, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; i++) m = std::max(m, bits(f(p[i])) & 0x7fffffffu);
  return m;
}
template <typename E>
uint32_t bits(E x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof(E));
  return u;
}
template <typename E>
const char* tname() {
  return std::is_same_v<E, float> ? "fp32" : std::is_same_v<E, bf16> ? "bf16" : "fp16";
}
template <typename E>
double tol() {
  return std::is_same_v<E, float> ? 1e-5 : 1e-2;
}

// Random values, never zero: normal(0, scale) with |x| >= scale / 64.
template <typename E>
void fill(E* p, size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  for (size_t i = 0; i < n; i++) {
    float v = d(rng);
    if (std::fabs(v) < scale / 64) v = v < 0 ? -scale / 2 : scale / 2;
    p[i] = e<E>(v);
  }
}
template <typename E>
void copy(E* dst, const E* src, size_t n) {
  std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), n * sizeof(E));
}

// ||out - ref|| / ||ref|| in double; a NaN anywhere in out (a never-written poisoned
// element) gives infinity.
template <typename E>
double rel_err(const E* out, const E* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double o = f(out[i]), r = f(ref[i]);
    if (!std::isfinite(o) || !std::isfinite(r)) return INFINITY;
    num += (o - r) * (o - r);
    den += r * r;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
template <typename E>
size_t bit_diffs(const E* a, const E* b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++) d += bits(a[i]) != bits(b[i]);
  return d;
}
template <typename E>
bool all_poison(const E* p, size_t n) {
  const unsigned char* c = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n * sizeof(E); i++)
    if (c[i] != 0xff) return false;
  return true;
}

// How many GEMMs the emulated cuBLASLt has run (tests/cuda/cublaslt_emulation.cpp): a test
// of the wrapper's path checks that it was taken.
int emu_lt_matmul_calls();

// Waits for the emulated device: the work queued on every stream runs (launchers only queue
// it, tests/cuda/stream_emulation.cpp), as a test on a GPU waits before it reads results.
inline void wait_device() { REQUIRE(cudaDeviceSynchronize() == cudaSuccess); }

// Runs what is queued (the errors of a kernel exist once it has run), then reports the
// emulation's errors.
inline void check_emu() {
  wait_device();
  for (const std::string& err : emu::errors()) FAIL_CHECK("emulation: " << err);
}

// The launch context of the real launchers: one emulated multiprocessor (Ctx::grid gives at
// most 32 blocks, so that larger sizes run the grid-stride loops more than once), the legacy
// default stream (the tests wait for it before they read results), cuBLAS and cuBLASLt
// handles, scratch from host memory (poisoned when it grows), host copies through pinned
// staging (src/backends/cuda/staging.cu).
inline gpu::Ctx& emu_ctx() {
  static std::vector<std::unique_ptr<Buf<char>>> slots(gpu::kNumScratch);
  static gpu::HostStaging staging;
  static gpu::Ctx c = [] {
    gpu::Ctx x;
    x.prop.multiProcessorCount = 1;  // the emulated device's (runtime_emulation.cpp)
    x.prop.sharedMemPerBlock = emu::kDefaultDynamicSmem;
    x.prop.sharedMemPerBlockOptin = emu::kOptinDynamicSmem;
    x.staging = &staging;
    cublasCreate(&x.blas);  // its GEMMs on the legacy stream (the emulated calls cannot fail)
    cublasLtCreate(&x.lt);
    x.scratch = [](gpu::ScratchSlot s, size_t bytes) -> void* {
      auto& b = slots[size_t(s)];
      if (!b || b->n < bytes) {
        // Queued work may still use the smaller buffer: wait for it first, as the backend's
        // scratch() does before it frees one.
        if (b) REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        b = std::make_unique<Buf<char>>(bytes);
      }
      return b->p;
    };
    return x;
  }();
  return c;
}

// The DType of a kernel element type.
template <typename E>
DType dtype_of() {
  return std::is_same_v<E, float> ? DType::F32 : std::is_same_v<E, bf16> ? DType::BF16 : DType::F16;
}

// Runs the block once with E = float, bf16, f16.
#define FOR_TYPES(...) \
  {                    \
    using E = float;   \
    __VA_ARGS__        \
  }                    \
  {                    \
    using E = bf16;    \
    __VA_ARGS__        \
  }                    \
  {                    \
    using E = f16;     \
    __VA_ARGS__        \
  }

}  // namespace emu_test
