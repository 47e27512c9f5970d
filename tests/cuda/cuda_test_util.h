// cuda_test_util.h: what every CUDA test (tests/cuda/*.cu) shares.
//
// Convention: each test case starts with TG_REQUIRE_GPU(), which returns early (the case
// then passes) with the message "CUDA tests skipped: no GPU" when no device is visible, so
// the suite runs everywhere and says what it did not check. Kernels are checked against the
// CPU backend (the reference) on fresh random inputs, never zeros; outputs that an op
// overwrites are poisoned first (all bytes 0xFF: NaN in fp32, bf16 and fp16) so that an
// element the kernel forgot shows up as NaN; the measure is the relative error
// ||gpu - cpu|| / ||cpu||, with a tolerance per precision (tol()).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/base/rng.h"
#include "src/model/model.h"
#include "src/numerics/formats.h"

namespace tgc {

using tg::DType;
using tg::Tensor;

inline bool gpu_available() {
  static const bool yes = tg::cuda_device_count() > 0;
  static bool said = false;
  if (!yes && !said) {
    printf("CUDA tests skipped: no GPU\n");
    said = true;
  }
  return yes;
}

#define TG_REQUIRE_GPU()                     \
  do {                                       \
    if (!::tgc::gpu_available()) {           \
      MESSAGE("CUDA tests skipped: no GPU"); \
      return;                                \
    }                                        \
  } while (0)

// A case that runs the train_gpt binary on the GPU: under the emulation
// (tests/cuda/cuda_emulation.h) the binary has no emulated device, so it skips there.
#ifdef TG_CUDA_EMULATION
#define TG_REQUIRE_GPU_BINARY()                                                 \
  do {                                                                          \
    MESSAGE("skipped under the emulation: runs the train_gpt binary on a GPU"); \
    return;                                                                     \
  } while (0)
#else
#define TG_REQUIRE_GPU_BINARY() TG_REQUIRE_GPU()
#endif

// One AdamW step of the CUDA tests' short training loops (lr 3e-3, weight decay 0.1), the
// gradient clipped to norm 1 as the trainer clips it.
inline void clipped_adamw_step(tg::GPT& m, int step) {
  const tg::GradCheck gc = m.check_grads(1.0);
  REQUIRE(gc.finite);
  const float clip = gc.norm > 1.0 ? float(1.0 / gc.norm) : 1.f;
  m.adamw_step({3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, clip, step, tg::Rounding{}});
}

// Per-precision tolerance of one kernel's relative error.
inline double tol(DType t) { return t == DType::F32 ? 1e-5 : 1e-2; }
inline std::string name(DType t) { return tg::dtype_name(t); }
constexpr DType kAllTypes[] = {DType::F32, DType::BF16, DType::F16};

// Host floats as the bytes of a tensor of type t (rounded to nearest even).
inline std::vector<char> encode(const std::vector<float>& v, DType t) {
  std::vector<char> out(v.size() * tg::dtype_size(t));
  for (size_t i = 0; i < v.size(); i++) {
    if (t == DType::F32) {
      memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      uint16_t h = t == DType::BF16 ? tg::f32_to_bf16(v[i]) : tg::f32_to_f16(v[i]);
      memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}
inline std::vector<double> decode(const std::vector<char>& b, DType t, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; i++) {
    if (t == DType::F32) {
      float f;
      memcpy(&f, b.data() + 4 * i, 4);
      out[i] = f;
    } else if (t == DType::I32) {
      int32_t x;
      memcpy(&x, b.data() + 4 * i, 4);
      out[i] = x;
    } else {
      uint16_t h;
      memcpy(&h, b.data() + 2 * i, 2);
      out[i] = t == DType::BF16 ? tg::bf16_to_f32(h) : tg::f16_to_f32(h);
    }
  }
  return out;
}

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f, float shift = 0.f) {
  tg::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.normal()) * scale + shift;
  return v;
}

// The same tensor on the CPU backend and on the GPU.
struct Pair {
  Tensor cpu, gpu;
};

// Both backends, with the allocations of one test (freed at the end).
struct Twin {
  explicit Twin(const tg::BackendOptions& o = {})
      : cpu(tg::make_cpu_backend(o)), gpu(tg::make_cuda_backend(0, o)) {}
  std::unique_ptr<tg::Backend> cpu;
  std::unique_ptr<tg::Backend> gpu;
  std::vector<Pair> owned;

  ~Twin() {
    for (auto& p : owned) {
      cpu->free(p.cpu);
      gpu->free(p.gpu);
    }
  }
  Pair alloc(DType t, size_t n) {
    Pair p{cpu->alloc(t, n), gpu->alloc(t, n)};
    owned.push_back(p);
    return p;
  }
  // Both copies hold `values` (rounded to t).
  Pair make(DType t, const std::vector<float>& values) {
    Pair p = alloc(t, values.size());
    auto bytes = encode(values, t);
    cpu->upload(p.cpu, bytes.data());
    gpu->upload(p.gpu, bytes.data());
    return p;
  }
  Pair rand(DType t, size_t n, uint64_t seed, float scale = 1.f, float shift = 0.f) {
    return make(t, randn(n, seed, scale, shift));
  }
  // Every byte 0xFF on both sides: a NaN in each float format.
  Pair poisoned(DType t, size_t n) {
    Pair p = alloc(t, n);
    std::vector<char> ff(p.cpu.bytes(), char(0xFF));
    cpu->upload(p.cpu, ff.data());
    gpu->upload(p.gpu, ff.data());
    return p;
  }
  Pair ints(const std::vector<int32_t>& v) {
    Pair p = alloc(DType::I32, v.size());
    cpu->upload(p.cpu, v.data());
    gpu->upload(p.gpu, v.data());
    return p;
  }
  std::vector<double> get(tg::Backend& be, Tensor t) {
    std::vector<char> b(t.bytes());
    be.download(b.data(), t);
    return decode(b, t.dtype, t.numel);
  }
  // ||gpu - cpu|| / ||cpu|| (infinite when the GPU left a NaN where the CPU has a number).
  double err(Pair p) {
    auto c = get(*cpu, p.cpu), g = get(*gpu, p.gpu);
    double num = 0, den = 0;
    for (size_t i = 0; i < c.size(); i++) {
      if (std::isfinite(c[i]) && !std::isfinite(g[i])) return INFINITY;
      num += (g[i] - c[i]) * (g[i] - c[i]);
      den += c[i] * c[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }
  // Whether both copies hold the same bits.
  bool same_bits(Pair p) {
    std::vector<char> a(p.cpu.bytes()), b(p.gpu.bytes());
    cpu->download(a.data(), p.cpu);
    gpu->download(b.data(), p.gpu);
    return a == b;
  }
};

// Random token ids in [0, V).
inline std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  tg::Rng r(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(r.below(uint64_t(V)));
  return v;
}

}  // namespace tgc
