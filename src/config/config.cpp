// config.cpp: the key table (key_table.h: its row type) and what reads it whole: the config
// as JSON, the keys' documentation, the range checks (reading a file or a key=value into a
// Config: config_read.cpp; the command line: config_cli.cpp; the checks across keys:
// config_validate.cpp).
#include "config.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "config_keys.h"
#include "key_table.h"
#include "src/base/common.h"
#include "src/base/host_memory.h"
#include "src/numerics/moment_block.h"
#include "src/numerics/recipe.h"

namespace tg {
using json = nlohmann::json;

namespace keys {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The values of precision.state.preset: none, then every preset.
std::vector<std::string> state_preset_choices() {
  std::vector<std::string> out = {no_state_preset()};
  for (const Preset& p : presets(PresetFamily::State)) out.push_back(p.name);
  return out;
}
// A field of Config as a function pointer returning a reference to it (its type deduced).
// clang-format off
#define TG_FIELD(f) +[](Config& c) -> auto& { return c.f; }
// clang-format on

// clang-format off
const std::vector<KeyDef>& table() {
  static const std::vector<KeyDef> t = {
      key("model.n_layer", TG_FIELD(model.n_layer), 1, 1024, {}, "transformer blocks"),
      key("model.n_head", TG_FIELD(model.n_head), 1, 1024, {}, "attention heads"),
      key("model.n_embd", TG_FIELD(model.n_embd), 1, 65536, {}, "channels (multiple of n_head)"),
      key("model.max_seq_len", TG_FIELD(model.max_seq_len), 1, 1 << 20, {}, "positions in wpe"),
      key("model.vocab_size", TG_FIELD(model.vocab_size), 2, 1 << 24, {}, "vocabulary (padded to a multiple of 128 inside)"),
      key("model.init_from", TG_FIELD(model.init_from), 0, 0, {}, "llm.c model file or Hugging Face GPT-2 directory to start from (defines the architecture; data of its tokenizer only)"),
      key("data.train", TG_FIELD(data.train), 0, 0, {}, "glob of training shards"),
      key("data.val", TG_FIELD(data.val), 0, 0, {}, "glob of validation shards (empty: no validation)"),
      key("data.batch_size", TG_FIELD(data.batch_size), 1, 1 << 20, {}, "micro-batch rows per rank (B)"),
      key("data.seq_len", TG_FIELD(data.seq_len), 1, 1 << 20, {}, "tokens per row (T)"),
      key("data.total_batch_tokens", TG_FIELD(data.total_batch_tokens), 0, 1e15, {}, "tokens per optimizer step (0: B*T*ranks; else a multiple of it: gradient accumulation)"),
      key("data.shuffle", TG_FIELD(data.shuffle), 0, 0, {}, "shuffle shards and rows each epoch (seeded)"),
      key("optim.lr", TG_FIELD(optim.lr), 0, 10, {}, "peak learning rate"),
      key("optim.warmup_steps", TG_FIELD(optim.warmup_steps), 0, 1e9, {}, "linear warmup steps"),
      key("optim.schedule", TG_FIELD(optim.schedule), 0, 0, {}, "decay after warmup"),
      key("optim.final_lr_frac", TG_FIELD(optim.final_lr_frac), 0, 1, {}, "final lr as a fraction of lr"),
      key("optim.beta1", TG_FIELD(optim.beta1), 0, 0.999999, {}, "Adam beta1"),
      key("optim.beta2", TG_FIELD(optim.beta2), 0, 0.999999999, {}, "Adam beta2"),
      key("optim.eps", TG_FIELD(optim.eps), 0, 1, {}, "Adam epsilon"),
      key("optim.weight_decay", TG_FIELD(optim.weight_decay), 0, 10, {}, "decoupled weight decay (2-D weights only)"),
      key("optim.grad_clip", TG_FIELD(optim.grad_clip), 0, kInf, {}, "global gradient norm clip (0: off)"),
      key("train.steps", TG_FIELD(train.steps), 0, 1e9, {}, "optimizer steps"),
      key("train.seed", TG_FIELD(train.seed), 0, 9.007199254740992e15, {}, "seed of init, shuffling and sampling"),
      key("train.device", TG_FIELD(train.device), 0, 0, {}, "backend (auto: cuda when a GPU is present)"),
      key("train.threads", TG_FIELD(train.threads), 0, 4096, {}, "CPU threads (0: all cores)"),
      key("train.out_dir", TG_FIELD(train.out_dir), 0, 0, {}, "run directory"),
      key("train.log_every", TG_FIELD(train.log_every), 1, 1e9, {}, "progress line every N steps"),
      key("train.print_config", TG_FIELD(train.print_config), 0, 0, {}, "print the whole config as JSON at the start (else one line; the whole config is always in out_dir/config.json)"),
      key("train.stop_at_step", TG_FIELD(train.stop_at_step), 0, 1e9, {}, "end this run after this step with a checkpoint, as if interrupted; the schedule still follows train.steps (0: off)"),
      key("train.zero_stage", TG_FIELD(train.zero_stage), 0, 1, {}, "ZeRO stage with several ranks: 0 every rank keeps the whole optimizer, 1 shards fp32 master weights and Adam moments over the ranks"),
      key("train.overwrite", TG_FIELD(train.overwrite), 0, 0, {}, "a fresh run in an out_dir that holds another run moves that run's files into out_dir/old_run_<k>/ (nothing is deleted); without it such a run is refused"),
      key("train.memory_check", TG_FIELD(train.memory_check), 0, 0, {}, "before allocating, compare the run's memory plan (train_gpt memory's) with what the machine has (CPU: times its processes on this machine, against MemAvailable; GPU: the GPU plan against the device's free memory) and refuse a run that cannot fit (exit code 2); false skips the check"),
      key("train.adapt_threads", TG_FIELD(train.adapt_threads), 0, 0, {}, "CPU: run the train.threads parts of the work on fewer threads while that is faster (another process sharing the cores); the results do not depend on it"),
      key("dist.rank", TG_FIELD(dist.rank), -1, 65535, {}, "this process's rank, GPU processes launched without MPI (-1: $TG_RANK, else 0)"),
      key("dist.world_size", TG_FIELD(dist.world_size), 0, 65536, {}, "number of GPU processes launched without MPI (0: $TG_WORLD_SIZE, else 1; several CPU processes need mpirun)"),
      key("dist.rendezvous", TG_FIELD(dist.rendezvous), 0, 0, {}, "where GPU processes launched without MPI meet to hand over NCCL's id: tcp://HOST:PORT (rank 0 listens) or file:///PATH on a shared filesystem (\"\": $TG_RENDEZVOUS)"),
      key("dist.timeout", TG_FIELD(dist.timeout), 1, 86400, {}, "seconds to wait for every process at the rendezvous"),
      key("precision.mode", TG_FIELD(precision.mode), 0, 0, mode_names(), "numeric mode (docs/precision.md; auto: its section Adaptive precision)"),
      key("precision.stochastic_rounding", TG_FIELD(precision.stochastic_rounding), 0, 0, {}, "round the master -> 16-bit weight copy stochastically (seeded)"),
      key("precision.loss_scale.kind", TG_FIELD(precision.loss_scale.kind), 0, 0, {}, "loss scaling (auto: dynamic for fp16, none otherwise)"),
      key("precision.loss_scale.init", TG_FIELD(precision.loss_scale.init), 1e-30, 1e30, {}, "initial (or static) loss scale"),
      key("precision.loss_scale.growth_interval", TG_FIELD(precision.loss_scale.growth_interval), 1, 1e9, {}, "finite steps before the scale grows"),
      key("precision.loss_scale.growth", TG_FIELD(precision.loss_scale.growth), 1, 1e6, {}, "growth factor"),
      key("precision.loss_scale.backoff", TG_FIELD(precision.loss_scale.backoff), 1e-6, 1, {}, "factor applied on a non-finite gradient"),
      key("precision.loss_scale.min", TG_FIELD(precision.loss_scale.min), 1e-30, 1e30, {}, "smallest dynamic scale"),
      key("precision.loss_scale.max", TG_FIELD(precision.loss_scale.max), 1e-30, 1e30, {}, "largest dynamic scale"),
      key("precision.loss_scale.hysteresis", TG_FIELD(precision.loss_scale.hysteresis), 1, 1e6, {}, "non-finite steps tolerated before backing off"),
      key("precision.loss_scale.on_device", TG_FIELD(precision.loss_scale.on_device), 0, 0, {}, "CUDA, one process, unsharded: the skip/scale decision and AdamW's factor stay on the GPU (the host reads the result once per step)"),
      key("precision.fp8.recipe", TG_FIELD(precision.fp8.recipe), 0, 0, {}, "FP8 scaling: amax history (delayed) or this tensor's amax (current)"),
      key("precision.fp8.history_len", TG_FIELD(precision.fp8.history_len), 1, 1024, {}, "amax history length of the delayed recipe"),
      key("precision.fp8.margin", TG_FIELD(precision.fp8.margin), 0, 16, {}, "scale = (fmax/amax) / 2^margin"),
      key("precision.fp8.keep_bf16", TG_FIELD(precision.fp8.keep_bf16), -1024, 1023, {}, "layers kept in bf16, e.g. [0, -1] = first and last"),
      key("precision.fp8.fast_accum", TG_FIELD(precision.fp8.fast_accum), 0, 0, {}, "fast accumulation in the forward FP8 GEMM on GPUs (backward: never; CPU: exact fp32); not applied yet by the per-tensor recipe path, which accumulates exactly"),
      key("precision.recipe.pow2_scales", TG_FIELD(precision.recipe.pow2_scales), 0, 0, {}, "fp8-rowwise: round each scale down to a power of two"),
      key("precision.recipe.scale_rule", TG_FIELD(precision.recipe.scale_rule), 0, 0, {}, "mxfp8, mxfp4: E8M0 block scale 2^(floor(log2 amax) - emax) (ocp) or 2^ceil(log2(amax / max)) (ceil); auto: mxfp8 ceil, mxfp4 ocp"),
      key("precision.recipe.grad_format", TG_FIELD(precision.recipe.grad_format), 0, 0, {}, "mxfp8: element format of the output gradients (auto: e4m3)"),
      key("precision.recipe.stochastic_grads", TG_FIELD(precision.recipe.stochastic_grads), 0, 0, {}, "mxfp4, nvfp4: round the output gradients stochastically (seeded by train.seed, step, layer)"),
      key("precision.recipe.hadamard", TG_FIELD(precision.recipe.hadamard), 0, 0, {}, "mxfp4, nvfp4: random Hadamard transform of both wgrad operands along the tokens"),
      key("precision.recipe.hadamard_size", TG_FIELD(precision.recipe.hadamard_size), 2, 256, {}, "points of that Hadamard transform (a power of two)"),
      key("precision.recipe.weight_2d", TG_FIELD(precision.recipe.weight_2d), 0, 0, {}, "nvfp4: one scale per 16x16 weight tile (the same in forward and backward) instead of 1x16 blocks"),
      key("precision.recipe.bf16_last", TG_FIELD(precision.recipe.bf16_last), -1, 1024, {}, "block-scaled modes: the last N layers' linears stay bf16 (-1: nvfp4 1, others 0)"),
      key("precision.recipe.smooth", TG_FIELD(precision.recipe.smooth), 0, 0, {}, "block-scaled modes and auto: SmoothQuant smoothing of the forward GEMM, X diag(1/s) times (W diag(s))^T, s per input channel (docs/precision.md: Smoothing)"),
      key("precision.recipe.smooth_alpha", TG_FIELD(precision.recipe.smooth_alpha), 0, 1, {}, "smoothing: s_c = amax_x(c)^alpha / amax_w(c)^(1-alpha)"),
      key("precision.recipe.smooth_every", TG_FIELD(precision.recipe.smooth_every), 1, 1e9, {}, "smoothing: recompute the factors from the per-channel amaxes at step 1 and every N steps (held in between)"),
      key("precision.auto.every", TG_FIELD(precision.auto_.every), 1, 1e9, {}, "auto: measure the block linears' operand sensitivity every N steps (and at step 1)"),
      key("precision.auto.candidates", TG_FIELD(precision.auto_.candidates), 0, 0, auto_candidate_names(), "auto: the formats each operand may take, narrowest first (the last is the fallback)"),
      key("precision.auto.threshold_db", TG_FIELD(precision.auto_.threshold_db), -100, 200, {}, "auto: least SQNR (dB) of an operand's format against its bf16 values"),
      key("precision.auto.hysteresis_db", TG_FIELD(precision.auto_.hysteresis_db), 0, 100, {}, "auto: a narrower format must beat the threshold by this much (dB)"),
      key("precision.auto.budget", TG_FIELD(precision.auto_.budget), 0, 1, {}, "auto: share of block-linear FLOPs to keep in <= 8 bits, narrowing the best-measured GEMMs past the threshold (0: none)"),
      key("precision.auto.priors", TG_FIELD(precision.auto_.priors), 0, 0, {}, "auto: the first and last layers start in the widest candidate (the others in the widest 8-bit one)"),
      key("precision.auto.window", TG_FIELD(precision.auto_.window), 1, 4096, {}, "auto: measurements in the amax drift window"),
      key("precision.auto.outlier_k", TG_FIELD(precision.auto_.outlier_k), 1, 1e9, {}, "auto: an input channel of a block linear whose amax exceeds k x the median channel's is an outlier"),
      key("precision.auto.outliers", TG_FIELD(precision.auto_.outliers), 0, 0, {}, "auto: outlier channels run unquantized beside the quantized rest of the forward GEMM (split), every input channel is smoothed as precision.recipe.smooth does (smooth), or outliers are only counted (none)"),
      key(kStatePresetKey, TG_FIELD(precision.state.preset), 0, 0, state_preset_choices(), "a named combination of every precision.state key but allow_narrowing, applied before them so that keys given beside it win (docs/precision.md, \"State presets\", says what each sets): lean (bf16-sr master weights, fp8 e4m3 moments, bf16 gradients on the wire), zero-fp8 (ZeRO-1: fp8 gradients, weights and moments), the names of compare --states, or none (the keys as given)"),
      key("precision.state.adam_m", TG_FIELD(precision.state.adam_m), 0, 0, state_format_names(), "storage of Adam's first moment: fp32, bf16 (nearest even), bf16-sr (stochastic rounding, seeded per step and element), fp16 (scaled by 2^12) or fp8-e4m3 / fp8-e5m2 (a scale per block of moment_block elements; docs/precision.md)"),
      key("precision.state.adam_v", TG_FIELD(precision.state.adam_v), 0, 0, state_format_names(), "storage of Adam's second moment: as adam_m; fp16 and fp8 store sqrt(v)"),
      key("precision.state.moment_block", TG_FIELD(precision.state.moment_block), kMomentBlockMin, kMomentBlockMax, {}, "fp8 moments: elements per scale block, a power of two (blocks of the flat parameter vector)"),
      key("precision.state.moment_scale", TG_FIELD(precision.state.moment_scale), 0, 0, {}, "fp8 moments: a block's scale is its amax in fp32, or the power of two at or above it (e8m0)"),
      key("precision.state.moment_expand", TG_FIELD(precision.state.moment_expand), 0, 0, {}, "fp8 moments: COAT's dynamic range expansion, codes holding (|x|/scale)^k with k in 4, 2, 1 per block (coat), or none"),
      key("precision.state.master", TG_FIELD(precision.state.master), 0, 0, master_format_names(), "where the master weights live: fp32 (a copy beside the compute weights), bf16-sr (the bf16 weights themselves, updates stored with stochastic rounding; no copy) or bf16-kahan (the bf16 weights plus a bf16 compensation buffer); the bf16 ones need bf16 weights (docs/precision.md)"),
      key("precision.state.grads", TG_FIELD(precision.state.grads), 0, 0, {}, "what a step's gradients accumulate in over its micro-steps in the 16-bit modes: the compute type (compute: each micro-step adds into bf16 / fp16 gradients) or an fp32 buffer beside them, rounded once to the compute type at the step's end (fp32: 4 more bytes per parameter); fp32 modes accumulate in fp32 either way"),
      key("precision.state.weight_comm", TG_FIELD(precision.state.weight_comm), 0, 0, {}, "with ZeRO-1 (train.zero_stage=1), the format the updated weights are all-gathered in: the compute type (compute) or fp8 e4m3 with an fp32 scale per 128 (every rank then computes with the decoded weights; needs 16-bit weights and fp32 master weights)"),
      key("precision.state.grad_comm", TG_FIELD(precision.state.grad_comm), 0, 0, wire_format_names(), "with several ranks, the format gradients travel in: fp32 (MPI's all-reduce / reduce-scatter), bf16 (half the bytes; lossless for bf16 gradients), fp8-e4m3 or fp8-e5m2 (a quarter, an fp32 scale per 128 elements; e5m2 trades precision for range); parts are summed in fp32 where they arrive (docs/distributed.md)"),
      key("precision.state.allow_narrowing", TG_FIELD(precision.state.allow_narrowing), 0, 0, {}, "resume may convert a checkpoint's Adam moments or master weights into formats that cannot hold them exactly (rounded once, to nearest); without it such a resume is refused (widening is always allowed)"),
      key("precision.telemetry_every", TG_FIELD(precision.telemetry_every), 0, 1e9, {}, "numerics telemetry (amax, zero/subnormal/non-finite fractions per tensor) every N steps (0: off)"),
      key("precision.inject_nonfinite_step", TG_FIELD(precision.inject_nonfinite_step), 0, 1e9, {}, "make this step's gradient non-finite, to see a skipped step (0: off)"),
      key("precision.inject_outlier", TG_FIELD(precision.inject_outlier), 0, 0, {}, "LAYER:CHANNEL:FACTOR[,...]: a fresh run multiplies that layer's ln2 gain of that channel by FACTOR, making the channel an outlier of the fc input; LAYER * is every layer, CHANNEL C%P every channel c with c mod P = C (e.g. *:5%16:20) (\"\": off)"),
      key("eval.every", TG_FIELD(eval.every), 0, 1e9, {}, "val loss every N steps (0: start and end only)"),
      key("eval.batches", TG_FIELD(eval.batches), 1, 1e9, {}, "val batches per evaluation"),
      key("sample.every", TG_FIELD(sample.every), 0, 1e9, {}, "sample every N steps (0: at the end only)"),
      key("sample.tokens", TG_FIELD(sample.tokens), 0, 1 << 20, {}, "tokens per sample (0: no sampling)"),
      key("sample.temperature", TG_FIELD(sample.temperature), 0, 100, {}, "softmax temperature (0: greedy)"),
      key("sample.top_k", TG_FIELD(sample.top_k), 0, 1 << 24, {}, "keep the k most likely tokens (0: all)"),
      key("sample.prompt", TG_FIELD(sample.prompt), 0, 0, {}, "prompt text (encoded by the dataset's tokenizer)"),
      key("cpu.gemm", TG_FIELD(cpu.gemm), 0, 0, {}, "CPU matmul kernel: OpenBLAS (auto, blas) or the built-in loop nest, whose rounding is the same on every CPU (loops)"),
      key("cpu.narrow_gemm", TG_FIELD(cpu.narrow_gemm), 0, 0, {}, "CPU matmuls of bf16, fp8 and the block-scaled modes: bf16 products with fp32 accumulation, on AMX tiles in their own order of the additions (amx_bf16) or on AVX512-BF16's vdpbf16ps in gemm_bf16.h's order (avx512_bf16): the same exact products, fp32 sums that differ in their last bits (auto: the fastest the CPU has, in that order; not with cpu.gemm=loops); or the operands widened to fp32 through cpu.gemm, the exact reference (exact). A path the CPU lacks falls back to the next"),
      key("cuda.attention", TG_FIELD(cuda.attention), 0, 0, {}, "CUDA attention: cuBLAS batched GEMMs + softmax kernels (cublas) or cuDNN's fused flash attention keeping the logsumexp instead of the T x T probabilities, bf16/fp16 only, head sizes multiples of 8 up to 128, deterministic backward (cudnn; the binary built with the cudnn-frontend headers, libcudnn.so.9 opened at run time); auto: cudnn where it is built in, libcudnn loads, the mode and head size suit it and cuDNN builds its forward and backward graphs at the run's shape (checked at start-up), else cublas; the start-up line says which runs and why. Several ranks take one path: cublas on every rank where one rank's cuDNN refused. A forward at a shape cuDNN refuses after start-up (sampling's) runs on the cuBLAS path. flash and fused (hand-written kernels, gone) are read as cudnn and cublas, with a notice. With cudnn the CPU runs its lse twin; on the CPU auto is cublas's reference"),
      key("cuda.cudnn_lib", TG_FIELD(cuda.cudnn_lib), 0, 0, {}, "libcudnn for cuda.attention=cudnn or auto: a file (only that one is tried); \"\": libcudnn.so.9 through the loader's search (LD_LIBRARY_PATH, the toolkit's lib folders), then a pip wheel's (site-packages/nvidia/cudnn/lib: nvidia-cudnn-cu13, which PyTorch brings)"),
      key("cuda.gemm", TG_FIELD(cuda.gemm), 0, 0, {}, "CUDA GEMMs: cuBLASLt with bias epilogue (lt), or plain cuBLAS + our epilogue kernel for every GEMM (fallback)"),
      key("cuda.gelu_epilogue", TG_FIELD(cuda.gelu_epilogue), 0, 0, {}, "CUDA: the MLP's GELU fused into its first GEMM (cuBLASLt GELU_AUX_BIAS)"),
      key("checkpoint.every", TG_FIELD(checkpoint.every), 0, 1e9, {}, "checkpoint every N steps (0: at the end only)"),
      key("checkpoint.keep", TG_FIELD(checkpoint.keep), 1, 1e6, {}, "checkpoints kept (oldest deleted)"),
      key("checkpoint.resume", TG_FIELD(checkpoint.resume), 0, 0, {}, "continue from the latest complete checkpoint in out_dir"),
  };
  return t;
}
// clang-format on
#undef TG_FIELD

const KeyDef* find_key(const std::string& name) {
  for (const auto& k : table())
    if (name == k.name) return &k;
  return nullptr;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Int:
    case Kind::Int64: return "integer";
    case Kind::Float: return "number";
    case Kind::Bool: return "boolean";
    case Kind::String: return "string";
    case Kind::Choice: return "choice";
    case Kind::IntList: return "integer list";
    case Kind::ChoiceList: return "list of names";
  }
  return "?";
}

std::string choices_text(const KeyDef& k) {
  std::string s;
  for (const auto& c : k.choices) s += (s.empty() ? "" : "|") + c;
  return s;
}

// One value as --help shows it (lists comma-separated).
std::string text_of(int v) { return std::to_string(v); }
std::string text_of(int64_t v) { return std::to_string(v); }
std::string text_of(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string text_of(bool v) { return v ? "true" : "false"; }
std::string text_of(const std::string& v) { return v; }
std::string text_of(Mode v) { return mode_name(v); }
std::string text_of(StateFormat v) { return state_format_name(v); }
std::string text_of(MasterFormat v) { return master_format_name(v); }
std::string text_of(WireFormat v) { return wire_format_name(v); }
template <typename E, typename = std::enable_if_t<is_named_enum<E>>>
std::string text_of(E v) {
  return enum_name(v);
}
template <typename T>
std::string text_of(const std::vector<T>& v) {
  std::string s;
  for (const T& x : v) s += (s.empty() ? "" : ",") + text_of(x);
  return s;
}

std::string value_text(const Config& c, const KeyDef& k) {
  return with_field(c, k, [](const auto& v) { return text_of(v); });
}

void check_range(const KeyDef& k, double v, const std::string& origin) {
  if (!(v >= k.lo && v <= k.hi))
    throw UsageError(strf("config key '%s'%s: value %g is out of range [%g, %g]", k.name,
                          origin.empty() ? "" : (" " + origin).c_str(), v, k.lo, k.hi));
}

}  // namespace keys

using namespace keys;

std::vector<std::string> key_names() {
  std::vector<std::string> out;
  for (const auto& k : table()) out.push_back(k.name);
  return out;
}

void check_key_ranges(const Config& c) {
  for (const auto& k : table()) {
    with_field(c, k, [&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, double>)
        check_range(k, double(v), "");
    });
  }
}

json config_to_json(const Config& c) {
  json j = json::object();
  for (const auto& k : table()) {
    json* node = &j;
    std::string name = k.name;
    size_t pos;
    while ((pos = name.find('.')) != std::string::npos) {
      node = &(*node)[name.substr(0, pos)];
      name = name.substr(pos + 1);
    }
    (*node)[name] = with_field(c, k, [](const auto& v) -> json {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, Mode>) {
        return mode_name(v);
      } else if constexpr (std::is_same_v<T, StateFormat>) {
        return state_format_name(v);
      } else if constexpr (std::is_same_v<T, MasterFormat>) {
        return master_format_name(v);
      } else if constexpr (std::is_same_v<T, WireFormat>) {
        return wire_format_name(v);
      } else if constexpr (is_named_enum<T>) {
        return enum_name(v);
      } else if constexpr (std::is_same_v<T, std::vector<Mode>>) {
        json names = json::array();
        for (Mode m : v) names.push_back(mode_name(m));
        return names;
      } else {
        return v;  // numbers, booleans, strings, integer lists as they are
      }
    });
  }
  return j;
}

std::vector<ConfigKeyInfo> config_keys() {
  Config defaults;
  std::vector<ConfigKeyInfo> out;
  for (const auto& k : table()) {
    std::string type = k.kind == Kind::Choice       ? choices_text(k)
                       : k.kind == Kind::ChoiceList ? "list of " + choices_text(k)
                                                    : kind_name(k.kind);
    const bool string_choice =
        k.kind == Kind::Choice && std::holds_alternative<Getter<std::string>>(k.field);
    out.push_back({k.name, type, k.help, value_text(defaults, k), string_choice});
  }
  return out;
}
}  // namespace tg
