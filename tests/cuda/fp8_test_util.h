// fp8_test_util.h: the helpers tests/cuda/test_fp8.cu needs besides cuda_test_util.h's
// (TG_REQUIRE_GPU):
//
//   DevBuf<T>             a device buffer (RAII) filled with 0xFF bytes first, so that anything
//                         a kernel forgets to write is NaN (bf16 0xFFFF, fp32, fp8 0xFF).
//   random_bf16 / ...     seeded random fills.
//   rel_error             ||out - ref|| / ||ref|| in fp64.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "src/numerics/formats.h"

namespace fp8t {

#define FP8_CUDA_OK(call) REQUIRE((call) == cudaSuccess)

template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    FP8_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), bytes() ? bytes() : 16));
    FP8_CUDA_OK(cudaMemset(p, 0xff, bytes() ? bytes() : 16));
  }
  DevBuf(const std::vector<T>& host) : DevBuf(host.size()) { upload(host); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { cudaFree(p); }
  size_t bytes() const { return n * sizeof(T); }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n);
    FP8_CUDA_OK(cudaMemcpy(p, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    FP8_CUDA_OK(cudaDeviceSynchronize());
    FP8_CUDA_OK(cudaMemcpy(h.data(), p, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
};

// bf16 codes of N(0, stddev^2) samples, never exactly zero.
inline std::vector<uint16_t> random_bf16(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    float f = d(rng);
    if (f == 0.f) f = stddev;
    x = tg::f32_to_bf16(f);
  }
  return v;
}
// bf16 codes of integers uniform in [lo, hi].
inline std::vector<uint16_t> random_int_bf16(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = tg::f32_to_bf16(float(d(rng)));
  return v;
}
inline std::vector<float> random_f32(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<double> widen_bf16(const std::vector<uint16_t>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = tg::bf16_to_f32(v[i]);
  return r;
}

// ||out - ref|| / ||ref|| (fp64); 1 when ref is zero and out is not, inf on a non-finite out.
inline double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); i++) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : 1;
  return std::sqrt(num / den);
}

// A cuBLASLt handle and a 32 MiB workspace for the GEMM tests.
struct LtEnv {
  cublasLtHandle_t lt = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = size_t(32) << 20;
  LtEnv() {
    REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
    FP8_CUDA_OK(cudaMalloc(&ws, ws_bytes));
  }
  LtEnv(const LtEnv&) = delete;
  LtEnv& operator=(const LtEnv&) = delete;
  ~LtEnv() {
    cudaFree(ws);
    cublasLtDestroy(lt);
  }
};

}  // namespace fp8t
