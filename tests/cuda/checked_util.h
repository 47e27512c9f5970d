// checked_util.h: what the checked kernel tests (tests/cuda/*_checked.cpp, the kernels_checked
// binary, every access checked: tests/cuda/memory_check.h) share: device buffers from the
// emulated cudaMalloc (so that red zones, freed memory and unwritten bytes are seen), a launch
// context whose scratch is device memory too, and the expectations on the reports.
#pragma once
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "traffic.h"

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

// The launches f() makes, their traffic counted (traffic.h), checked clean: the cost model's
// measurements.
template <typename F>
std::vector<emu::traffic::LaunchTraffic> counted_launches(F&& f) {
  take_reports();
  emu::traffic::take();
  emu::traffic::set_counting(true);
  f();
  cudaDeviceSynchronize();
  emu::traffic::set_counting(false);
  expect_clean();
  return emu::traffic::take();
}

// ---- the kernels of kernels/*.cuh (the checks' coverage, the cost model's rows) ----

// The qualified names of the __global__ functions of a kernels/*.cuh text: the namespaces are
// opened as "namespace a::b {" and closed as "}  // namespace a::b" (clang-format's style); a
// kernel's name is the word before its parameter list, after any __launch_bounds__(...).
inline void kernels_in(const std::string& text, std::set<std::string>& out) {
  std::istringstream in(text);
  std::vector<std::string> ns;
  std::string line, decl;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(' ') != std::string::npos &&
        line.compare(line.find_first_not_of(' '), 2, "//") == 0)
      continue;
    if (line.rfind("namespace ", 0) == 0 && line.find(" {") != std::string::npos)
      ns.push_back(line.substr(10, line.find(' ', 10) - 10));
    if (line.rfind("}  // namespace", 0) == 0 && !ns.empty()) ns.pop_back();
    if (line.find("__global__") != std::string::npos)
      decl = line.substr(line.find("__global__"));
    else if (!decl.empty())
      decl += " " + line;
    if (decl.empty()) continue;
    size_t from = 0;
    const size_t lb = decl.find("__launch_bounds__(");
    if (lb != std::string::npos) from = decl.find(')', lb);
    const size_t paren = from == std::string::npos ? from : decl.find('(', from + 1);
    if (paren == std::string::npos) continue;  // the parameter list is on a later line
    const std::string head = decl.substr(0, decl.find_last_not_of(' ', paren - 1) + 1);
    std::string q;
    for (const std::string& n : ns) q += n + "::";
    out.insert(q + head.substr(head.find_last_of(" )") + 1));
    decl.clear();
  }
}

// The kernels declared in kernels/<stem>.cuh for each of `stems` (run from the repository
// root), each with its stem.
inline std::map<std::string, std::string> declared_kernels(const std::vector<std::string>& stems) {
  std::map<std::string, std::string> out;
  for (const std::string& f : stems) {
    std::ifstream in("kernels/" + f + ".cuh");
    REQUIRE_MESSAGE(in.good(), "kernels/" << f << ".cuh (run from the repository root)");
    std::stringstream ss;
    ss << in.rdbuf();
    std::set<std::string> names;
    kernels_in(ss.str(), names);
    for (const std::string& k : names) out[k] = f;
  }
  return out;
}

// The stems of every kernels/*.cuh ("layernorm", ...).
inline std::vector<std::string> kernel_headers() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("kernels"))
    if (e.path().extension() == ".cuh") out.push_back(e.path().stem().string());
  return out;
}

}  // namespace emu_test
