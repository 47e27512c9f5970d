#include "bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend_factory.h"
#include "common.h"
#include "config.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"
#include "fp8.h"
#include "gpu_peak.h"
#include "model.h"
#include "precision.h"
#include "rng.h"
#include "trainer.h"

namespace tg {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchCase {
  const char* name;
  int L, C, NH, V, maxT, B, T;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One model in one mode over the repeats: each repeat's median step, and the peak memory of
// the first repeat's fresh backend.
struct RowTimes {
  std::vector<double> ms;
  double peak_bytes = 0;
};

// Median milliseconds of one full training step (forward, backward, the fused gradient
// check, AdamW: the trainer's apply_update) in a precision mode, with the default optimizer
// keys at lr 1e-4.
double time_step(Backend& be, const BenchCase& bc, const std::string& mode, const Fp8Config& fc,
                 int warmup, int iters) {
  const Config cfg;
  LossScaler scaler;  // none: the bench measures the step, not the scaler
  int64_t opt_step = 0;
  GPT model(gpt_config(bc.L, bc.NH, bc.C, bc.V, bc.maxT), be, mode_dtype(mode));
  // Block-scaled modes with their preset options, every layer quantized.
  RecipeOptions ro;
  ro.bf16_last = 0;
  QuantState fp8 = is_block_scaled_mode(mode) ? QuantState(block_scaled_recipe(mode, ro), bc.L)
                                            : QuantState(fc, bc.L);
  if (mode == "fp8" || is_block_scaled_mode(mode)) model.set_quant_state(&fp8);
  model.init_random(1);
  Rng r(2);
  std::vector<int32_t> in(size_t(bc.B) * bc.T), tg(size_t(bc.B) * bc.T);
  for (size_t i = 0; i < in.size(); i++) {
    in[i] = int32_t(r.below(bc.V));
    tg[i] = int32_t(r.below(bc.V));
  }
  std::vector<double> ms;
  for (int i = 0; i < warmup + iters; i++) {
    auto t0 = Clock::now();
    model.zero_grad();
    model.forward(in.data(), tg.data(), bc.B, bc.T, 1.0f);
    model.backward();
    double norm;
    apply_update(model, scaler, cfg, 1e-4, 1.0, opt_step, &norm);
    be.synchronize();  // devices queue work: the step ends when the device is done
    double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= warmup) ms.push_back(t);
  }
  return median(ms);
}

double sgemm_gflops(int M, int N, int K, int iters) {
  std::vector<float> A(size_t(M) * K, 0.5f), B(size_t(K) * N, 0.25f), C(size_t(M) * N);
  Rng r(3);
  for (auto& x : A) x = float(r.normal());
  for (auto& x : B) x = float(r.normal());
  std::vector<double> s;
  for (int i = 0; i < iters + 2; i++) {
    auto t0 = Clock::now();
    cpu::gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.0f, C.data(), N);
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= 2) s.push_back(t);
  }
  return 2.0 * M * N * K / median(s) / 1e9;
}

// The sgemm table on all the threads; returns the 1024^3 figure (GFLOP/s), the ceiling the
// training rows are measured against.
double print_sgemm_table() {
  cpu::blas_set_threads(omp_get_max_threads());
  printf("| sgemm (%s), %d threads (M x N x K) | GFLOP/s |\n|---|---:|\n", cpu::blas_name(),
         omp_get_max_threads());
  const int shapes[][3] = {{1024, 1024, 1024}, {256, 1024, 96}, {1024, 1024, 256}};
  double ceiling = 0;
  for (auto& s : shapes) {
    const double g = sgemm_gflops(s[0], s[1], s[2], 10);
    if (ceiling == 0) ceiling = g;
    printf("| %d x %d x %d | %.1f |\n", s[0], s[1], s[2], g);
  }
  printf("\n");
  return ceiling;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      int_option("threads", "CPU threads (0: all)", "0", 0, 4096),
      int_option("iters", "timed steps per repeat (their median is the repeat's time)", "10", 3,
                 100000),
      int_option("repeats", "repeats per model and mode, interleaved across the modes", "5", 1,
                 1000),
      {"device", "cpu or cuda", "cpu"},
      {"model",
       "small (three small models), toy or l4 (the smallest or the largest of them alone), gpt2 "
       "(GPT-2 124M) or gpt2-medium (350M)",
       "small"},
      {"modes", "comma-separated precision modes", "fp32,bf16,fp16,fp8"},
      int_option("batch", "batch size for --model=gpt2 / gpt2-medium", "8", 1, 4096),
      int_option("seq", "sequence length for --model=gpt2 / gpt2-medium", "1024", 1, 1024),
      {"fp8_recipe", "fp8 mode: delayed or current scaling", "delayed"},
      {"fp8_fast_accum", "fp8 mode: fast accumulation in the forward GEMM (GPUs)", "true"}};
  std::vector<std::pair<std::string, std::string>> ex;
  // Config keys are accepted too: cuda.* and cpu.gemm choose the paths that are timed.
  Config cfg;
  if (!config_parse_args(&cfg, argc, argv, "train_gpt bench", opts, &ex)) return 0;
  int iters = 10, repeats = 5, gpt2_B = 8, gpt2_T = 1024;
  std::string device = "cpu", model = "small", modes_arg = "fp32,bf16,fp16,fp8";
  Fp8Config fp8cfg;
  QuantOptions fp8opt;
  for (auto& kv : ex) {
    if (kv.first == "threads") config_set(cfg, "train.threads", kv.second);
    if (kv.first == "iters") iters = atoi(kv.second.c_str());
    if (kv.first == "repeats") repeats = atoi(kv.second.c_str());
    if (kv.first == "device") device = kv.second;
    if (kv.first == "model") model = kv.second;
    if (kv.first == "modes") modes_arg = kv.second;
    if (kv.first == "batch") gpt2_B = atoi(kv.second.c_str());
    if (kv.first == "seq") gpt2_T = atoi(kv.second.c_str());
    if (kv.first == "fp8_recipe") fp8cfg.recipe = kv.second;
    if (kv.first == "fp8_fast_accum") fp8opt.fast_accum = kv.second != "false" && kv.second != "0";
  }
  if (fp8cfg.recipe != "delayed" && fp8cfg.recipe != "current")
    throw UsageError(
        strf("bench: --fp8_recipe must be delayed or current, not '%s'", fp8cfg.recipe.c_str()));
  if (device != "cpu" && device != "cuda")
    throw UsageError(strf("bench: --device must be cpu or cuda, not '%s'", device.c_str()));
  if (model != "small" && model != "toy" && model != "l4" && model != "gpt2" &&
      model != "gpt2-medium")
    throw UsageError(strf("bench: --model must be small, toy, l4, gpt2 or gpt2-medium, not '%s'",
                          model.c_str()));
  std::vector<std::string> modes;
  for (size_t p = 0; p <= modes_arg.size();) {
    size_t q = modes_arg.find(',', p);
    if (q == std::string::npos) q = modes_arg.size();
    std::string m = modes_arg.substr(p, q - p);
    if (!m.empty()) {
      mode_dtype(m);  // validates
      modes.push_back(m);
    }
    p = q + 1;
  }
  if (modes.empty()) throw UsageError("bench: --modes names no mode");
  cfg.train.device = device;
  auto be = make_backend(cfg);

  const std::vector<BenchCase> small = {
      {"toy default (L2 C64)", 2, 64, 8, 256, 64, 16, 64},
      {"llm.c ref (L3 C96 V1000)", 3, 96, 4, 1000, 128, 4, 64},
      {"small (L4 C256 V1000)", 4, 256, 4, 1000, 128, 8, 128},
  };
  std::vector<BenchCase> cases = small;
  if (model == "gpt2")
    cases = {{"GPT-2 124M (L12 C768)", 12, 768, 12, 50257, 1024, gpt2_B, gpt2_T}};
  else if (model == "gpt2-medium")
    cases = {{"GPT-2 350M (L24 C1024)", 24, 1024, 16, 50257, 1024, gpt2_B, gpt2_T}};
  else if (model == "toy")
    cases = {small.front()};
  else if (model == "l4")
    cases = {small.back()};
  const bool gpu = be->name() == "cuda";
  const std::string be_model = be->device_model();
  if (gpu) {
    printf("train_gpt bench: training step on %s (%s)\n", be->name().c_str(),
           be->device_model().c_str());
    printf(
        "MFU: model FLOPs (6N + attention) per second over the dense bf16 tensor-core peak for "
        "bf16, fp16 and fp8 alike (H100/H200: 989 TFLOP/s; FP8's own peak is twice that), the "
        "plain FP32 peak for fp32 (67 TFLOP/s). Peak memory: the backend's cudaMalloc "
        "high-water mark.\n");
    for (const std::string& m : modes)
      if (m == "fp8") {
        be->set_quant_options(fp8opt);
        printf("fp8: %s scaling, path: %s, %s\n", fp8cfg.recipe.c_str(),
               be->fp8_path_name().c_str(),
               fp8opt.fast_accum ? "fast accumulation in the forward GEMM"
                                 : "exact fp32 accumulation everywhere");
      }
    printf("\n");
  }
  // The CPU's ceiling first, so that every row can say what share of it the step reaches:
  // OpenBLAS (or the loops) on all the threads, as training splits its GEMMs.
  double ceiling = 0;
  if (!gpu) {
    printf(
        "train_gpt bench: training step on %s, %d thread(s); median of %d steps per repeat, "
        "%d repeats interleaved across the modes\n",
        be->name().c_str(), omp_get_max_threads(), iters, repeats);
    // What the numbers depend on: the CPU, the instructions it offers and the GEMM paths.
    printf("CPU: %s; instruction sets: %s; sgemm: %s; narrow-mode GEMMs: %s\n\n",
           cpu::cpu_model_name().c_str(), cpu::cpu_isa_summary().c_str(), cpu::blas_name(),
           cpu::narrow_gemm_name(cpu::narrow_gemm()));
    ceiling = print_sgemm_table() * 1e9;
  }
  printf(
      "| model | params | B x T | mode | ms/step | spread | tokens/s | GFLOP/s | %s | time vs "
      "first | peak memory | memory vs first |\n",
      gpu ? "MFU" : "of sgemm");
  printf("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  be.reset();
  for (const auto& bc : cases) {
    GPTConfig c = gpt_config(bc.L, bc.NH, bc.C, bc.V, bc.maxT);
    std::vector<RowTimes> rows(modes.size());
    for (int r = 0; r < repeats; r++)
      for (size_t m = 0; m < modes.size(); m++) {
        // A fresh backend per mode and repeat, so its peak is this model's alone.
        auto mbe = make_backend(cfg);
        QuantOptions mo = fp8opt;
        mo.block_scaled = is_block_scaled_mode(modes[m]);
        mbe->set_quant_options(mo);
        rows[m].ms.push_back(time_step(*mbe, bc, modes[m], fp8cfg, r == 0 ? 3 : 1, iters));
        if (r == 0) rows[m].peak_bytes = double(mbe->peak_bytes());
      }
    const double ms0 = median(rows[0].ms), mem0 = rows[0].peak_bytes;
    for (size_t m = 0; m < modes.size(); m++) {
      const double ms = median(rows[m].ms), mem = rows[m].peak_bytes;
      const auto [lo, hi] = std::minmax_element(rows[m].ms.begin(), rows[m].ms.end());
      double tps = bc.B * bc.T / (ms / 1e3);
      const double flops = tps * flops_per_token(c, bc.T);
      const double peak = gpu ? gpu_peak_flops(be_model, modes[m]) : ceiling;
      const std::string share = peak > 0 ? strf("%.1f%%", 100 * flops / peak) : "-";
      printf(
          "| %s | %zu | %d x %d | %s | %.2f | %.2f-%.2f | %.0f | %.1f | %s | %.2fx | %.1f MiB | "
          "%.2fx |\n",
          bc.name, num_parameters(c), bc.B, bc.T, modes[m].c_str(), ms, *lo, *hi, tps, flops / 1e9,
          share.c_str(), ms / ms0, mem / 1048576.0, mem / mem0);
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace tg
