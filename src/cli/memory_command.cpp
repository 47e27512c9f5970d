// memory_command.cpp: `train_gpt memory`: the bytes each mode needs for any shape, without
// allocating them, whether they fit this machine, and the block-scaled and state presets' plans.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "memory_gpu.h"
#include "memory_states.h"
#include "src/base/common.h"
#include "src/base/host_memory.h"
#include "src/base/suggest.h"
#include "src/config/config.h"
#include "src/io/hf.h"
#include "src/model/model.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"
#include "src/precision/scaled_scratch.h"
#include "src/training/memory_check.h"

namespace tg {

namespace {
// The CUDA backend's scratch slots of the block-scaled linears (src/precision/scaled_scratch.h) for
// the block-scaled modes among `modes`, on the portable and the native path.
void print_scaled_scratch(const Config& cfg, const GPTConfig& mc, const std::vector<Mode>& modes,
                          int B, int T) {
  constexpr int kSms = kPlannedGpuSms;
  auto mib = [](size_t b) { return strf("%.2f MiB", b / 1048576.0); };
  bool header = false;
  for (const Mode mode : modes) {
    if (!is_block_scaled(mode)) continue;
    const ScaledScratchPlan p =
        plan_scaled_scratch(mc, block_scaled_recipe(mode, recipe_options(cfg)), B, T, kSms);
    if (!header) {
      printf(
          "\nCUDA block-scaled GEMM scratch, portable / native (src/backends/cuda/launch.h's slots "
          "kScratchQStageA .. kScratchStatsArgs at their high-water mark over a step):\n\n"
          "| mode | path | staged fp32 operands | quantized operands | group scales | fp32 "
          "products | cuBLASLt scale tensors | self-check | total | with telemetry |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
      header = true;
    }
    for (int native = 0; native < 2; native++) {
      const ScaledScratch& s = native ? p.native : p.portable;
      ScaledScratch t = s;
      t.grow(p.stats);
      printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", mode_name(mode),
             native ? "native (sm_100)" : "portable", mib(s.sum(kSlotStageA, kSlotStageB)).c_str(),
             mib(s.sum(kSlotQA, kSlotQB)).c_str(), mib(s.sum(kSlotAmax, kSlotWords)).c_str(),
             mib(s.sum(kSlotAcc, kSlotSplitAcc)).c_str(),
             mib(s.sum(kSlotScaleA, kSlotScaleB)).c_str(),
             mib(s.sum(kSlotCheck, kSlotCheckAcc)).c_str(), mib(s.total()).c_str(),
             mib(t.total()).c_str());
    }
  }
  if (header)
    printf(
        "\nWhat the CUDA backend's block-scaled linears allocate besides the tensors above: each "
        "scratch slot grows to the largest block linear that uses it (each operand's quantized "
        "copy, read from the model's tensor where it lies; an fp32 staged copy only for the "
        "operands that smoothing, the split or a rotation over 32 points change first; scales; "
        "the fp32 product) and "
        "is kept; it counts in the backend's peak. A GPU takes the native path where cuBLASLt "
        "has the recipe's block-scaled GEMM (fp8-rowwise, fp8-block on sm_90+, MX / NV formats "
        "on sm_100+; decided per GEMM at run time, with a one-time self-check), else the "
        "portable one. \"with telemetry\": precision.telemetry_every's operand statistics too "
        "(on a %d-multiprocessor GPU). Checked against the emulated backend, not yet on a GPU.\n",
        kSms);
}

// The block-scaled modes among `modes`: the bits of their formats and what
// a native block-scaled path would hold instead of the bf16 copies (src/precision/quant_memory.h).
void print_quantized_plan(const Config& cfg, const GPTConfig& mc, const std::vector<Mode>& modes,
                          int B, int T, int zero_ranks, bool lse) {
  auto mib = [](size_t b) { return strf("%.1f MiB", b / 1048576.0); };
  bool header = false;
  for (const Mode mode : modes) {
    if (!is_block_scaled(mode)) continue;
    const QuantRecipe r = block_scaled_recipe(mode, recipe_options(cfg));
    const QuantMemoryPlan q = plan_quantized_linears(mc, r, B, T);
    const MemoryPlan p = plan_memory_of(cfg, mode, mc, B, T, zero_ranks, zero_ranks, lse);
    if (!header) {
      printf(
          "\nBlock-scaled modes on a native path (quantized copies of the block linears' "
          "operands, scales included; bits per element of layer 0's fc):\n\n"
          "| mode | quantized layers | fwd input bits | weight bits | wgrad input bits | "
          "weight copies | saved linear inputs, bf16 -> quantized | total |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|\n");
      header = true;
    }
    const size_t total = native_path_bytes(p, q);
    printf("| %s | %d/%d | %.3f | %.3f | %.3f | %s | %s -> %s | %s |\n", mode_name(mode),
           q.quantized_layers, mc.n_layer, q.input_bits, q.weight_bits, q.wgrad_input_bits,
           mib(q.weight_copies).c_str(), mib(q.saved_inputs_bf16).c_str(),
           mib(q.saved_inputs_quantized).c_str(), mib(total).c_str());
  }
  if (header)
    printf(
        "\nThe weight copies sit beside the bf16 weights; the saved inputs are quantized in the "
        "forward as the weight-gradient GEMM takes them (input^T along the tokens), replacing "
        "their bf16 copies. The CPU backend emulates these modes with the bf16 copies (the "
        "first table).\n");
  print_scaled_scratch(cfg, mc, modes, B, T);
}
// --preset: the model.* keys of a GPT-2 size.
void apply_preset(Config& cfg, const std::string& preset) {
  if (preset.empty()) return;
  std::vector<std::string> names;
  for (const Gpt2Size& s : gpt2_sizes()) {
    names.push_back(s.name);
    if (preset != s.name) continue;
    cfg.model.n_layer = s.n_layer;
    cfg.model.n_head = s.n_head;
    cfg.model.n_embd = s.n_embd;
    cfg.model.vocab_size = 50257;
    cfg.model.max_seq_len = 1024;
    return;
  }
  throw UsageError(
      strf("memory: unknown --preset '%s'%s", preset.c_str(), did_you_mean(preset, names).c_str()));
}

// Each mode's total against this machine's memory (a CPU run), or a word on the GPU's.
void print_memory_fit(const Config& cfg,
                      const std::vector<std::pair<std::string, MemoryPlan>>& plans,
                      int zero_ranks) {
  if (plans.empty()) return;
  if (cfg.train.device == DeviceChoice::Cuda) {
    printf(
        "\ntrain.device=cuda: the GPU's memory is not queried here; compare each total with it "
        "(nvidia-smi), leaving room for the CUDA context and the block-scaled scratch below.\n");
    return;
  }
  const HostMemory host = host_memory();
  if (host.available == 0) {
    printf("\nthis machine's memory is unknown (no /proc/meminfo): compare each total with it.\n");
    return;
  }
  printf("\nthis machine, a CPU run: %s available of %s (/proc/meminfo)%s\n",
         fmt_bytes(double(host.available)).c_str(), fmt_bytes(double(host.total)).c_str(),
         zero_ranks > 1 ? strf("; the totals are per process: %d processes on one machine need "
                               "%d times as much",
                               zero_ranks, zero_ranks)
                              .c_str()
                        : "");
  const std::pair<std::string, MemoryPlan>* smallest_over = nullptr;
  for (const auto& plan : plans) {
    const size_t total = plan.second.total();
    const bool fits = total <= host.available;
    printf("  %s: %s: %s of %s available\n", plan.first.c_str(), fits ? "fits" : "does NOT fit",
           fmt_bytes(double(total)).c_str(), fmt_bytes(double(host.available)).c_str());
    if (!fits && (!smallest_over || total < smallest_over->second.total())) smallest_over = &plan;
  }
  if (smallest_over)
    printf("To fit, %s.\n",
           shrink_advice(cfg, smallest_over->first, smallest_over->second).c_str());
}
}  // namespace

int cmd_memory(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"modes", "comma-separated precision modes",
       mode_list_text({Mode::FP32, Mode::BF16, Mode::FP16})},
      {"preset", "gpt2 | gpt2-medium | gpt2-large | gpt2-xl (sets the model.* keys)", ""},
      int_option("zero_ranks", "plan one rank of ZeRO-1 over this many ranks (1: no sharding)", "1",
                 1, 65536),
      {"states",
       "comma-separated state presets, or all: each one's bytes per parameter and totals at "
       "GPT-2's four sizes, one process and ZeRO-1, in the first of --modes "
       "(docs/memory.md)",
       ""}};
  Config cfg;
  Extras ex;
  if (!config_parse_args(&cfg, argc, argv, "train_gpt memory", opts, &ex)) return 0;
  apply_preset(cfg, extra(ex, "preset"));
  config_validate(cfg);
  GPTConfig mc =
      cfg.model.init_from.empty() ? model_config(cfg) : read_model(cfg.model.init_from).cfg;
  const int B = cfg.data.batch_size, T = cfg.data.seq_len;
  const int zero_ranks = int(to_int("zero_ranks", extra(ex, "zero_ranks")));
  // cuda.attention=cudnn (or flash, read as cudnn): the CPU runs its lse twin (lse instead of
  // the T x T probabilities); auto is the reference there. The GPU's own choice:
  // print_cuda_scratch.
  const std::string notice = attention_request_notice(cfg.cuda.attention);
  if (!notice.empty()) printf("%s\n", notice.c_str());
  const bool lse = effective_attention(cfg.cuda.attention) == AttentionRequest::Cudnn;
  printf("memory plan: %zu parameters (L=%d NH=%d C=%d V=%d), batch %d x %d, per process%s%s\n\n",
         num_parameters(mc), mc.n_layer, mc.n_head, mc.n_embd, mc.vocab_size, B, T,
         zero_ranks > 1 ? strf(", ZeRO-1 over %d ranks", zero_ranks).c_str() : "",
         lse ? ", attention keeping lse (cuDNN's layout)" : "");
  const PrecisionSpec spec = precision_spec(cfg);
  const auto& st = spec.state;
  printf("| mode | weights | master | gradients | optimizer | activations | reduction | total |\n");
  printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  auto mib = [](size_t b) { return strf("%.1f MiB", b / 1048576.0); };
  const std::string names = extra(ex, "modes") + ",";
  std::vector<Mode> modes;
  std::vector<std::pair<std::string, MemoryPlan>> plans;
  for (size_t pos = 0, next; (next = names.find(',', pos)) != std::string::npos; pos = next + 1) {
    const std::string name = names.substr(pos, next - pos);
    if (name.empty()) continue;
    const Mode mode = parse_mode(name, "precision.mode");
    modes.push_back(mode);
    const MemoryPlan p = plan_memory_of(cfg, mode, mc, B, T, zero_ranks, zero_ranks, lse);
    plans.push_back({name, p});
    printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name.c_str(), mib(p.weights).c_str(),
           mib(p.master).c_str(), mib(p.grads).c_str(), mib(p.optimizer).c_str(),
           mib(p.activations).c_str(), mib(p.comm).c_str(), mib(p.total()).c_str());
  }
  printf(
      "\nThe CPU backend allocates exactly this (a run's summary.json reports its peak); "
      "\"optimizer\" is Adam's m (%s) and v (%s), %.4g bytes per parameter%s; \"reduction\" is "
      "the staging of the gradient reduction over ranks (precision.state.grad_comm=%s: %.4g "
      "bytes per gradient on the wire); \"master\" is the master weights "
      "(precision.state.master=%s in the modes with bf16 weights: %s).\n",
      moment_blocking_name(st.adam_m, moment_blocking(cfg)).c_str(),
      moment_blocking_name(st.adam_v, moment_blocking(cfg)).c_str(),
      state_format_bytes(st.adam_m, moment_blocking(cfg)) +
          state_format_bytes(st.adam_v, moment_blocking(cfg)),
      zero_ranks > 1 ? " of this rank's shard" : "", wire_format_name(st.grad_comm),
      wire_bytes_per_element(st.grad_comm), master_format_name(st.master),
      master_format_info(st.master).summary);
  print_memory_fit(cfg, plans, zero_ranks);
  print_cuda_scratch(cfg, mc, modes);
  print_quantized_plan(cfg, mc, modes, B, T, zero_ranks, lse);
  if (!extra(ex, "states").empty() && !modes.empty())
    print_state_presets(cfg, modes[0], extra(ex, "states"), zero_ranks > 1 ? zero_ranks : 8);
  return 0;
}

}  // namespace tg
