// config.h: the run configuration, read from JSON and overridden on the command line.
//
// Every key lives in one table (config.cpp) with its type, default, range and help text,
// so JSON parsing, `--section.key=value` overrides, `--help` and validation all agree.
// Errors name the key and raise UsageError (exit code 2).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "src/base/named_enum.h"
#include "src/base/path_choices.h"
#include "src/numerics/loss_scaler.h"
#include "src/numerics/master_format.h"
#include "src/numerics/precision_mode.h"
#include "src/numerics/recipe.h"
#include "src/numerics/state_format.h"
#include "src/numerics/wire_format.h"
#include "presets.h"

namespace tg {

// The enumerated keys' values that are the config's own (named_enum.h): parsed once where
// the config is read, compared as enums everywhere else.
enum class DeviceChoice { Auto, Cpu, Cuda };         // train.device
enum class CpuGemm { Auto, Blas, Loops };            // cpu.gemm
enum class CudaGemm { Lt, Fallback };                // cuda.gemm
enum class OutlierHandling { Split, Smooth, None };  // precision.auto.outliers
enum class LrSchedule { Cosine, Linear, Constant };  // optim.schedule (schedule.h)
template <>
struct EnumNames<DeviceChoice> {
  static constexpr std::array names{"auto", "cpu", "cuda"};
};
template <>
struct EnumNames<CpuGemm> {
  static constexpr std::array names{"auto", "blas", "loops"};
};
template <>
struct EnumNames<CudaGemm> {
  static constexpr std::array names{"lt", "fallback"};
};
template <>
struct EnumNames<OutlierHandling> {
  static constexpr std::array names{"split", "smooth", "none"};
};
template <>
struct EnumNames<LrSchedule> {
  static constexpr std::array names{"cosine", "linear", "constant"};
};

struct Config {
  struct Model {
    int n_layer = 2;
    int n_head = 8;
    int n_embd = 64;
    int max_seq_len = 64;
    int vocab_size = 256;
    std::string init_from;  // llm.c model file or Hugging Face GPT-2 dir; defines the architecture
  } model;
  struct Data {
    std::string train = "data/toy/toy_train_*.bin";
    std::string val = "data/toy/toy_val_*.bin";
    int batch_size = 16;
    int seq_len = 64;
    int64_t total_batch_tokens = 0;  // 0: one micro-batch per step (B*T*world)
    bool shuffle = true;
  } data;
  struct Optim {
    double lr = 3e-3;
    int warmup_steps = 100;
    LrSchedule schedule = LrSchedule::Cosine;
    double final_lr_frac = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
    double grad_clip = 1.0;  // 0 disables clipping
  } optim;
  struct Train {
    int steps = 5000;
    int64_t seed = 1337;
    DeviceChoice device = DeviceChoice::Auto;  // auto: cuda when a GPU is present
    int threads = 0;  // 0: all cores
    std::string out_dir = "runs/default";
    int log_every = 100;
    int stop_at_step = 0;  // end this run early, with a checkpoint (0: run to steps)
    int zero_stage = 0;    // 1: ZeRO-1, master weights and Adam moments sharded over ranks
    bool overwrite = false;
    bool print_config = false;  // the whole config on the console (always in out_dir/config.json)
    bool memory_check = true;   // CPU: refuse a run whose memory plan exceeds MemAvailable
    bool adapt_threads = true;  // fewer CPU threads while another process shares the cores  // a
                                // fresh run in a used out_dir moves the old run aside
  } train;
  // Launching several GPU processes without MPI (src/comm/comm.h; CPU processes need mpirun): rank,
  // world size and meeting point from these keys or the environment (TG_RANK, TG_WORLD_SIZE,
  // TG_RENDEZVOUS).
  struct Dist {
    int rank = -1;           // -1: TG_RANK, else 0
    int world_size = 0;      // 0: TG_WORLD_SIZE, else 1
    std::string rendezvous;  // tcp://HOST:PORT or file:///PATH ("": TG_RENDEZVOUS)
    int timeout = 300;       // seconds to wait for every rank to arrive
  } dist;
  struct Precision {
    Mode mode = Mode::FP32;            // src/numerics/precision_mode.h
    bool stochastic_rounding = false;  // of the master -> 16-bit weight copy
    struct LossScale {
      LossScaling kind = LossScaling::Auto;  // auto: dynamic for fp16, none otherwise
      double init = 65536.0;
      int growth_interval = 2000;
      double growth = 2.0;
      double backoff = 0.5;
      double min = 1.0;
      double max = 16777216.0;
      int hysteresis = 1;
      bool on_device = false;  // the skip/scale decision on the GPU (one process)
    } loss_scale;
    int telemetry_every = 0;        // numerics telemetry every N steps (0: off)
    int inject_nonfinite_step = 0;  // for tests and demos: poison that step's gradients
    std::string inject_outlier;     // "LAYER:CHANNEL:FACTOR,...": scale ln2 gains ("": off)
    struct Fp8 {
      ScaleSource recipe = ScaleSource::Delayed;
      int history_len = 16;
      int margin = 0;
      std::vector<int> keep_bf16;  // layer indices; negative counts from the last
      bool fast_accum = true;      // fast accumulation in the forward FP8 GEMM (GPUs)
    } fp8;
    // Options of the block-scaled presets (fp8-rowwise, fp8-block, mxfp8, mxfp4, nvfp4;
    // src/numerics/recipe.h), each switchable on its own so a study can remove them one at a time.
    struct Recipe {
      bool pow2_scales = false;  // fp8-rowwise: scales rounded down to powers of two
      ScaleRuleChoice scale_rule = ScaleRuleChoice::Auto;  // mx*: auto: mxfp8 ceil, mxfp4 ocp
      GradFormat grad_format = GradFormat::Auto;           // mxfp8's output gradients (auto: e4m3)
      bool stochastic_grads = true;  // mxfp4, nvfp4: output gradients rounded stochastically
      bool hadamard = true;          // mxfp4, nvfp4: random Hadamard on the wgrad inputs
      int hadamard_size = 16;        // its points (a power of two)
      bool weight_2d = true;         // nvfp4: 16x16 weight tiles (else 1x16 blocks)
      int bf16_last = -1;            // last N block layers in bf16 (-1: nvfp4 1, others 0)
      bool smooth = false;           // SmoothQuant smoothing of the forward GEMM
      double smooth_alpha = 0.5;     // s_c = amax_x(c)^alpha / amax_w(c)^(1 - alpha)
      int smooth_every = 10;         // recompute the factors every N steps (and at step 1)
    } recipe;
    // precision.mode=auto (src/precision/auto_precision.h): formats chosen per layer while
    // training.
    struct Auto {
      int every = 10;  // measure the operands' sensitivity every N steps (and at step 1)
      // narrowest first
      std::vector<Mode> candidates = {Mode::NVFP4, Mode::MXFP8, Mode::FP8, Mode::BF16};
      double threshold_db = 20;        // the least SQNR a slot's format may have
      double hysteresis_db = 3;        // what a narrower format must beat the threshold by
      double budget = 0;               // share of block-linear FLOPs to run in <= 8 bits (0: none)
      bool priors = true;              // first and last layers start in the widest candidate
      int window = 8;                  // measurements in the amax drift window
      double outlier_k = 8;            // input channels above k x the median channel are outliers
      OutlierHandling outliers = OutlierHandling::Split;  // split: outlier channels unquantized
    } auto_;
    // How the optimizer state is stored (src/numerics/state_format.h; docs/precision.md, "State
    // precision: Adam moments").
    struct State {
      // A named combination of the keys below (src/config/presets.h), applied before
      // them when set; "none": the keys as given.
      std::string preset = no_state_preset();
      StateFormat adam_m = StateFormat::FP32;
      StateFormat adam_v = StateFormat::FP32;
      MasterFormat master = MasterFormat::FP32;  // src/numerics/master_format.h
      WireFormat grad_comm = WireFormat::FP32;   // src/numerics/wire_format.h
      GradAccum grads = GradAccum::Compute;
      WeightComm weight_comm = WeightComm::Compute;  // ZeRO-1's all-gather
      bool allow_narrowing = false;  // resume may round a checkpoint's moments into narrower ones
      // FP8 moments (src/numerics/moment_block.h): elements per scale block, the scale's
      // format (fp32: the block's amax; e8m0: a power of two), COAT's range expansion.
      int moment_block = 128;
      MomentScale moment_scale = MomentScale::FP32;
      MomentExpand moment_expand = MomentExpand::None;
    } state;
  } precision;
  struct Eval {
    int every = 500;  // 0: only at start and end
    int batches = 16;
  } eval;
  struct Sample {
    int every = 0;  // 0: only at the end
    int tokens = 63;
    double temperature = 1.0;
    int top_k = 0;  // 0: full distribution
    std::string prompt;
  } sample;
  struct Cpu {
    CpuGemm gemm = CpuGemm::Auto;  // auto (OpenBLAS when built with it) | blas | loops
    // auto: the narrow modes' matmuls as bf16 products on the CPU's instructions when it has
    // them (AMX-BF16, else AVX512-BF16; avx512_bf16 and amx_bf16 name one), else and with
    // exact: widened to fp32 through cpu.gemm
    NarrowGemmRequest narrow_gemm = NarrowGemmRequest::Auto;
  } cpu;
  struct Cuda {
    AttentionRequest attention = AttentionRequest::Auto;
    std::string cudnn_lib;         // libcudnn's file for cudnn / auto ("": searched)
    CudaGemm gemm = CudaGemm::Lt;  // lt (cuBLASLt) | fallback (cuBLAS + our epilogue)
    bool gelu_epilogue = false;
  } cuda;
  struct Checkpoint {
    int every = 1000;  // 0: only at the end
    int keep = 2;
    bool resume = false;
  } checkpoint;
};

// Reads a JSON config file into cfg (keys absent from the file keep their value).
void config_load_file(Config& cfg, const std::string& path);
// Applies one JSON object (nested sections) to cfg; `origin` names the source in errors.
void config_apply_json(Config& cfg, const nlohmann::json& j, const std::string& origin);
// Sets one key from its command-line text.
void config_set(Config& cfg, const std::string& key, const std::string& value);
// Range checks of single keys and consistency between keys; `world` is the rank count.
void config_validate(const Config& cfg, int world = 1);
// config_validate, and what only one run's mode decides: bf16 master weights
// (precision.state.master) need a mode with bf16 weights. `memory` and `compare`, which plan
// several modes under one config, apply the master to the modes that have them.
void config_validate_run(const Config& cfg, int world = 1);
// The first of bf16, fp16 and fp32 whose precision.mode keeps cfg's state formats (what a
// refused state preset would need), or none.
std::optional<Mode> state_keeping_mode(const Config& cfg);
// precision.inject_outlier parsed: comma-separated entries LAYER:CHANNEL:FACTOR, where LAYER
// may be '*' (every layer) and CHANNEL may be C%P (every channel c with c mod P = C, one per
// block of P channels). "" is no entry. False, with *why saying what is wrong, when the text
// does not parse (whether the layers and channels exist is the trainer's check: it knows the
// model).
struct InjectedOutlier {
  int layer = 0;  // -1: every layer
  int channel = 0;
  int period = 0;  // 0: channel alone; else every channel c with c % period == channel
  double factor = 1;
};
bool parse_inject_outlier(const std::string& text, std::vector<InjectedOutlier>* out,
                          std::string* why);
nlohmann::json config_to_json(const Config& cfg);
// All key names, in table order, with help text and default values (for --help).
struct ConfigKeyInfo {
  std::string name, type, help, default_value;
  // A string field checked against a list of names (precision.state.preset: a registry's,
  // open), where every other key with choices is an enum (tests/config hold them to it).
  bool string_choice = false;
};
std::vector<ConfigKeyInfo> config_keys();

// Parses `train_gpt <sub> [--config F] [--section.key=value ...]` arguments (argv from
// the subcommand on) into *cfg; with cfg == nullptr no config keys are accepted. Options
// of the subcommand itself are declared in `extra` and returned in `extra_values`.
// Returns false when --help was printed.
// Numeric options are checked like config keys (a number, inside [lo, hi], exit code 2
// naming the option); make them with int_option / number_option.
struct ExtraOption {
  enum class Kind { Text, Int, Number };
  std::string name, help, default_value;
  bool is_flag = false;
  Kind kind = Kind::Text;
  double lo = 0, hi = 0;
};
ExtraOption int_option(const std::string& name, const std::string& help,
                       const std::string& default_value, double lo, double hi);
ExtraOption number_option(const std::string& name, const std::string& help,
                          const std::string& default_value, double lo, double hi);
bool config_parse_args(Config* cfg, int argc, char** argv, const std::string& program,
                       const std::vector<ExtraOption>& extra,
                       std::vector<std::pair<std::string, std::string>>* extra_values,
                       bool* config_file_given = nullptr);

}  // namespace tg
