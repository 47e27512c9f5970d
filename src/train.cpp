#include "train.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"
#include "cpu/parallel.h"
#include "cuda_library.h"
#include "rng.h"
#include "test_hooks.h"
#include "trainer.h"

namespace tg {
using json = nlohmann::json;

void poison_gradient(Backend& be, Tensor grads) {
  Tensor first = grads.slice(0, 1);
  const float inf32 = INFINITY;
  const double inf64 = INFINITY;
  const uint16_t inf_bf16 = 0x7F80, inf_f16 = 0x7C00;
  switch (grads.dtype) {
    case DType::F32: be.upload(first, &inf32); break;
    case DType::F64: be.upload(first, &inf64); break;
    case DType::BF16: be.upload(first, &inf_bf16); break;
    case DType::F16: be.upload(first, &inf_f16); break;
    default: throw Error("poison_gradient: unsupported gradient type");
  }
}

std::string resolve_device(const std::string& device) {
  if (device == "cpu") return "cpu";
  if (!cuda_built()) {
    if (device == "cuda")
      throw UsageError(
          "config key 'train.device': cuda is not available: this binary was built without "
          "CUDA (build with nvcc installed; use cpu or auto)");
    return "cpu";
  }
  if (device == "cuda") {
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

std::unique_ptr<Backend> make_backend(const Config& cfg, int local_rank) {
  const std::string device = resolve_device(cfg.train.device);
  int threads = cfg.train.threads > 0 ? cfg.train.threads : omp_get_num_procs();
  cpu::set_parallelism(threads, threads);
  // The CPU ops split GEMMs across OpenMP threads themselves (src/cpu/matmul.cpp).
  cpu::blas_set_threads(1);
  cpu::set_gemm_loops(cfg.cpu.gemm == "loops");
  cpu::set_narrow_gemm(
      cpu::choose_narrow_gemm(cfg.cpu.narrow_gemm, cfg.cpu.gemm == "loops", cpu::cpu_features()));
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
  o.gemm_fallback = cfg.cuda.gemm == "fallback";
  o.gelu_epilogue = cfg.cuda.gelu_epilogue;
  o.device_loss_scale = cfg.precision.loss_scale.on_device;
  return o;
}

GPTConfig model_config(const Config& cfg) {
  return gpt_config(cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                    cfg.model.max_seq_len);
}

json run_training(const Config& cfg) {
  Trainer trainer(cfg);
  trainer.start();
  while (!trainer.done()) {
    const StepResult r = trainer.step();
    trainer.log_step(r);
    const int64_t step = r.step;
    if (cfg.train.stop_at_step > 0 && step == cfg.train.stop_at_step && !trainer.done())
      return trainer.stop_early();
    if (trainer.done()) break;  // the last step's evaluation, sample and save come in finish()
    if (trainer.has_val() && cfg.eval.every > 0 && step % cfg.eval.every == 0)
      trainer.log_val(step, trainer.evaluate());
    if (cfg.sample.every > 0 && step % cfg.sample.every == 0) trainer.sample();
    if (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0) trainer.save();
  }
  return trainer.finish();
}

}  // namespace tg
