// backend_factory.cpp: train.device resolved to a backend (see backend_factory.h).
#include "backend_factory.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/gemm.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cuda_library.h"
#include "src/base/common.h"
#include "src/base/test_hooks.h"
#include "src/precision/precision.h"

namespace tg {

namespace {

// cpu or cuda for train.device (cpu, cuda or auto); UsageError when cuda cannot run.
std::string resolve_device(DeviceChoice device) {
  if (device == DeviceChoice::Cpu) return "cpu";
  if (!cuda_built()) {
    if (device == DeviceChoice::Cuda)
      throw UsageError(
          "config key 'train.device': cuda is not available: this binary was built without "
          "CUDA (rebuild with `make CUDA=1`, nvcc installed; use cpu or auto)");
    return "cpu";
  }
  if (device == DeviceChoice::Cuda) {
    int gpus = 0;
    try {
      gpus = cuda_library().device_count();
    } catch (const Error& e) {
      throw UsageError(strf("config key 'train.device': cuda was asked for, but %s", e.what()));
    }
    if (gpus == 0)
      throw UsageError(
          "config key 'train.device': cuda was asked for, but no CUDA GPU is visible (use cpu "
          "or auto)");
    return "cuda";
  }
  // auto; the CPU-only tests keep it on the CPU. Without a device the driver shows, the CUDA
  // library is not even opened, so a CPU run does not load the CUDA libraries.
  if (test_hooks::auto_device_cpu() || !nvidia_device_present()) return "cpu";
  try {
    return cuda_library().device_count() > 0 ? "cuda" : "cpu";
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: train.device=auto runs on the CPU: %s\n", e.what());
    return "cpu";
  }
}

}  // namespace

std::unique_ptr<Backend> make_backend(const Config& cfg, int local_rank) {
  const std::string device = resolve_device(cfg.train.device);
  int threads = cfg.train.threads > 0 ? cfg.train.threads : omp_get_num_procs();
  cpu::set_parallelism(threads, threads);
  // The CPU ops split GEMMs across OpenMP threads themselves (src/backends/cpu/matmul.cpp).
  cpu::blas_set_threads(1);
  const bool loops = cfg.cpu.gemm == CpuGemm::Loops;
  cpu::set_gemm_loops(loops);
  cpu::set_narrow_gemm(cpu::choose_narrow_gemm(cfg.cpu.narrow_gemm, loops, cpu::cpu_features()));
  const BackendOptions options = backend_options(cfg);
  if (device == "cuda") {
    const CudaLibrary& cuda = cuda_library();
    return cuda.make_backend(local_rank % std::max(1, cuda.device_count()), options);
  }
  return make_cpu_backend(options);
}

BackendOptions backend_options(const Config& cfg) {
  BackendOptions o;
  o.attention = cfg.cuda.attention;
  o.cudnn_lib = cfg.cuda.cudnn_lib;
  o.gemm_fallback = cfg.cuda.gemm == CudaGemm::Fallback;
  o.gelu_epilogue = cfg.cuda.gelu_epilogue;
  o.device_loss_scale = precision_spec(cfg).loss_scale.on_device;
  return o;
}

}  // namespace tg
