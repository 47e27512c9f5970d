// config.cpp: the key table and everything driven by it.
#include "config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common.h"
#include "fileio.h"
#include "recipe.h"

namespace tg {
using json = nlohmann::json;

namespace {

enum class Kind { Int, Int64, Float, Bool, String, Choice, IntList, ChoiceList };

struct KeyDef {
  const char* name;
  Kind kind;
  void* (*get)(Config&);  // the field inside Config
  double lo, hi;          // inclusive range for numbers
  std::vector<std::string> choices;
  const char* help;
};

constexpr double kInf = std::numeric_limits<double>::infinity();
#define TG_OFF(f) [](Config& c) -> void* { return &c.f; }

// clang-format off
const std::vector<KeyDef>& table() {
  static const std::vector<KeyDef> t = {
      {"model.n_layer", Kind::Int, TG_OFF(model.n_layer), 1, 1024, {}, "transformer blocks"},
      {"model.n_head", Kind::Int, TG_OFF(model.n_head), 1, 1024, {}, "attention heads"},
      {"model.n_embd", Kind::Int, TG_OFF(model.n_embd), 1, 65536, {}, "channels (multiple of n_head)"},
      {"model.max_seq_len", Kind::Int, TG_OFF(model.max_seq_len), 1, 1 << 20, {}, "positions in wpe"},
      {"model.vocab_size", Kind::Int, TG_OFF(model.vocab_size), 2, 1 << 24, {}, "vocabulary (padded to a multiple of 128 inside)"},
      {"model.init_from", Kind::String, TG_OFF(model.init_from), 0, 0, {}, "llm.c model file or Hugging Face GPT-2 directory to start from (defines the architecture)"},
      {"data.train", Kind::String, TG_OFF(data.train), 0, 0, {}, "glob of training shards"},
      {"data.val", Kind::String, TG_OFF(data.val), 0, 0, {}, "glob of validation shards (empty: no validation)"},
      {"data.batch_size", Kind::Int, TG_OFF(data.batch_size), 1, 1 << 20, {}, "micro-batch rows per rank (B)"},
      {"data.seq_len", Kind::Int, TG_OFF(data.seq_len), 1, 1 << 20, {}, "tokens per row (T)"},
      {"data.total_batch_tokens", Kind::Int64, TG_OFF(data.total_batch_tokens), 0, 1e15, {}, "tokens per optimizer step (0: B*T*ranks; else a multiple of it: gradient accumulation)"},
      {"data.shuffle", Kind::Bool, TG_OFF(data.shuffle), 0, 0, {}, "shuffle shards and rows each epoch (seeded)"},
      {"optim.lr", Kind::Float, TG_OFF(optim.lr), 0, 10, {}, "peak learning rate"},
      {"optim.warmup_steps", Kind::Int, TG_OFF(optim.warmup_steps), 0, 1e9, {}, "linear warmup steps"},
      {"optim.schedule", Kind::Choice, TG_OFF(optim.schedule), 0, 0, {"cosine", "linear", "constant"}, "decay after warmup"},
      {"optim.final_lr_frac", Kind::Float, TG_OFF(optim.final_lr_frac), 0, 1, {}, "final lr as a fraction of lr"},
      {"optim.beta1", Kind::Float, TG_OFF(optim.beta1), 0, 0.999999, {}, "Adam beta1"},
      {"optim.beta2", Kind::Float, TG_OFF(optim.beta2), 0, 0.999999999, {}, "Adam beta2"},
      {"optim.eps", Kind::Float, TG_OFF(optim.eps), 0, 1, {}, "Adam epsilon"},
      {"optim.weight_decay", Kind::Float, TG_OFF(optim.weight_decay), 0, 10, {}, "decoupled weight decay (2-D weights only)"},
      {"optim.grad_clip", Kind::Float, TG_OFF(optim.grad_clip), 0, kInf, {}, "global gradient norm clip (0: off)"},
      {"train.steps", Kind::Int, TG_OFF(train.steps), 0, 1e9, {}, "optimizer steps"},
      {"train.seed", Kind::Int64, TG_OFF(train.seed), 0, 9.007199254740992e15, {}, "seed of init, shuffling and sampling"},
      {"train.device", Kind::Choice, TG_OFF(train.device), 0, 0, {"auto", "cpu", "cuda"}, "backend (auto: cuda when a GPU is present)"},
      {"train.threads", Kind::Int, TG_OFF(train.threads), 0, 4096, {}, "CPU threads (0: all cores)"},
      {"train.out_dir", Kind::String, TG_OFF(train.out_dir), 0, 0, {}, "run directory"},
      {"train.log_every", Kind::Int, TG_OFF(train.log_every), 1, 1e9, {}, "progress line every N steps"},
      {"train.stop_at_step", Kind::Int, TG_OFF(train.stop_at_step), 0, 1e9, {}, "end this run after this step with a checkpoint, as if interrupted; the schedule still follows train.steps (0: off)"},
      {"train.zero_stage", Kind::Int, TG_OFF(train.zero_stage), 0, 1, {}, "ZeRO stage with several ranks: 0 every rank keeps the whole optimizer, 1 shards fp32 master weights and Adam moments over the ranks"},
      {"train.overwrite", Kind::Bool, TG_OFF(train.overwrite), 0, 0, {}, "a fresh run in an out_dir that holds another run moves that run's files into out_dir/old_run_<k>/ (nothing is deleted); without it such a run is refused"},
      {"train.adapt_threads", Kind::Bool, TG_OFF(train.adapt_threads), 0, 0, {}, "CPU: run the train.threads parts of the work on fewer threads while that is faster (another process sharing the cores); the results do not depend on it"},
      {"dist.rank", Kind::Int, TG_OFF(dist.rank), -1, 65535, {}, "this process's rank when launched without MPI (-1: $TG_RANK, else 0)"},
      {"dist.world_size", Kind::Int, TG_OFF(dist.world_size), 0, 65536, {}, "number of processes when launched without MPI (0: $TG_WORLD_SIZE, else 1)"},
      {"dist.rendezvous", Kind::String, TG_OFF(dist.rendezvous), 0, 0, {}, "where processes launched without MPI meet: tcp://HOST:PORT (rank 0 listens) or file:///PATH on a shared filesystem (\"\": $TG_RENDEZVOUS)"},
      {"dist.timeout", Kind::Int, TG_OFF(dist.timeout), 1, 86400, {}, "seconds to wait for every process at the rendezvous"},
      {"precision.mode", Kind::Choice, TG_OFF(precision.mode), 0, 0, {"fp32", "bf16", "fp16", "fp8", "fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4", "auto"}, "numeric mode (docs/precision.md; auto: its section Adaptive precision)"},
      {"precision.stochastic_rounding", Kind::Bool, TG_OFF(precision.stochastic_rounding), 0, 0, {}, "round the master -> 16-bit weight copy stochastically (seeded)"},
      {"precision.loss_scale.kind", Kind::Choice, TG_OFF(precision.loss_scale.kind), 0, 0, {"auto", "dynamic", "static", "none"}, "loss scaling (auto: dynamic for fp16, none otherwise)"},
      {"precision.loss_scale.init", Kind::Float, TG_OFF(precision.loss_scale.init), 1e-30, 1e30, {}, "initial (or static) loss scale"},
      {"precision.loss_scale.growth_interval", Kind::Int, TG_OFF(precision.loss_scale.growth_interval), 1, 1e9, {}, "finite steps before the scale grows"},
      {"precision.loss_scale.growth", Kind::Float, TG_OFF(precision.loss_scale.growth), 1, 1e6, {}, "growth factor"},
      {"precision.loss_scale.backoff", Kind::Float, TG_OFF(precision.loss_scale.backoff), 1e-6, 1, {}, "factor applied on a non-finite gradient"},
      {"precision.loss_scale.min", Kind::Float, TG_OFF(precision.loss_scale.min), 1e-30, 1e30, {}, "smallest dynamic scale"},
      {"precision.loss_scale.max", Kind::Float, TG_OFF(precision.loss_scale.max), 1e-30, 1e30, {}, "largest dynamic scale"},
      {"precision.loss_scale.hysteresis", Kind::Int, TG_OFF(precision.loss_scale.hysteresis), 1, 1e6, {}, "non-finite steps tolerated before backing off"},
      {"precision.loss_scale.on_device", Kind::Bool, TG_OFF(precision.loss_scale.on_device), 0, 0, {}, "CUDA, one process, unsharded: the skip/scale decision and AdamW's factor stay on the GPU (the host reads the result once per step)"},
      {"precision.fp8.recipe", Kind::Choice, TG_OFF(precision.fp8.recipe), 0, 0, {"delayed", "current"}, "FP8 scaling: amax history (delayed) or this tensor's amax (current)"},
      {"precision.fp8.history_len", Kind::Int, TG_OFF(precision.fp8.history_len), 1, 1024, {}, "amax history length of the delayed recipe"},
      {"precision.fp8.margin", Kind::Int, TG_OFF(precision.fp8.margin), 0, 16, {}, "scale = (fmax/amax) / 2^margin"},
      {"precision.fp8.keep_bf16", Kind::IntList, TG_OFF(precision.fp8.keep_bf16), -1024, 1023, {}, "layers kept in bf16, e.g. [0, -1] = first and last"},
      {"precision.fp8.fast_accum", Kind::Bool, TG_OFF(precision.fp8.fast_accum), 0, 0, {}, "fast accumulation in the forward FP8 GEMM on GPUs (backward: never; CPU: exact fp32)"},
      {"precision.recipe.pow2_scales", Kind::Bool, TG_OFF(precision.recipe.pow2_scales), 0, 0, {}, "fp8-rowwise: round each scale down to a power of two"},
      {"precision.recipe.scale_rule", Kind::Choice, TG_OFF(precision.recipe.scale_rule), 0, 0, {"auto", "ocp", "ceil"}, "mxfp8, mxfp4: E8M0 block scale 2^(floor(log2 amax) - emax) (ocp) or 2^ceil(log2(amax / max)) (ceil); auto: mxfp8 ceil, mxfp4 ocp"},
      {"precision.recipe.grad_format", Kind::Choice, TG_OFF(precision.recipe.grad_format), 0, 0, {"auto", "e4m3", "e5m2"}, "mxfp8: element format of the output gradients (auto: e4m3)"},
      {"precision.recipe.stochastic_grads", Kind::Bool, TG_OFF(precision.recipe.stochastic_grads), 0, 0, {}, "mxfp4, nvfp4: round the output gradients stochastically (seeded by train.seed, step, layer)"},
      {"precision.recipe.hadamard", Kind::Bool, TG_OFF(precision.recipe.hadamard), 0, 0, {}, "mxfp4, nvfp4: random Hadamard transform of both wgrad operands along the tokens"},
      {"precision.recipe.hadamard_size", Kind::Int, TG_OFF(precision.recipe.hadamard_size), 2, 256, {}, "points of that Hadamard transform (a power of two)"},
      {"precision.recipe.weight_2d", Kind::Bool, TG_OFF(precision.recipe.weight_2d), 0, 0, {}, "nvfp4: one scale per 16x16 weight tile (the same in forward and backward) instead of 1x16 blocks"},
      {"precision.recipe.bf16_last", Kind::Int, TG_OFF(precision.recipe.bf16_last), -1, 1024, {}, "block-scaled modes: the last N layers' linears stay bf16 (-1: nvfp4 1, others 0)"},
      {"precision.recipe.smooth", Kind::Bool, TG_OFF(precision.recipe.smooth), 0, 0, {}, "block-scaled modes and auto: SmoothQuant smoothing of the forward GEMM, X diag(1/s) times (W diag(s))^T, s per input channel (docs/precision.md: Smoothing)"},
      {"precision.recipe.smooth_alpha", Kind::Float, TG_OFF(precision.recipe.smooth_alpha), 0, 1, {}, "smoothing: s_c = amax_x(c)^alpha / amax_w(c)^(1-alpha)"},
      {"precision.recipe.smooth_every", Kind::Int, TG_OFF(precision.recipe.smooth_every), 1, 1e9, {}, "smoothing: recompute the factors from the per-channel amaxes at step 1 and every N steps (held in between)"},
      {"precision.auto.every", Kind::Int, TG_OFF(precision.auto_.every), 1, 1e9, {}, "auto: measure the block linears' operand sensitivity every N steps (and at step 1)"},
      {"precision.auto.candidates", Kind::ChoiceList, TG_OFF(precision.auto_.candidates), 0, 0, {"nvfp4", "mxfp4", "mxfp8", "fp8-block", "fp8-rowwise", "fp8", "bf16"}, "auto: the formats each operand may take, narrowest first (the last is the fallback)"},
      {"precision.auto.threshold_db", Kind::Float, TG_OFF(precision.auto_.threshold_db), -100, 200, {}, "auto: least SQNR (dB) of an operand's format against its bf16 values"},
      {"precision.auto.hysteresis_db", Kind::Float, TG_OFF(precision.auto_.hysteresis_db), 0, 100, {}, "auto: a narrower format must beat the threshold by this much (dB)"},
      {"precision.auto.budget", Kind::Float, TG_OFF(precision.auto_.budget), 0, 1, {}, "auto: share of block-linear FLOPs to keep in <= 8 bits, narrowing the best-measured GEMMs past the threshold (0: none)"},
      {"precision.auto.priors", Kind::Bool, TG_OFF(precision.auto_.priors), 0, 0, {}, "auto: the first and last layers start in the widest candidate (the others in the widest 8-bit one)"},
      {"precision.auto.window", Kind::Int, TG_OFF(precision.auto_.window), 1, 4096, {}, "auto: measurements in the amax drift window"},
      {"precision.auto.outlier_k", Kind::Float, TG_OFF(precision.auto_.outlier_k), 1, 1e9, {}, "auto: an input channel of a block linear whose amax exceeds k x the median channel's is an outlier"},
      {"precision.auto.outliers", Kind::Choice, TG_OFF(precision.auto_.outliers), 0, 0, {"split", "smooth", "none"}, "auto: outlier channels run unquantized beside the quantized rest of the forward GEMM (split), every input channel is smoothed as precision.recipe.smooth does (smooth), or outliers are only counted (none)"},
      {"precision.telemetry_every", Kind::Int, TG_OFF(precision.telemetry_every), 0, 1e9, {}, "numerics telemetry (amax, zero/subnormal/non-finite fractions per tensor) every N steps (0: off)"},
      {"precision.inject_nonfinite_step", Kind::Int, TG_OFF(precision.inject_nonfinite_step), 0, 1e9, {}, "make this step's gradient non-finite, to see a skipped step (0: off)"},
      {"precision.inject_outlier", Kind::String, TG_OFF(precision.inject_outlier), 0, 0, {}, "LAYER:CHANNEL:FACTOR[,...]: a fresh run multiplies that layer's ln2 gain of that channel by FACTOR, making the channel an outlier of the fc input; LAYER * is every layer, CHANNEL C%P every channel c with c mod P = C (e.g. *:5%16:20) (\"\": off)"},
      {"eval.every", Kind::Int, TG_OFF(eval.every), 0, 1e9, {}, "val loss every N steps (0: start and end only)"},
      {"eval.batches", Kind::Int, TG_OFF(eval.batches), 1, 1e9, {}, "val batches per evaluation"},
      {"sample.every", Kind::Int, TG_OFF(sample.every), 0, 1e9, {}, "sample every N steps (0: at the end only)"},
      {"sample.tokens", Kind::Int, TG_OFF(sample.tokens), 0, 1 << 20, {}, "tokens per sample (0: no sampling)"},
      {"sample.temperature", Kind::Float, TG_OFF(sample.temperature), 0, 100, {}, "softmax temperature (0: greedy)"},
      {"sample.top_k", Kind::Int, TG_OFF(sample.top_k), 0, 1 << 24, {}, "keep the k most likely tokens (0: all)"},
      {"sample.prompt", Kind::String, TG_OFF(sample.prompt), 0, 0, {}, "prompt text (byte tokenizer)"},
      {"cpu.gemm", Kind::Choice, TG_OFF(cpu.gemm), 0, 0, {"auto", "blas", "loops"}, "CPU matmul kernel: OpenBLAS (auto, blas) or the built-in loop nest, whose rounding is the same on every CPU (loops)"},
      {"cpu.narrow_gemm", Kind::Choice, TG_OFF(cpu.narrow_gemm), 0, 0, {"auto", "exact"}, "CPU matmuls of bf16, fp8 and the block-scaled modes: bf16 products with fp32 accumulation on the CPU's AVX512-BF16 instructions when present (auto; not with cpu.gemm=loops), or the operands widened to fp32 through cpu.gemm, the exact reference (exact)"},
      {"cuda.attention", Kind::Choice, TG_OFF(cuda.attention), 0, 0, {"cublas", "fused", "flash"}, "CUDA attention: cuBLAS batched GEMMs + softmax kernels (cublas), a fused single-pass forward (fused), or tiled flash forward/backward keeping the logsumexp instead of the T x T probabilities (flash; the CPU then runs its flash twin)"},
      {"cuda.gemm", Kind::Choice, TG_OFF(cuda.gemm), 0, 0, {"lt", "fallback"}, "CUDA GEMMs: cuBLASLt with bias epilogue (lt), or plain cuBLAS + our epilogue kernel for every GEMM (fallback)"},
      {"cuda.gelu_epilogue", Kind::Bool, TG_OFF(cuda.gelu_epilogue), 0, 0, {}, "CUDA: the MLP's GELU fused into its first GEMM (cuBLASLt GELU_AUX_BIAS)"},
      {"checkpoint.every", Kind::Int, TG_OFF(checkpoint.every), 0, 1e9, {}, "checkpoint every N steps (0: at the end only)"},
      {"checkpoint.keep", Kind::Int, TG_OFF(checkpoint.keep), 1, 1e6, {}, "checkpoints kept (oldest deleted)"},
      {"checkpoint.resume", Kind::Bool, TG_OFF(checkpoint.resume), 0, 0, {}, "continue from the latest complete checkpoint in out_dir"},
  };
  return t;
}
// clang-format on
#undef TG_OFF

template <typename T>
T& field(Config& c, const KeyDef& k) {
  return *static_cast<T*>(k.get(c));
}
template <typename T>
const T& field(const Config& c, const KeyDef& k) {
  return *static_cast<const T*>(k.get(const_cast<Config&>(c)));
}

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

std::string value_text(const Config& c, const KeyDef& k) {
  switch (k.kind) {
    case Kind::Int: return std::to_string(field<int>(c, k));
    case Kind::Int64: return std::to_string(field<int64_t>(c, k));
    case Kind::Float: {
      std::ostringstream os;
      os << field<double>(c, k);
      return os.str();
    }
    case Kind::Bool: return field<bool>(c, k) ? "true" : "false";
    case Kind::String:
    case Kind::Choice: return field<std::string>(c, k);
    case Kind::IntList: {
      std::string s;
      for (int v : field<std::vector<int>>(c, k)) s += (s.empty() ? "" : ",") + std::to_string(v);
      return s;
    }
    case Kind::ChoiceList: {
      std::string s;
      for (const auto& v : field<std::vector<std::string>>(c, k)) s += (s.empty() ? "" : ",") + v;
      return s;
    }
  }
  return "";
}

[[noreturn]] void bad_value(const KeyDef& k, const std::string& what, const std::string& origin) {
  std::string expect = k.kind == Kind::Choice       ? "one of " + choices_text(k)
                       : k.kind == Kind::ChoiceList ? "a list of " + choices_text(k)
                                                    : kind_name(k.kind);
  throw UsageError(strf("config key '%s'%s: %s (expected %s)", k.name,
                        origin.empty() ? "" : (" " + origin).c_str(), what.c_str(),
                        expect.c_str()));
}

void check_range(const KeyDef& k, double v, const std::string& origin) {
  if (!(v >= k.lo && v <= k.hi))
    throw UsageError(strf("config key '%s'%s: value %g is out of range [%g, %g]", k.name,
                          origin.empty() ? "" : (" " + origin).c_str(), v, k.lo, k.hi));
}

void set_json(Config& c, const KeyDef& k, const json& v, const std::string& origin) {
  switch (k.kind) {
    case Kind::Int:
    case Kind::Int64: {
      if (!v.is_number_integer()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      double d = v.is_number_unsigned() ? double(v.get<uint64_t>()) : double(v.get<int64_t>());
      check_range(k, d, origin);
      if (k.kind == Kind::Int)
        field<int>(c, k) = int(v.get<int64_t>());
      else
        field<int64_t>(c, k) = v.get<int64_t>();
      break;
    }
    case Kind::Float: {
      if (!v.is_number()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      double d = v.get<double>();
      check_range(k, d, origin);
      field<double>(c, k) = d;
      break;
    }
    case Kind::Bool:
      if (!v.is_boolean()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      field<bool>(c, k) = v.get<bool>();
      break;
    case Kind::String:
      if (!v.is_string()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      field<std::string>(c, k) = v.get<std::string>();
      break;
    case Kind::IntList: {
      if (!v.is_array()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      std::vector<int> out;
      for (const auto& e : v) {
        if (!e.is_number_integer()) bad_value(k, "a list entry is not an integer", origin);
        check_range(k,
                    e.is_number_unsigned() ? double(e.get<uint64_t>()) : double(e.get<int64_t>()),
                    origin);
        out.push_back(int(e.get<int64_t>()));
      }
      field<std::vector<int>>(c, k) = out;
      break;
    }
    case Kind::ChoiceList: {
      if (!v.is_array()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      std::vector<std::string> out;
      for (const auto& e : v) {
        if (!e.is_string()) bad_value(k, "a list entry is not a string", origin);
        const std::string s = e.get<std::string>();
        if (std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end())
          bad_value(k, "'" + s + "' is not allowed", origin);
        out.push_back(s);
      }
      field<std::vector<std::string>>(c, k) = out;
      break;
    }
    case Kind::Choice: {
      if (!v.is_string()) bad_value(k, "wrong type " + std::string(v.type_name()), origin);
      std::string s = v.get<std::string>();
      bool ok = false;
      for (const auto& ch : k.choices) ok |= (ch == s);
      if (!ok) bad_value(k, "'" + s + "' is not allowed", origin);
      field<std::string>(c, k) = s;
      break;
    }
  }
}

bool is_section(const std::string& name) {
  for (const auto& d : table())
    if (std::string(d.name).rfind(name + ".", 0) == 0) return true;
  return false;
}

// Whether s is valid UTF-8, as every value must be to be written to config.json and
// checkpoints (JSON input always is; the command line need not be).
bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

void apply_object(Config& c, const json& j, const std::string& prefix, const std::string& origin) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string name = prefix.empty() ? it.key() : prefix + "." + it.key();
    const KeyDef* k = find_key(name);
    if (k) {
      set_json(c, *k, it.value(), origin);
    } else if (is_section(name)) {
      if (!it.value().is_object())
        throw UsageError(strf("config section '%s' %s must be a JSON object, not %s %s",
                              name.c_str(), origin.c_str(), it.value().type_name(),
                              it.value().dump().c_str()));
      apply_object(c, it.value(), name, origin);
    } else {
      throw UsageError(strf("unknown config %s '%s' %s", it.value().is_object() ? "section" : "key",
                            name.c_str(), origin.c_str()));
    }
  }
}

// Parses JSON text, refusing a key given twice in one object (nlohmann would keep the
// last silently); `what` names the text in errors.
json parse_json_no_duplicates(const std::string& text, const std::string& what) {
  std::vector<std::set<std::string>> seen;
  std::vector<std::string> path;
  std::string last_key;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
        seen.emplace_back();
        path.push_back(last_key);
        break;
      case json::parse_event_t::object_end:
        seen.pop_back();
        path.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        if (!seen.back().insert(last_key).second) {
          std::string full;
          for (size_t i = 1; i < path.size(); i++) full += path[i] + ".";
          throw UsageError(
              strf("%s: key '%s' appears twice", what.c_str(), (full + last_key).c_str()));
        }
        break;
      }
      case json::parse_event_t::array_start: last_key.clear(); break;
      default: break;
    }
    return true;
  };
  return json::parse(text, cb, true, /*ignore_comments=*/true);
}

}  // namespace

void config_apply_json(Config& cfg, const json& j, const std::string& origin) {
  if (!j.is_object())
    throw UsageError(
        strf("a config must be a JSON object (%s: %s)", origin.c_str(), j.type_name()));
  apply_object(cfg, j, "", origin);
}

void config_load_file(Config& cfg, const std::string& path) {
  std::vector<char> bytes;
  try {
    bytes = read_file(path, "config file");
  } catch (const Error& e) {
    throw UsageError(e.what());  // a config problem: exit code 2
  }
  const std::string what = "config file " + path;
  json j;
  try {
    j = parse_json_no_duplicates(std::string(bytes.begin(), bytes.end()), what);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw UsageError(strf("config file %s is not valid JSON: %s", path.c_str(), e.what()));
  }
  config_apply_json(cfg, j, "in " + what);
}

void config_set(Config& cfg, const std::string& key, const std::string& text) {
  const KeyDef* k = find_key(key);
  if (!k) throw UsageError(strf("unknown config key '%s'", key.c_str()));
  const std::string origin = "on the command line";
  json v;
  switch (k->kind) {
    case Kind::Int:
    case Kind::Int64: {
      errno = 0;
      char* end = nullptr;
      long long x = strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end || errno) bad_value(*k, "'" + text + "' is not an integer", origin);
      v = int64_t(x);
      break;
    }
    case Kind::Float: {
      char* end = nullptr;
      double x = strtod(text.c_str(), &end);
      if (text.empty() || *end || !std::isfinite(x))
        bad_value(*k, "'" + text + "' is not a number", origin);
      v = x;
      break;
    }
    case Kind::Bool:
      if (text == "true" || text == "1")
        v = true;
      else if (text == "false" || text == "0")
        v = false;
      else
        bad_value(*k, "'" + text + "' is not a boolean", origin);
      break;
    case Kind::String:
    case Kind::Choice:
      if (!valid_utf8(text)) bad_value(*k, "the value is not valid UTF-8", origin);
      v = text;
      break;
    case Kind::IntList: {
      v = json::array();
      size_t pos = 0;
      while (pos < text.size()) {
        size_t next = text.find(',', pos);
        if (next == std::string::npos) next = text.size();
        std::string item = text.substr(pos, next - pos);
        char* end = nullptr;
        long long x = strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end) bad_value(*k, "'" + text + "' is not a list of integers", origin);
        v.push_back(int64_t(x));
        pos = next + 1;
      }
      break;
    }
    case Kind::ChoiceList: {
      v = json::array();
      size_t pos = 0;
      while (pos < text.size()) {
        size_t next = text.find(',', pos);
        if (next == std::string::npos) next = text.size();
        v.push_back(text.substr(pos, next - pos));
        pos = next + 1;
      }
      break;
    }
  }
  set_json(cfg, *k, v, origin);
}

namespace {
// One entry of precision.inject_outlier; false with *why when it is not LAYER:CHANNEL:FACTOR.
bool parse_outlier_entry(const std::string& e, InjectedOutlier* o, std::string* why) {
  *why = strf(
      "entry '%s' is not LAYER:CHANNEL:FACTOR (LAYER a number or *, CHANNEL a number "
      "or C%%P; e.g. 1:5:30 or *:5%%16:20)",
      e.c_str());
  const size_t c1 = e.find(':'), c2 = c1 == std::string::npos ? c1 : e.find(':', c1 + 1);
  if (c2 == std::string::npos) return false;
  const std::string layer = e.substr(0, c1), chan = e.substr(c1 + 1, c2 - c1 - 1),
                    factor = e.substr(c2 + 1);
  int n = 0;
  if (layer == "*")
    o->layer = -1;
  else if (sscanf(layer.c_str(), "%d%n", &o->layer, &n) != 1 || n != int(layer.size()) ||
           o->layer < 0)
    return false;
  const size_t pct = chan.find('%');
  const std::string first = chan.substr(0, pct);
  if (sscanf(first.c_str(), "%d%n", &o->channel, &n) != 1 || n != int(first.size()) ||
      o->channel < 0)
    return false;
  o->period = 0;
  if (pct != std::string::npos) {
    const std::string per = chan.substr(pct + 1);
    if (sscanf(per.c_str(), "%d%n", &o->period, &n) != 1 || n != int(per.size()) || o->period <= 0)
      return false;
    if (o->channel >= o->period) {
      *why = strf("entry '%s': channel %d is not below the period %d", e.c_str(), o->channel,
                  o->period);
      return false;
    }
  }
  if (sscanf(factor.c_str(), "%lf%n", &o->factor, &n) != 1 || n != int(factor.size()) ||
      !std::isfinite(o->factor))
    return false;
  return true;
}
}  // namespace

bool parse_inject_outlier(const std::string& s, std::vector<InjectedOutlier>* out,
                          std::string* why) {
  out->clear();
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = s.find(',', pos);
    if (next == std::string::npos) next = s.size();
    InjectedOutlier o;
    if (!parse_outlier_entry(s.substr(pos, next - pos), &o, why)) return false;
    out->push_back(o);
    pos = next + 1;
    if (next + 1 == s.size()) {  // a trailing comma
      *why = "ends with a comma";
      return false;
    }
  }
  return true;
}

void config_validate(const Config& c, int world) {
  for (const auto& k : table()) {
    if (k.kind == Kind::Int) check_range(k, field<int>(c, k), "");
    if (k.kind == Kind::Int64) check_range(k, double(field<int64_t>(c, k)), "");
    if (k.kind == Kind::Float) check_range(k, field<double>(c, k), "");
  }
  auto err = [](const char* key, const std::string& msg) {
    throw UsageError(strf("config key '%s': %s", key, msg.c_str()));
  };
  if (c.model.n_embd % c.model.n_head != 0)
    err("model.n_embd",
        strf("%d is not a multiple of model.n_head=%d", c.model.n_embd, c.model.n_head));
  if (c.data.seq_len > c.model.max_seq_len)
    err("data.seq_len",
        strf("%d exceeds model.max_seq_len=%d", c.data.seq_len, c.model.max_seq_len));
  int64_t micro = int64_t(c.data.batch_size) * c.data.seq_len * world;
  if (c.data.total_batch_tokens != 0 && c.data.total_batch_tokens % micro != 0)
    err("data.total_batch_tokens", strf("%lld is not a multiple of batch_size*seq_len*ranks=%lld",
                                        (long long)c.data.total_batch_tokens, (long long)micro));
  if (c.data.train.empty()) err("data.train", "must not be empty");
  const auto& ls = c.precision.loss_scale;
  if (ls.min > ls.max)
    err("precision.loss_scale.min",
        strf("%g is above precision.loss_scale.max=%g", ls.min, ls.max));
  const int hs = c.precision.recipe.hadamard_size;
  if (hs & (hs - 1)) err("precision.recipe.hadamard_size", strf("%d is not a power of two", hs));
  if (c.precision.recipe.smooth && c.precision.mode != "auto" &&
      !is_block_scaled_mode(c.precision.mode))
    err("precision.recipe.smooth",
        strf("needs a block-scaled precision.mode or auto, not %s", c.precision.mode.c_str()));
  std::vector<InjectedOutlier> io;
  std::string why;
  if (!parse_inject_outlier(c.precision.inject_outlier, &io, &why))
    err("precision.inject_outlier", why);
  if (c.train.out_dir.empty()) err("train.out_dir", "must not be empty");
#ifdef TG_NO_BLAS
  if (c.cpu.gemm == "blas")
    err("cpu.gemm", "blas: this binary was built without OpenBLAS (NO_BLAS=1)");
#endif
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
    switch (k.kind) {
      case Kind::Int: (*node)[name] = field<int>(c, k); break;
      case Kind::Int64: (*node)[name] = field<int64_t>(c, k); break;
      case Kind::Float: (*node)[name] = field<double>(c, k); break;
      case Kind::Bool: (*node)[name] = field<bool>(c, k); break;
      case Kind::String:
      case Kind::Choice: (*node)[name] = field<std::string>(c, k); break;
      case Kind::IntList: (*node)[name] = field<std::vector<int>>(c, k); break;
      case Kind::ChoiceList: (*node)[name] = field<std::vector<std::string>>(c, k); break;
    }
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
    out.push_back({k.name, type, k.help, value_text(defaults, k)});
  }
  return out;
}

ExtraOption int_option(const std::string& name, const std::string& help,
                       const std::string& default_value, double lo, double hi) {
  ExtraOption o{name, help, default_value};
  o.kind = ExtraOption::Kind::Int;
  o.lo = lo;
  o.hi = hi;
  return o;
}

ExtraOption number_option(const std::string& name, const std::string& help,
                          const std::string& default_value, double lo, double hi) {
  ExtraOption o = int_option(name, help, default_value, lo, hi);
  o.kind = ExtraOption::Kind::Number;
  return o;
}

namespace {
// A subcommand's numeric option, checked as config keys are (exit code 2, naming it).
void check_option_value(const ExtraOption& e, const std::string& text) {
  if (e.kind == ExtraOption::Kind::Text) return;
  errno = 0;
  char* end = nullptr;
  double v;
  if (e.kind == ExtraOption::Kind::Int) {
    const long long x = strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end || errno)
      throw UsageError(strf("option --%s: '%s' is not an integer", e.name.c_str(), text.c_str()));
    v = double(x);
  } else {
    v = strtod(text.c_str(), &end);
    if (text.empty() || *end || !std::isfinite(v))
      throw UsageError(
          strf("option --%s: '%s' is not a finite number", e.name.c_str(), text.c_str()));
  }
  if (!(v >= e.lo && v <= e.hi))
    throw UsageError(
        strf("option --%s: %s is out of range [%g, %g]", e.name.c_str(), text.c_str(), e.lo, e.hi));
}

// cxxopts matches every argument with std::regex, whose recursion overflows the stack on an
// argument of some 20000 characters; no path or key needs more than this.
constexpr size_t kMaxArgLength = 4096;

void check_arg_lengths(int argc, char** argv) {
  for (int i = 0; i < argc; i++) {
    const size_t n = strlen(argv[i]);
    if (n > kMaxArgLength)
      throw UsageError(
          strf("command-line argument %d is %zu characters long, more than the %zu allowed "
               "(put long values in the --config file)",
               i, n, kMaxArgLength));
  }
}
}  // namespace

bool config_parse_args(Config* cfg, int argc, char** argv, const std::string& program,
                       const std::vector<ExtraOption>& extra,
                       std::vector<std::pair<std::string, std::string>>* extra_values,
                       bool* config_file_given) {
  cxxopts::Options opts(program, "");
  opts.custom_help(cfg ? "[--config FILE] [--section.key=value ...]" : "[options]");
  opts.add_options()("h,help", "print this help");
  if (cfg)
    opts.add_options()("config", "JSON config file (keys below; command line wins)",
                       cxxopts::value<std::string>());
  for (const auto& e : extra) {
    if (e.is_flag)
      opts.add_options()(e.name, e.help);
    else if (e.default_value.empty())
      opts.add_options()(e.name, e.help, cxxopts::value<std::string>());
    else
      opts.add_options()(e.name, e.help,
                         cxxopts::value<std::string>()->default_value(e.default_value));
  }
  if (cfg)
    for (const auto& k : config_keys())
      opts.add_options("config keys")(
          k.name, k.help + " [" + k.type + "]",
          cxxopts::value<std::string>()->default_value(k.default_value));
  check_arg_lengths(argc, argv);
  cxxopts::ParseResult r;
  try {
    r = opts.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (!r.unmatched().empty())
    throw UsageError(strf("unexpected argument '%s'", r.unmatched()[0].c_str()));
  if (r.count("help")) {
    printf("%s\n", opts.help({"", "config keys"}).c_str());
    return false;
  }
  if (cfg) {
    if (config_file_given) *config_file_given = r.count("config") > 0;
    if (r.count("config")) config_load_file(*cfg, r["config"].as<std::string>());
    // Command-line values are applied in table order after the file, so they win.
    for (const auto& k : table())
      if (r.count(k.name)) config_set(*cfg, k.name, r[k.name].as<std::string>());
  }
  if (extra_values) {
    for (const auto& e : extra) {
      if (e.is_flag) {
        if (r.count(e.name)) extra_values->push_back({e.name, "true"});
      } else if (r.count(e.name) || !e.default_value.empty()) {
        check_option_value(e, r[e.name].as<std::string>());
        extra_values->push_back({e.name, r[e.name].as<std::string>()});
      }
    }
  }
  return true;
}

}  // namespace tg
