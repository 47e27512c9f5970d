// checked_util.h: what the checked kernel tests (tests/cuda/*_checked.cpp, the kernels_checked
// binary, every access checked: tests/cuda/memory_check.h) share: device buffers from the
// emulated cudaMalloc (so that red zones, freed memory and unwritten bytes are seen), a launch
// context whose scratch is device memory too, and the expectations on the reports.
#pragma once
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace emu_test {

// n elements of device memory (cudaMalloc: 0xFF bytes, unwritten), freed on destruction.
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess);
  }
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) { put(host); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  // Launches only queue their work (tests/cuda/stream_emulation.cpp): the buffer is freed once
  // the device has run what may still use it, as code must on a GPU.
  ~Dev() {
    cudaDeviceSynchronize();
    cudaFree(p);
  }
  void put(const std::vector<T>& host) {
    REQUIRE(host.size() <= n);
    REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  std::vector<T> get() const {
    std::vector<T> host(n);
    REQUIRE(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }
};

// n random values of E (normal, never zero: emulated_util.h's fill) on the device.
template <typename E>
std::unique_ptr<Dev<E>> random_dev(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::vector<E> h(n);
  fill(h.data(), n, rng, scale);
  return std::make_unique<Dev<E>>(h);
}

// The launch context of the checked tests: emu_ctx()'s, with its scratch from cudaMalloc
// (grown by reallocation, as the backend grows its own).
inline gpu::Ctx& checked_ctx() {
  static std::vector<std::pair<void*, size_t>> slots(gpu::kNumScratch, {nullptr, 0});
  static gpu::Ctx c = [] {
    gpu::Ctx x = emu_ctx();
    x.scratch = [](gpu::ScratchSlot s, size_t bytes) -> void* {
      auto& [p, n] = slots[size_t(s)];
      if (n < bytes) {
        cudaDeviceSynchronize();  // queued work may still use the old slot
        cudaFree(p);
        REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
        n = bytes;
      }
      return p;
    };
    return x;
  }();
  return c;
}

// The reports recorded since the last call (emu::errors()), once the device has run the work
// queued so far (the checks see a launch when it runs, not when it is queued).
inline std::vector<std::string> take_reports() {
  cudaDeviceSynchronize();
  return emu::errors();
}

inline std::string joined(const std::vector<std::string>& r) {
  std::string s;
  for (const std::string& x : r) s += "\n  " + x;
  return s;
}

// Fails unless one of the reports since the last call holds every one of `parts`.
inline void expect_report(std::initializer_list<const char*> parts) {
  const std::vector<std::string> r = take_reports();
  for (const std::string& x : r) {
    bool all = true;
    for (const char* p : parts) all = all && x.find(p) != std::string::npos;
    if (all) {
      MESSAGE("report: " << x);
      return;
    }
  }
  std::string want;
  for (const char* p : parts) want += std::string(" [") + p + "]";
  FAIL_CHECK("no report with" << want << "; reports:" << (r.empty() ? " none" : joined(r)));
}

// Fails when anything was reported since the last call.
inline void expect_clean() {
  const std::vector<std::string> r = take_reports();
  if (!r.empty()) FAIL_CHECK(r.size() << " reports:" << joined(r));
}

}  // namespace emu_test
