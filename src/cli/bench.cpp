// bench.cpp: `train_gpt bench`: the step time and throughput of the training step for a few
// model sizes on synthetic tokens, plus the BLAS sgemm rate that bounds them.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_step.h"
#include "commands.h"
#include "profile.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/gemm.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "src/base/common.h"
#include "src/base/rng.h"
#include "src/config/config.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/precision/precision.h"
#include "src/precision/precision_runtime.h"
#include "src/training/backend_factory.h"
#include "src/training/gpu_peak.h"
#include "src/training/trainer.h"

namespace tg {

namespace {

using Clock = std::chrono::steady_clock;

// One model in one mode over the repeats: each repeat's median step, and the peak memory of
// the first repeat's fresh backend.
struct RowTimes {
  std::vector<double> ms;
  double peak_bytes = 0;
};

// Median milliseconds of one full training step (bench_step.h) in cfg's precision mode.
double time_step(Backend& be, const BenchCase& bc, const Config& cfg, int warmup, int iters) {
  BenchStep step(be, bc, cfg);
  std::vector<double> ms;
  for (int i = 0; i < warmup + iters; i++) {
    auto t0 = Clock::now();
    step.run();
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

// The command line into *a; false when --help was printed.
bool parse_bench_args(int argc, char** argv, BenchArgs* a) {
  const std::string default_modes = mode_list_text({Mode::FP32, Mode::BF16, Mode::FP16, Mode::FP8});
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
      {"modes", "comma-separated precision modes", default_modes},
      int_option("batch", "batch size for --model=gpt2 / gpt2-medium", "8", 1, 4096),
      int_option("seq", "sequence length for --model=gpt2 / gpt2-medium", "1024", 1, 1024),
      {"fp8_recipe", "fp8 mode: delayed or current scaling", "delayed"},
      {"fp8_fast_accum", "fp8 mode: fast accumulation in the forward GEMM (GPUs)", "true"},
      {"profile",
       "the per-op profile of each mode instead of the step table: every op of a step timed "
       "against its floor from FLOPs and bytes (docs/gpu.md)",
       "", true},
      {"out", "with --profile: the folder of profile.md and profile.csv", "runs/profile"}};
  std::vector<std::pair<std::string, std::string>> ex;
  if (!config_parse_args(&a->cfg, argc, argv, "train_gpt bench", opts, &ex)) return false;
  std::string modes_arg = default_modes;
  for (auto& kv : ex) {
    if (kv.first == "threads") config_set(a->cfg, "train.threads", kv.second);
    if (kv.first == "iters") a->iters = atoi(kv.second.c_str());
    if (kv.first == "repeats") a->repeats = atoi(kv.second.c_str());
    if (kv.first == "device") a->device = kv.second;
    if (kv.first == "model") a->model = kv.second;
    if (kv.first == "modes") modes_arg = kv.second;
    if (kv.first == "batch") a->gpt2_B = atoi(kv.second.c_str());
    if (kv.first == "seq") a->gpt2_T = atoi(kv.second.c_str());
    if (kv.first == "fp8_recipe" && !parse_enum(kv.second, &a->fp8cfg.recipe))
      throw UsageError(
          strf("bench: --fp8_recipe must be delayed or current, not '%s'", kv.second.c_str()));
    if (kv.first == "fp8_fast_accum")
      a->fp8opt.fast_accum = kv.second != "false" && kv.second != "0";
    if (kv.first == "profile") a->profile = true;
    if (kv.first == "out") a->out = kv.second;
  }
  if (a->device != "cpu" && a->device != "cuda")
    throw UsageError(strf("bench: --device must be cpu or cuda, not '%s'", a->device.c_str()));
  const std::string& m = a->model;
  if (m != "small" && m != "toy" && m != "l4" && m != "gpt2" && m != "gpt2-medium")
    throw UsageError(
        strf("bench: --model must be small, toy, l4, gpt2 or gpt2-medium, not '%s'", m.c_str()));
  a->modes = parse_mode_list(modes_arg, "precision.mode");
  if (a->modes.empty()) throw UsageError("bench: --modes names no mode");
  parse_enum(a->device, &a->cfg.train.device);  // cpu or cuda, checked above
  return true;
}

// The models --model names.
std::vector<BenchCase> bench_cases(const BenchArgs& a) {
  const std::vector<BenchCase> small = {
      {"toy default (L2 C64)", 2, 64, 8, 256, 64, 16, 64},
      {"llm.c ref (L3 C96 V1000)", 3, 96, 4, 1000, 128, 4, 64},
      {"small (L4 C256 V1000)", 4, 256, 4, 1000, 128, 8, 128},
  };
  if (a.model == "gpt2")
    return {{"GPT-2 124M (L12 C768)", 12, 768, 12, 50257, 1024, a.gpt2_B, a.gpt2_T}};
  if (a.model == "gpt2-medium")
    return {{"GPT-2 350M (L24 C1024)", 24, 1024, 16, 50257, 1024, a.gpt2_B, a.gpt2_T}};
  if (a.model == "toy") return {small.front()};
  if (a.model == "l4") return {small.back()};
  return small;
}

// The lines above a GPU's table: the device, what MFU means, the fp8 path.
void print_gpu_header(Backend& be, const BenchArgs& a) {
  printf("train_gpt bench: training step on %s (%s)\n", be.name().c_str(),
         be.device_model().c_str());
  printf(
      "MFU: model FLOPs (6N + attention) per second over the dense bf16 tensor-core peak for "
      "bf16, fp16 and fp8 alike (H100/H200: 989 TFLOP/s; FP8's own peak is twice that), the "
      "plain FP32 peak for fp32 (67 TFLOP/s). Peak memory: the backend's cudaMalloc "
      "high-water mark.\n");
  for (Mode m : a.modes)
    if (mode_info(m).recipe == ModeRecipe::Fp8Tensor) {
      const QuantRecipe r = fp8_recipe(a.fp8cfg);
      QuantOptions o = a.fp8opt;
      o.recipe = &r;
      be.set_quant_options(o);
      printf("fp8: %s scaling, path: %s\n", enum_name(a.fp8cfg.recipe), be.fp8_path_name().c_str());
    }
  // The attention path of each model and mode (cuda.attention; auto decides per compute type
  // and what cuDNN builds at the case's shape).
  const std::string notice = attention_request_notice(a.cfg.cuda.attention);
  if (!notice.empty()) printf("%s\n", notice.c_str());
  for (const BenchCase& bc : bench_cases(a))
    for (Mode m : a.modes) {
      const AttentionChoice c =
          be.settle_attention(AttentionShape{bc.B, bc.T, bc.NH, bc.C / bc.NH, mode_dtype(m)});
      printf("attention (%s, %s): %s (%s)\n", bc.name, mode_name(m), attention_path_name(c.path),
             c.error.empty() ? c.reason.c_str() : c.error.c_str());
    }
  printf("\n");
}

// The lines above a CPU's table, and the sgemm table; returns the ceiling (FLOP/s) the
// training rows are measured against.
double print_cpu_header(Backend& be, const BenchArgs& a) {
  printf(
      "train_gpt bench: training step on %s, %d thread(s); median of %d steps per repeat, "
      "%d repeats interleaved across the modes\n",
      be.name().c_str(), omp_get_max_threads(), a.iters, a.repeats);
  // What the numbers depend on: the CPU, the instructions it offers and the GEMM paths.
  printf("CPU: %s; instruction sets: %s; sgemm: %s; narrow-mode GEMMs: %s\n\n",
         cpu::cpu_model_name().c_str(), cpu::cpu_isa_summary().c_str(), cpu::blas_name(),
         cpu::narrow_gemm_name(cpu::narrow_gemm()));
  return print_sgemm_table() * 1e9;
}

// One model's rows: every mode timed `repeats` times, interleaved; `peak` the FLOP/s a mode's
// share is measured against (0: none).
void bench_model(const BenchCase& bc, const BenchArgs& a, const std::function<double(Mode)>& peak) {
  GPTConfig c = gpt_config(bc.L, bc.NH, bc.C, bc.V, bc.maxT);
  const std::vector<Mode>& modes = a.modes;
  std::vector<RowTimes> rows(modes.size());
  for (int r = 0; r < a.repeats; r++)
    for (size_t m = 0; m < modes.size(); m++) {
      // A fresh backend per mode and repeat, so its peak is this model's alone.
      auto mbe = make_backend(a.cfg);
      rows[m].ms.push_back(time_step(*mbe, bc, bench_config(a, modes[m]), r == 0 ? 3 : 1, a.iters));
      if (r == 0) rows[m].peak_bytes = double(mbe->peak_bytes());
    }
  const double ms0 = median(rows[0].ms), mem0 = rows[0].peak_bytes;
  for (size_t m = 0; m < modes.size(); m++) {
    const double ms = median(rows[m].ms), mem = rows[m].peak_bytes;
    const auto [lo, hi] = std::minmax_element(rows[m].ms.begin(), rows[m].ms.end());
    double tps = bc.B * bc.T / (ms / 1e3);
    const double flops = tps * flops_per_token(c, bc.T);
    const double pk = peak(modes[m]);
    const std::string share = pk > 0 ? strf("%.1f%%", 100 * flops / pk) : "-";
    printf(
        "| %s | %zu | %d x %d | %s | %.2f | %.2f-%.2f | %.0f | %.1f | %s | %.2fx | %.1f MiB | "
        "%.2fx |\n",
        bc.name, num_parameters(c), bc.B, bc.T, mode_name(modes[m]), ms, *lo, *hi, tps, flops / 1e9,
        share.c_str(), ms / ms0, mem / 1048576.0, mem / mem0);
    fflush(stdout);
  }
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchArgs a;
  if (!parse_bench_args(argc, argv, &a)) return 0;
  const std::vector<BenchCase> cases = bench_cases(a);
  if (a.profile) return profile_models(a, cases);
  auto be = make_backend(a.cfg);
  const bool gpu = be->name() == "cuda";
  const std::string be_model = be->device_model();
  if (gpu) print_gpu_header(*be, a);
  // The CPU's ceiling first, so that every row can say what share of it the step reaches:
  // OpenBLAS (or the loops) on all the threads, as training splits its GEMMs.
  const double ceiling = gpu ? 0 : print_cpu_header(*be, a);
  printf(
      "| model | params | B x T | mode | ms/step | spread | tokens/s | GFLOP/s | %s | time vs "
      "first | peak memory | memory vs first |\n",
      gpu ? "MFU" : "of sgemm");
  printf("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  be.reset();
  for (const auto& bc : cases)
    bench_model(bc, a, [&](Mode m) { return gpu ? gpu_peak_flops(be_model, m) : ceiling; });
  return 0;
}

}  // namespace tg
