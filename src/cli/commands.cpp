#include "commands.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "bench.h"
#include "export.h"
#include "memory_gpu.h"
#include "memory_states.h"
#include "docs.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/host_memory.h"
#include "src/base/rng.h"
#include "src/base/suggest.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/data/bpe.h"
#include "src/data/prepare.h"
#include "src/data/prepare_gpt2.h"
#include "src/data/tokenizer.h"
#include "src/model/model.h"
#include "src/model/sample.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"
#include "src/precision/scaled_scratch.h"
#include "src/report/compare.h"
#include "src/report/report.h"
#include "src/training/backend_factory.h"
#include "src/training/checkpoint.h"
#include "src/training/hf.h"
#include "src/training/memory_check.h"
#include "src/training/signals.h"
#include "src/training/train.h"

namespace tg {

namespace {

using Extras = std::vector<std::pair<std::string, std::string>>;

std::string extra(const Extras& v, const std::string& name, const std::string& fallback = "") {
  for (const auto& kv : v)
    if (kv.first == name) return kv.second;
  return fallback;
}

int64_t to_int(const std::string& name, const std::string& s) {
  char* end = nullptr;
  long long x = strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end)
    throw UsageError(strf("option --%s: '%s' is not an integer", name.c_str(), s.c_str()));
  return x;
}

double to_double(const std::string& name, const std::string& s) {
  char* end = nullptr;
  double x = strtod(s.c_str(), &end);
  if (s.empty() || *end)
    throw UsageError(strf("option --%s: '%s' is not a number", name.c_str(), s.c_str()));
  return x;
}

void usage() {
  printf(
      "train_gpt: train GPT-2 style transformers in mixed precision (CPU backend; CUDA backend)\n\n"
      "usage:\n"
      "  train_gpt [train] --config FILE [--section.key=value ...]   train (the default)\n"
      "  train_gpt prepare toy [--out DIR] [--seed N]                  make the synthetic task\n"
      "  train_gpt prepare text --input FILE [--tokenizer byte|gpt2]   bytes or GPT-2 tokens of "
      "text\n"
      "  train_gpt sample --checkpoint DIR [--prompt TEXT] ...         generate text\n"
      "  train_gpt export --checkpoint DIR --out DIR [--dtype fp32]    Hugging Face GPT-2 "
      "directory\n"
      "  train_gpt compare --config FILE [--modes fp32,bf16,...]      runs per mode x seed + "
      "report\n"
      "  train_gpt report RUN_DIR... [--out DIR]                      the report for any runs\n"
      "  train_gpt memory --config FILE [--preset gpt2] [--modes ...]  memory plan per mode\n"
      "  train_gpt bench [--threads N]                                 step-time table\n"
      "  train_gpt docs [--check]                                      the manual's generated "
      "tables\n\n"
      "`train_gpt <command> --help` lists that command's options; `train_gpt train --help`\n"
      "lists every config key with its default.\n");
}

}  // namespace

int cmd_train(int argc, char** argv) {
  Config cfg;
  if (!config_parse_args(&cfg, argc, argv, "train_gpt train", {}, nullptr)) return 0;
  run_training(cfg);
  return 0;
}

namespace {

// The shard name: --name, else the input's file name without its extension.
std::string dataset_name(const Extras& ex, const std::string& input) {
  std::string name = extra(ex, "name");
  if (name.empty()) {
    std::string base = input;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    name = base.substr(base.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
    if (name.empty()) name = "text";
  }
  return name;
}

// The commands that train on what `prepare text` wrote and sample from the run: the config of
// a model for that tokenizer (configs/shakespeare.json for bytes, shakespeare_gpt2.json for
// GPT-2's tokens) with the data's shards and a run directory of its own, runs/<out's name>;
// where that config is not at hand (run from another directory), the program's defaults with
// the vocabulary size. `sample` finds the tokenizer in the checkpoint, which records it.
void print_train_command(const std::string& out, const std::string& name, bool gpt2) {
  const std::string config = gpt2 ? "configs/shakespeare_gpt2.json" : "configs/shakespeare.json";
  std::string run = out;
  while (run.size() > 1 && run.back() == '/') run.pop_back();
  run = "runs/" + run.substr(run.find_last_of('/') + 1);
  const std::string model = file_exists(config)
                                ? "--config " + config
                                : strf("--model.vocab_size %d", gpt2 ? kGpt2VocabSize : 256);
  printf(
      "train on it: ./train_gpt train %s --data.train '%s/%s_train_*.bin' --data.val "
      "'%s/%s_val_*.bin' --train.out_dir %s\n"
      "then sample: ./train_gpt sample --checkpoint %s --tokens 200 --prompt 'Your prompt'\n",
      model.c_str(), out.c_str(), name.c_str(), out.c_str(), name.c_str(), run.c_str(),
      run.c_str());
}

// `prepare text`: bytes (vocabulary 256) or GPT-2's BPE; ends with the train command for it.
int prepare_text_command(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"input", "text file; with --tokenizer gpt2 also a folder or a .jsonl file", ""},
      {"out", "output directory (default data/<name>)", ""},
      {"name", "shard name prefix (default: the input's name)", ""},
      {"tokenizer", "byte (vocabulary 256) or gpt2 (GPT-2's BPE, vocabulary 50257)", "byte"},
      {"vocab_dir", "gpt2: the folder of vocab.json and merges.txt", "data/gpt2"},
      {"errors", "gpt2: invalid UTF-8 is an error (strict) or U+FFFD (replace)", "strict"},
      {"split",
       "gpt2: a text file is one document (none) or one per paragraph, at blank lines "
       "(paragraphs); each document starts with <|endoftext|>",
       "none"},
      number_option("val_fraction", "fraction of the text kept for validation", "0.1", 0, 0.99),
      int_option("shard_tokens", "tokens per shard", "100000000", 1, 2e9),
      int_option("threads", "gpt2: tokenizer threads (0: all)", "0", 0, 4096)};
  Extras ex;
  if (!config_parse_args(nullptr, argc, argv, "train_gpt prepare text", opts, &ex)) return 0;
  const std::string input = extra(ex, "input"), tokenizer = extra(ex, "tokenizer");
  if (input.empty()) throw UsageError("prepare text: --input FILE is required");
  if (tokenizer != "byte" && tokenizer != "gpt2")
    throw UsageError(
        strf("prepare text: --tokenizer is byte or gpt2, not '%s'", tokenizer.c_str()));
  const std::string name = dataset_name(ex, input);
  std::string out = extra(ex, "out", "");
  if (out.empty()) out = "data/" + name;
  const double val_fraction = to_double("val_fraction", extra(ex, "val_fraction"));
  const int64_t shard_tokens = to_int("shard_tokens", extra(ex, "shard_tokens"));
  if (tokenizer == "byte") {
    if (extra(ex, "split") != "none")
      throw UsageError(
          "prepare text: --split needs --tokenizer gpt2 (bytes have no <|endoftext|> to "
          "separate documents)");
    prepare_text(input, out, name, val_fraction, shard_tokens);
    printf("wrote %s/%s_{train,val}_*.bin and meta.json\n", out.c_str(), name.c_str());
  } else {
    Gpt2PrepareOptions o;
    o.input = input;
    o.out_dir = out;
    o.name = name;
    o.vocab_dir = extra(ex, "vocab_dir");
    o.errors = extra(ex, "errors");
    o.split = extra(ex, "split");
    o.val_fraction = val_fraction;
    o.shard_tokens = shard_tokens;
    o.threads = int(to_int("threads", extra(ex, "threads")));
    const Gpt2PrepareResult r = prepare_text_gpt2(o);
    printf(
        "wrote %s/%s_train_*.bin (%d shard(s), %lld documents, %lld tokens), %s_val_*.bin (%d, "
        "%lld, %lld), gpt2_tokenizer.bin and meta.json; %.3f tokens per byte\n",
        out.c_str(), name.c_str(), r.train_shards, (long long)r.train_docs,
        (long long)r.train_tokens, name.c_str(), r.val_shards, (long long)r.val_docs,
        (long long)r.val_tokens, double(r.train_tokens + r.val_tokens) / double(r.bytes));
  }
  print_train_command(out, name, tokenizer == "gpt2");
  return 0;
}

}  // namespace

int cmd_prepare(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
      printf("usage: train_gpt prepare toy|text [options]  (see --help of each)\n");
      return 0;
    }
    throw UsageError("prepare: say what to prepare: toy or text");
  }
  std::string what = argv[1];
  Extras ex;
  if (what == "toy") {
    std::vector<ExtraOption> opts = {
        {"out", "output directory", "data/toy"},
        int_option("seed", "generator seed", "1337", 0, 9.007199254740992e15),
        int_option("train_tokens", "training tokens", "1048576", 1, 2e9),
        int_option("val_tokens", "validation tokens", "65536", 1, 2e9),
        int_option("record_len", "tokens per record (even; rows should hold whole records)", "16",
                   2, 1 << 20)};
    if (!config_parse_args(nullptr, argc - 1, argv + 1, "train_gpt prepare toy", opts, &ex))
      return 0;
    std::string out = extra(ex, "out");
    prepare_toy(out, uint64_t(to_int("seed", extra(ex, "seed"))),
                to_int("train_tokens", extra(ex, "train_tokens")),
                to_int("val_tokens", extra(ex, "val_tokens")),
                int(to_int("record_len", extra(ex, "record_len"))));
    printf("wrote %s/toy_train_000000.bin, toy_val_000000.bin and meta.json (loss floor %.4f)\n",
           out.c_str(), toy_loss_floor(int(to_int("record_len", extra(ex, "record_len")))));
    return 0;
  }
  if (what == "text") return prepare_text_command(argc - 1, argv + 1);
  throw UsageError(strf("prepare: unknown dataset kind '%s' (toy or text)", what.c_str()));
}

namespace {
// sample's threads: as asked, else one for a small model (a token's forward is too little work
// to split: on 2 shared cores 40 tokens of the toy model took 7-21 s on both threads against 0.4 s
// on one) and all (0) for a larger one.
int sample_threads(const GPTConfig& c, int asked) {
  if (asked > 0) return asked;
  return num_parameters(c) < 5000000 ? 1 : 0;
}

// The threads sample ran on and why, on stderr after the text (which stays alone on stdout).
void say_sample_threads(const GPTConfig& c, int asked, int threads) {
  fflush(stdout);
  fprintf(stderr, "sample: %s thread%s (%s; --threads sets them)\n",
          threads > 0 ? std::to_string(threads).c_str() : "all", threads == 1 ? "" : "s",
          asked > 0 ? "asked" : strf("a model of %zu parameters", num_parameters(c)).c_str());
}
}  // namespace

namespace {
// sample's tokenizer: the one the model records, or --tokenizer when it is the same; a model
// that records none (a checkpoint from before the record, an llm.c file) decodes bytes, or
// --tokenizer, as before, and says so.
Tokenizer sample_tokenizer(const std::string& option, const ModelFile& mf,
                           const std::string& model) {
  if (option.empty()) {
    if (mf.tokenizer.known()) return tokenizer_of_record(mf.tokenizer);
    fprintf(stderr,
            "sample: %s names no tokenizer (an llm.c file, or a checkpoint from before "
            "they recorded one): decoding bytes; --tokenizer DIR names its data's\n",
            model.c_str());
    return Tokenizer();
  }
  return tokenizer_of_record(
      tokenizer_option_record("sample", option, mf.tokenizer, model, mf.cfg.vocab_size, false));
}
}  // namespace

int cmd_sample(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"checkpoint", "checkpoint directory (or a run directory: its latest checkpoint)", ""},
      {"model", "an llm.c model file or a Hugging Face GPT-2 directory instead of a checkpoint",
       ""},
      {"tokenizer",
       "a dataset folder (its meta.json's tokenizer), a GPT-2 vocabulary folder or llm.c's "
       "gpt2_tokenizer.bin (decoding only); it must be the model's. Default: the one the model "
       "records (bytes for a model that records none)",
       ""},
      {"prompt", "prompt text", ""},
      int_option("tokens", "tokens to generate", "256", 1, 1 << 20),
      number_option("temperature", "softmax temperature (0: greedy)", "1.0", 0, 100),
      int_option("top_k", "sample from the k most likely tokens (0: all)", "0", 0, 1 << 24),
      int_option("seed", "sampling seed", "1337", 0, 9.007199254740992e15),
      int_option("threads",
                 "CPU threads (0: one for a model under 5M parameters, whose per-token work is "
                 "too small to split, else all)",
                 "0", 0, 4096),
      {"logits",
       "instead of generating, write the prompt's logits to this file (fp32, "
       "prompt tokens x vocab_size, row-major)",
       ""}};
  Extras ex;
  if (!config_parse_args(nullptr, argc, argv, "train_gpt sample", opts, &ex)) return 0;
  Config cfg;
  std::string ckpt = extra(ex, "checkpoint"), model_path = extra(ex, "model");
  if (ckpt.empty() == model_path.empty())
    throw UsageError("sample: give exactly one of --checkpoint DIR or --model FILE");
  ModelFile mf = ckpt.empty() ? read_model(model_path) : load_checkpoint_model(ckpt);
  cfg.train.device = "cpu";
  const int asked = int(to_int("threads", extra(ex, "threads")));
  cfg.train.threads = sample_threads(mf.cfg, asked);
  auto be = make_backend(cfg);
  GPT model(mf.cfg, *be);
  model.set_params(mf.params);
  const Tokenizer tok =
      sample_tokenizer(extra(ex, "tokenizer"), mf, ckpt.empty() ? model_path : ckpt);
  std::vector<int32_t> prompt;
  std::string prompt_text = extra(ex, "prompt");
  if (!prompt_text.empty())
    prompt = tok.encode(prompt_text);
  else
    prompt = {tok.byte_level() ? int32_t('\n') : mf.cfg.vocab_size - 1};  // newline / <|endoftext|>
  for (int32_t id : prompt)
    if (id >= mf.cfg.vocab_size)
      throw UsageError(strf("prompt token %d is outside the model's vocabulary", id));
  if (!extra(ex, "logits").empty()) {
    write_prompt_logits(model, prompt, extra(ex, "logits"));
    return 0;
  }
  Rng rng(uint64_t(to_int("seed", extra(ex, "seed"))));
  std::vector<int32_t> out = generate(model, prompt, int(to_int("tokens", extra(ex, "tokens"))),
                                      to_double("temperature", extra(ex, "temperature")),
                                      int(to_int("top_k", extra(ex, "top_k"))), rng);
  std::string text;
  for (int32_t id : out) text += tok.decode(id);
  printf("%s\n", printable(text).c_str());
  say_sample_threads(mf.cfg, asked, cfg.train.threads);
  return 0;
}

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
  if (cfg.train.device == "cuda") {
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
  // cuda.attention=flash: the plan of flash attention (lse instead of the T x T probabilities).
  const bool lse = cfg.cuda.attention == "flash";
  printf("memory plan: %zu parameters (L=%d NH=%d C=%d V=%d), batch %d x %d, per process%s%s\n\n",
         num_parameters(mc), mc.n_layer, mc.n_head, mc.n_embd, mc.vocab_size, B, T,
         zero_ranks > 1 ? strf(", ZeRO-1 over %d ranks", zero_ranks).c_str() : "",
         lse ? ", flash attention" : "");
  const auto& st = cfg.precision.state;
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

namespace {
// Prints the error; in a multi-process job, names the rank and ends every process so that
// none waits forever in a collective.
int fail(int code, const char* what) {
  if (comm_is_distributed()) {
    fprintf(stderr, "train_gpt: error (rank %d): %s\n", comm_rank(), what);
    fflush(stderr);
    comm_abort(code);
  }
  fprintf(stderr, "train_gpt: error: %s\n", what);
  return code;
}
}  // namespace

namespace {
// After "out of host memory allocating N bytes for X": what to run and which keys shrink it.
std::string out_of_memory_advice(const std::string& purpose) {
  const std::string keys =
      purpose.find("activations") != std::string::npos
          ? "data.batch_size or data.seq_len (data.total_batch_tokens keeps the tokens per step), "
            "or the model (model.n_layer, model.n_embd)"
          : "the model (model.n_layer, model.n_embd), data.batch_size or data.seq_len, or shard "
            "the optimizer over ranks (train.zero_stage=1)";
  return "; `train_gpt memory` with this run's --config and --section.key options shows what "
         "the run needs and whether it fits this machine; to need less, shrink " +
         keys;
}
}  // namespace

int run_main(int argc, char** argv) {
  std::string sub = argc > 1 ? argv[1] : "";
  try {
    if (sub == "-h" || sub == "--help" || sub == "help") {
      usage();
      return 0;
    }
    if (sub == "prepare") return cmd_prepare(argc - 1, argv + 1);
    if (sub == "sample") return cmd_sample(argc - 1, argv + 1);
    if (sub == "train") return cmd_train(argc - 1, argv + 1);
    if (sub == "bench") return cmd_bench(argc - 1, argv + 1);
    if (sub == "memory") return cmd_memory(argc - 1, argv + 1);
    if (sub == "compare") return cmd_compare(argc - 1, argv + 1);
    if (sub == "report") return cmd_report(argc - 1, argv + 1);
    if (sub == "export") return cmd_export(argc - 1, argv + 1);
    if (sub == "docs") return cmd_docs(argc - 1, argv + 1);
    if (sub.empty() || sub[0] == '-') return cmd_train(argc, argv);
    const std::vector<std::string> commands = {"train",  "prepare", "sample", "export", "compare",
                                               "report", "memory",  "bench",  "docs"};
    throw UsageError(
        strf("unknown command '%s'%s; the commands are train, prepare, sample, export, compare, "
             "report, memory, bench and docs (--help)",
             sub.c_str(), did_you_mean(sub, commands).c_str()));
  } catch (const StoppedBySignal& e) {
    // The checkpoint is written and every rank stopped after the same step: a plain exit.
    if (comm_rank() == 0)
      printf("%s\nto continue: %s\n", e.what(), continue_command(argc, argv).c_str());
    fflush(stdout);
    return 128 + e.signal;
  } catch (const UsageError& e) {
    return fail(2, e.what());
  } catch (const OutOfMemory& e) {
    return fail(1, (e.what() + out_of_memory_advice(e.purpose)).c_str());
  } catch (const std::bad_alloc&) {
    return fail(1, ("out of host memory (std::bad_alloc)" + out_of_memory_advice("")).c_str());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}

}  // namespace tg
