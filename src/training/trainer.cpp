// trainer.cpp: one training run: set-up, start, step, evaluation, checkpoints, summary.
#include "trainer.h"

#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "backend_factory.h"
#include "checkpoint_cleanup.h"
#include "gpu_peak.h"
#include "hf.h"
#include "memory_check.h"
#include "moment_resume.h"
#include "run_dir.h"
#include "schedule.h"
#include "signals.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cuda_library.h"
#include "src/base/common.h"
#include "src/base/test_hooks.h"
#include "src/comm/comm.h"
#include "src/data/prepare.h"
#include "src/model/sample.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"
#include "state_telemetry.h"

namespace tg {
using json = nlohmann::json;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt_rate(double x) {
  if (x >= 1e6) return strf("%.2fM", x / 1e6);
  if (x >= 1e3) return strf("%.1fk", x / 1e3);
  return strf("%.0f", x);
}

size_t peak_rss_bytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return size_t(ru.ru_maxrss) * 1024;
}

json nan_to_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// The summary's "machine": the CPU, and whether other processes shared its cores during the
// run (src/base/cpu_load.h), which decides whether the run's speed figures are its own.
json machine_json(int cpus, double share) {
  return {{"cpu", cpu::cpu_model_name()},
          {"cpus", cpus},
          {"others_cpu_share", nan_to_null(share)},
          {"shared", std::isfinite(share) ? json(share > kSharedMachineShare) : json(nullptr)}};
}

// The summary's "state": the optimizer state's formats (precision.state.*) and what they keep
// per parameter beyond the compute weights (master weights, Adam's m and v).
json state_json(const GPT& m, const Config& cfg) {
  const auto& st = cfg.precision.state;
  const size_t master = m.dtype() == DType::BF16 || m.dtype() == DType::F16
                            ? master_format_info(m.master_format()).bytes
                            : 0;
  const MomentBlocking b = moment_blocking(cfg);
  return {{"master", master_format_name(m.master_format())},
          {"grad_comm", wire_format_name(m.grad_wire())},
          {"grads", grad_accum_name(m.fp32_grad_accumulation())},
          {"weight_comm", weight_comm_name(m.fp8_weights())},
          {"adam_m", moment_blocking_name(st.adam_m, b)},
          {"adam_v", moment_blocking_name(st.adam_v, b)},
          {"bytes_per_parameter",
           double(master) + state_format_bytes(st.adam_m, b) + state_format_bytes(st.adam_v, b)}};
}

AdamWArgs adamw_args(const Config& cfg, double lr, float grad_scale, int64_t opt_step) {
  AdamWArgs a{float(lr),
              float(cfg.optim.beta1),
              float(cfg.optim.beta2),
              float(cfg.optim.eps),
              float(cfg.optim.weight_decay),
              grad_scale,
              int(opt_step),
              weight_rounding(cfg, int(opt_step))};
  // The moments' formats are the model's own (GPT::adamw_step); their rounding's seeds:
  const auto seeds = moment_seeds(cfg, int(opt_step));
  a.m_seed = seeds.first;
  a.v_seed = seeds.second;
  return a;
}

// precision.inject_outlier: channels of layers' fc inputs made outliers through their ln2
// gains, the way outlier features arise in trained transformers (a fresh run's init only).
void inject_outlier(GPT& model, const GPTConfig& mc, const std::string& spec) {
  std::vector<InjectedOutlier> entries;
  std::string why;
  if (!parse_inject_outlier(spec, &entries, &why) || entries.empty())
    return;  // config_validate checked the text
  std::vector<float> p = model.params_f32();
  size_t off = 0;
  const auto sizes = param_sizes(mc);
  for (int i = 0; i < LN2W; i++) off += sizes[i];
  for (const InjectedOutlier& o : entries) {
    if (o.layer >= mc.n_layer || o.channel >= mc.n_embd)
      throw UsageError(strf(
          "config key 'precision.inject_outlier': no channel %d in layer %s "
          "(the model has %d layers of %d channels)",
          o.channel, o.layer < 0 ? "*" : std::to_string(o.layer).c_str(), mc.n_layer, mc.n_embd));
    const int l0 = o.layer < 0 ? 0 : o.layer, l1 = o.layer < 0 ? mc.n_layer : o.layer + 1;
    const int step = o.period > 0 ? o.period : mc.n_embd;
    for (int l = l0; l < l1; l++)
      for (int ch = o.channel; ch < mc.n_embd; ch += step)
        p[off + size_t(l) * mc.n_embd + size_t(ch)] *= float(o.factor);
  }
  model.set_params(p);
}

// precision.inject_nonfinite_step: the first gradient element made +inf.
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

// model.init_from starts from weights trained on one tokenizer's ids: data of another
// tokenizer would give those ids other meanings without a word. The model's recorded
// tokenizer must be the data's; a model that records none must have the data's vocabulary.
void check_init_tokenizer(const Config& c, const ModelFile& init, const TokenizerRecord& data,
                          const nlohmann::json& meta) {
  const std::string& from = c.model.init_from;
  if (init.tokenizer.known() && data.known()) {
    if (!same_tokenizer(init.tokenizer, data))
      throw UsageError(
          strf("config key 'model.init_from': %s was trained with %s, but the data "
               "(data.train) is %s; start from a model of the data's tokenizer",
               from.c_str(), describe_tokenizer(init.tokenizer).c_str(),
               describe_tokenizer(data).c_str()));
    return;
  }
  const nlohmann::json v = meta.value("vocab_size", nlohmann::json());
  if (v.is_number_integer() && v.get<int>() != init.cfg.vocab_size)
    throw UsageError(
        strf("config key 'model.init_from': %s has a vocabulary of %d, but the "
             "data's is %d (data.train's meta.json); start from a model of the "
             "data's tokenizer",
             from.c_str(), init.cfg.vocab_size, v.get<int>()));
}

}  // namespace

bool apply_update(GPT& model, LossScaler& scaler, const Config& cfg, double lr, double scale,
                  int64_t& opt_step, double* norm) {
  const GradCheck gc = model.check_grads(scale);
  *norm = gc.finite ? gc.norm : NAN;
  const bool skipped = scaler.update(!gc.finite);
  if (skipped) return true;
  const double clip = cfg.optim.grad_clip;
  const double clip_factor = (clip > 0 && *norm > clip) ? clip / *norm : 1.0;
  opt_step++;
  model.adamw_step(adamw_args(cfg, lr, float(clip_factor / scale), opt_step));
  return false;
}

Trainer::Trainer(const Config& cfg_in) : cfg_(cfg_in), t_start_(now_seconds()) {
  setup_comm_and_backend();
  check_memory();  // before anything is allocated
  lock_out_dir();  // before anything is written to the run directory
  setup_data();
  setup_model();
  sample_rng_ = Rng::derive(uint64_t(cfg_.train.seed), 0x53414D50ull /*"SAMP"*/);
  inputs_.resize(size_t(B_) * T_);
  targets_.resize(size_t(B_) * T_);
  // MFU against the GPU's peak for this mode (src/training/gpu_peak.h); none on the CPU.
  peak_flops_ =
      be_->name() == "cuda" ? gpu_peak_flops(be_->device_model(), cfg_.precision.mode) : 0.0;
  // The skip/scale decision on the device where the backend has it (one process,
  // unsharded; otherwise the found-inf flag or the norm needs the other ranks).
  device_decision_ = be_->device_loss_scale() && world_ == 1 && !model_->sharded();
  if (be_->name() == "cpu" && cfg_.train.adapt_threads && cpu::num_parts() > 1)
    tuner_ = std::make_unique<ThreadTuner>(cpu::num_parts());
}

void Trainer::setup_comm_and_backend() {
  const Config& c = cfg_;
  comm_init(DistOptions{c.dist.rank, c.dist.world_size, c.dist.rendezvous, c.dist.timeout});
  be_ = make_backend(cfg_, comm_local_rank());
  // GPUs reduce over NCCL, its id handed over by MPI or the rendezvous; every collective of
  // the run then goes through it (host values are staged through the GPU). CPU processes
  // reduce over MPI (comm() refuses several of them without it).
  if (comm_world() > 1 && be_->name() == "cuda") nccl_ = make_gpu_comm(comm_bootstrap(), *be_);
  cm_ = nccl_ ? nccl_.get() : &comm();

  // Model shape; an llm.c file defines it, and the effective config records it.
  if (!c.model.init_from.empty()) {
    init_ = read_model(c.model.init_from);
    cfg_.model.n_layer = init_.cfg.n_layer;
    cfg_.model.n_head = init_.cfg.n_head;
    cfg_.model.n_embd = init_.cfg.n_embd;
    cfg_.model.max_seq_len = init_.cfg.max_seq_len;
    cfg_.model.vocab_size = init_.cfg.vocab_size;
  }
  world_ = cm_->world();
  rank_ = cm_->rank();
  // Only rank 0 talks and writes; the others train in silence.
  if (rank_ != 0 && !freopen("/dev/null", "w", stdout))
    throw Error("cannot silence stdout on a non-zero rank");
  config_validate_run(cfg_, world_);
  mc_ = c.model.init_from.empty() ? model_config(cfg_) : init_.cfg;
}

void Trainer::check_memory() const {
  if (!cfg_.train.memory_check) return;
  const bool lse = be_->attention_saves_lse(mc_.n_embd / mc_.n_head);
  const int zero = cfg_.train.zero_stage == 1 ? world_ : 1;
  const MemoryPlan p = plan_memory_of(cfg_, cfg_.precision.mode, mc_, cfg_.data.batch_size,
                                      cfg_.data.seq_len, zero, world_, lse);
  size_t free = 0, total = 0;
  const std::string why =
      be_->device_memory(&free, &total)
          ? gpu_memory_refusal(cfg_, p, planned_gpu_bytes(cfg_, mc_, world_), free, total,
                               be_->device_model())
          : memory_refusal(cfg_, p, comm_local_world(world_), host_memory());
  if (!why.empty()) throw UsageError(why);
}

void Trainer::lock_out_dir() {
  std::string why;
  if (rank_ == 0) {
    try {
      out_dir_lock_ = lock_run_dir(cfg_.train.out_dir);
    } catch (const UsageError& e) {
      why = e.what();
      if (cfg_.train.overwrite) why += "; train.overwrite never moves a run that is still going";
    }
  }
  // The others wait for rank 0's word, so that every rank goes on or stops together.
  int32_t refused = why.empty() ? 0 : 1;
  if (world_ > 1) cm_->broadcast(&refused, sizeof(refused), 0);
  if (refused)
    throw UsageError(rank_ == 0
                         ? why
                         : strf("train.out_dir %s is in use by another run (rank 0 names it)",
                                cfg_.train.out_dir.c_str()));
}

void Trainer::setup_data() {
  const Config& c = cfg_;
  meta_ = read_dataset_meta(c.data.train);
  if (meta_.contains("vocab_size") && meta_["vocab_size"].is_number_integer() &&
      meta_["vocab_size"].get<int>() > mc_.vocab_size)
    throw UsageError(
        strf("config key 'model.vocab_size': %d is smaller than the dataset's "
             "vocabulary (%d, from meta.json)",
             mc_.vocab_size, meta_["vocab_size"].get<int>()));
  B_ = c.data.batch_size;
  T_ = c.data.seq_len;
  const int64_t micro_tokens = int64_t(B_) * T_ * world_;
  grad_accum_ = c.data.total_batch_tokens > 0 ? int(c.data.total_batch_tokens / micro_tokens) : 1;
  step_tokens_ = micro_tokens * grad_accum_;
  loss_floor_ = dataset_loss_floor(meta_, T_);
  ln_vocab_ = std::log(double(mc_.vocab_size));

  train_loader_ =
      std::make_unique<DataLoader>(c.data.train, "training", B_, T_, rank_, world_, c.data.shuffle,
                                   uint64_t(c.train.seed), mc_.vocab_size);
  if (!c.data.val.empty())
    val_loader_ = std::make_unique<DataLoader>(c.data.val, "validation", B_, T_, rank_, world_,
                                               false, uint64_t(c.train.seed), mc_.vocab_size);
  tokenizer_ = dataset_tokenizer(meta_, dirname_of(train_loader_->files()[0]));
  tokenizer_record_ = dataset_tokenizer_record(meta_, dirname_of(train_loader_->files()[0]));
  if (!c.model.init_from.empty()) check_init_tokenizer(c, init_, tokenizer_record_, meta_);
  // Bits per byte from the val shards' own meta.json (the train shards' when they share a
  // folder).
  if (val_loader_) {
    const std::string& first_val = val_loader_->files()[0];
    val_tpb_ =
        dataset_tokens_per_byte(dirname_of(first_val) == dirname_of(train_loader_->files()[0])
                                    ? meta_
                                    : read_dataset_meta(first_val));
  }
}

void Trainer::setup_model() {
  const Config& c = cfg_;
  DataParallel dp{world_ > 1 ? cm_ : nullptr, c.train.zero_stage == 1};
  // Tests shrink the staging chunk of the gradient reduction to exercise many chunks.
  if (test_hooks::reduce_chunk() > 0) dp.chunk = test_hooks::reduce_chunk();
  dp.grad_wire = c.precision.state.grad_comm;
  dp.fp8_weights = c.precision.state.weight_comm == weight_comm_name(true);
  const PrecisionSpec spec = precision_spec(cfg_);
  model_ = std::make_unique<GPT>(mc_, *be_, spec.compute, dp, spec.moments, spec.master);
  model_->set_fp32_grad_accumulation(c.precision.state.grads == grad_accum_name(true));
  const auto& lsc = c.precision.loss_scale;
  scaler_ = LossScaler::make(spec.loss_scale, lsc.init, lsc.growth_interval, lsc.growth,
                             lsc.backoff, lsc.min, lsc.max, lsc.hysteresis);
  precision_ = std::make_unique<PrecisionRuntime>(cfg_, *be_, *model_);
  if (!c.model.init_from.empty()) {
    model_->set_params(init_.params);
    std::vector<float>().swap(init_.params);  // only its shape is needed from here on
  } else
    model_->init_random(uint64_t(c.train.seed));
  inject_outlier(*model_, mc_, c.precision.inject_outlier);
}

Trainer::~Trainer() = default;

// ---- start: the run directory, resume, logs ----

void Trainer::start() {
  make_dirs(cfg_.train.out_dir);  // rank 0 made it with the lock; the others may need it
  resume_or_claim();
  cfg_json_ = config_to_json(cfg_);
  if (rank_ == 0) {
    const std::string& out = cfg_.train.out_dir;
    write_text_atomic(join_path(out, "config.json"), cfg_json_.dump(2) + "\n");
    // A resumed run continues the logs from its checkpoint's step: each step appears once.
    if (!resumed_from_.empty() || cfg_.checkpoint.resume) truncate_run_logs(out, step_);
    const bool append = !resumed_from_.empty();
    metrics_.open(join_path(out, "metrics.jsonl"), append);
    samples_.open(join_path(out, "samples.txt"), append);
  }
  print_start();
  // Without a prompt, samples start from the first token of the training data.
  if (cfg_.sample.tokens > 0 && cfg_.sample.prompt.empty())
    first_token_ = int32_t(read_shard(train_loader_->files()[0], mc_.vocab_size).at(0));
  if (val_loader_ && step_ == 0) {
    initial_val_loss_ = evaluate();
    log_val(0, initial_val_loss_);
  }
}

void Trainer::resume_or_claim() {
  const std::string& out = cfg_.train.out_dir;
  if (!cfg_.checkpoint.resume) {
    // Rank 0 decides; the others wait so that nobody writes into a directory being cleared.
    std::string aside;
    if (rank_ == 0) aside = claim_fresh_run_dir(out, cfg_.train.overwrite);
    cm_->barrier();
    if (!aside.empty())
      printf("train.overwrite: the earlier run's files are now in %s\n", aside.c_str());
    run_id_ = new_run_id();
    cm_->broadcast(run_id_.data(), run_id_.size(), 0);  // 16 hex digits on every rank
    return;
  }
  // What killed writes and prunes left is removed first (rank 0, under the run's lock), so
  // that every rank lists the same checkpoints.
  if (rank_ == 0) {
    const std::string line = cleanup_line(out, cleanup_run_dir(out));
    if (!line.empty()) printf("%s\n", line.c_str());
  }
  cm_->barrier();
  const std::vector<std::string> ckpts = list_checkpoints(out);
  if (ckpts.empty()) {
    printf("checkpoint.resume: no checkpoint in %s, starting from scratch\n", out.c_str());
    run_id_ = new_run_id();
    cm_->broadcast(run_id_.data(), run_id_.size(), 0);
    return;
  }
  // The newest checkpoint that every rank verifies; the rejected ones stay as they are.
  std::string reasons;
  for (size_t i = ckpts.size(); i-- > 0;) {
    std::string why;
    VerifiedCheckpoint v;
    try {
      v = verify_checkpoint(ckpts[i]);  // reads and checks; no collective, no change
    } catch (const std::exception& e) {
      why = e.what();
    }
    // Only rank 0 writes to stdout: another rank says why on stderr.
    if (!why.empty() && rank_ != 0)
      fprintf(stderr, "checkpoint %s rejected on rank %d: %s\n", ckpts[i].c_str(), rank_,
              why.c_str());
    if (all_ranks_accept(why.empty())) {
      apply_checkpoint(std::move(v));
      printf("resumed from %s at step %lld\n", resumed_from_.c_str(), (long long)step_);
      return;
    }
    if (why.empty()) why = "another rank could not verify its part of it";
    printf("checkpoint %s rejected: %s%s\n", ckpts[i].c_str(), why.c_str(),
           i > 0 ? "; trying the next older one" : "");
    fflush(stdout);
    reasons += "\n  " + ckpts[i] + ": " + why;
  }
  throw Error(strf("checkpoint.resume: no checkpoint in %s verifies (nothing was deleted):%s",
                   out.c_str(), reasons.c_str()));
}

bool Trainer::all_ranks_accept(bool mine) {
  double rejections = mine ? 0.0 : 1.0;
  cm_->all_reduce_sum(&rejections, 1);
  return rejections == 0;
}

ResumeRequirements Trainer::resume_requirements() const {
  ResumeRequirements r;
  r.model = mc_;
  r.num_params = model_->num_params();
  r.batch_size = B_;
  r.seq_len = T_;
  r.world_size = world_;
  r.steps = cfg_.train.steps;
  r.step_tokens = step_tokens_;
  r.train_shards = train_loader_->files().size();
  r.train_tokens = train_loader_->total_tokens();
  return r;
}

// Everything this rank will need from `dir`, checked: files and checksums, architecture,
// fields against this run, the loader position, the precision state. Changes nothing.
Trainer::VerifiedCheckpoint Trainer::verify_checkpoint(const std::string& dir) const {
  VerifiedCheckpoint v;
  v.dir = dir;
  // Under ZeRO-1 each rank reads the Adam moments of its own shard, whichever way the
  // checkpoint was sharded.
  v.data = load_checkpoint(dir, mc_, model_->shard_begin(), model_->shard_count());
  const std::string state_path = join_path(dir, "state.json");
  v.state = run_state_from_json(v.data.state, state_path, resume_requirements());
  const RunState& s = v.state;
  const int64_t dir_step = checkpoint_dir_step(dir);
  if (dir_step != s.step)
    throw Error(
        strf("checkpoint state %s: field 'step' is %lld, but the directory is named "
             "for step %lld",
             state_path.c_str(), (long long)s.step, (long long)dir_step));
  try {
    train_loader_->check_position(s.data);
  } catch (const Error& e) {
    throw Error(strf("checkpoint state %s: field 'data': %s", state_path.c_str(), e.what()));
  }
  precision_->verify(s, state_path);
  if (test_hooks::rejects_checkpoint(rank_, s.step))
    throw Error(
        strf("checkpoint %s: rejected on rank %d by TG_TEST_REJECT_CKPT", dir.c_str(), rank_));
  return v;
}

// One of a checkpoint's Adam moments into the optimizer (this rank's shard, padded): fp8
// blocks as stored when this run blocks them alike, else the values encoded once.
void Trainer::upload_moment(CheckpointData& cd, bool second) {
  const GPT& model = *model_;
  const MomentFormat& f = second ? model.moment_formats().v : model.moment_formats().m;
  std::vector<float>& x = second ? cd.v : cd.m;
  const Tensor t = second ? model.adam_v() : model.adam_m();
  const Tensor meta_t = second ? model.adam_v_meta() : model.adam_m_meta();
  x.resize(model.shard_size(), 0.0f);
  if (!moment_is_blocked(f)) return be_->upload(t, encode_moments(x, f).data());
  std::vector<char> codes;
  std::vector<float> meta;
  if (moments_kept(cd, cfg_, second)) {
    const std::vector<uint8_t>& kept = second ? cd.v_codes : cd.m_codes;
    codes.assign(kept.begin(), kept.end());
    codes.resize(t.numel, 0);
    meta = second ? cd.v_meta : cd.m_meta;
  } else {
    meta = encode_moment_blocks(x, f, &codes);
  }
  meta.resize(meta_t.numel, 0.0f);
  be_->upload(t, codes.data());
  be_->upload(meta_t, meta.data());
}

// Every rank accepted `v`'s checkpoint: the same state applied everywhere (the run id
// broadcast and the ZeRO-1 weight gather are collectives every rank reaches here).
void Trainer::apply_checkpoint(VerifiedCheckpoint&& v) {
  const RunState& s = v.state;
  const std::string state_path = join_path(v.dir, "state.json");
  // Every rank decides alike (the formats come from state.json), before anything changes.
  const std::string moments_note = moment_conversion_note(v.data, cfg_, v.dir);
  const std::string master_note = master_conversion_note(v.data, cfg_, v.dir);
  for (const std::string& note : {moments_note, master_note})
    if (!note.empty()) printf("%s\n", note.c_str());
  train_loader_->set_position(s.data);
  merge_compensation(v.data, model_->master_format(), model_->shard_begin());
  model_->set_params(v.data.params);
  if (v.data.master == MasterFormat::BF16Kahan && model_->compensation()) {
    v.data.comp.resize(model_->shard_size(), 0);
    model_->set_compensation(v.data.comp);
  }
  upload_moment(v.data, false);
  upload_moment(v.data, true);
  run_id_ = s.run_id.empty() ? new_run_id() : s.run_id;  // older checkpoints have none
  cm_->broadcast(run_id_.data(), run_id_.size(), 0);
  step_ = start_step_ = s.step;
  opt_step_ = s.opt_step;
  sample_rng_ = s.sample_rng;
  counters_ = s.counters;
  initial_val_loss_ = s.initial_val_loss;
  if (s.mode == cfg_.precision.mode && s.loss_scale.kind == scaler_.kind) {
    scaler_.scale = s.loss_scale.scale;
    scaler_.good_steps = s.loss_scale.good_steps;
    scaler_.hysteresis_left = s.loss_scale.hysteresis_left;
  } else {
    printf("note: the checkpoint was trained in %s; continuing in %s from its master weights\n",
           mode_name(s.mode), mode_name(cfg_.precision.mode));
  }
  precision_->load(s, state_path);
  // The compute copy of the weights is what the last update rounded, stochastic or not.
  model_->refresh_params(weight_rounding(cfg_, int(opt_step_)));
  resumed_from_ = v.dir;
}

RunState Trainer::run_state() const {
  RunState s;
  s.run_id = run_id_;
  s.step = step_;
  s.opt_step = opt_step_;
  s.data = train_loader_->position();
  s.batch_size = B_;
  s.seq_len = T_;
  s.world_size = world_;
  s.sample_rng = sample_rng_;
  s.counters = counters_;
  s.mode = cfg_.precision.mode;
  s.loss_scale = scaler_;
  precision_->save(s);
  s.initial_val_loss = initial_val_loss_;
  s.config = cfg_json_;
  s.tokenizer = tokenizer_record_;
  s.model = mc_;
  s.num_params = model_->num_params();
  return s;
}

void Trainer::print_start() const {
  const GPT& m = *model_;
  printf("%s\n", config_line(cfg_, mc_, world_).c_str());
  if (cfg_.train.print_config) printf("%s\n", cfg_json_.dump(2).c_str());
  printf("model: %d layers, %d heads, %d channels, vocab %d (padded %d), %zu parameters\n",
         mc_.n_layer, mc_.n_head, mc_.n_embd, mc_.vocab_size, mc_.padded_vocab_size,
         m.num_params());
  printf(
      "data: %zu training shard(s), %lld tokens; batch %d x %d, %d micro-step(s) per step = "
      "%lld tokens/step\n",
      train_loader_->files().size(), (long long)train_loader_->total_tokens(), B_, T_, grad_accum_,
      (long long)step_tokens_);
  if (world_ > 1)
    printf("data parallel: %s, %d rows per rank%s; %s\n", cm_->name().c_str(), B_,
           m.sharded() ? strf(", ZeRO-1: master weights and Adam moments sharded, %zu "
                              "parameters per rank",
                              m.shard_size())
                             .c_str()
                       : "",
           wire_format_info(m.grad_wire()).summary);
  printf(
      "device: %s%s, %d thread(s); precision %s (%s weights and activations, %s), loss "
      "scaling %s%s\n",
      be_->name().c_str(),
      be_->device_model().empty() ? "" : (" (" + be_->device_model() + ")").c_str(),
      omp_get_max_threads(), mode_name(cfg_.precision.mode), dtype_name(m.dtype()),
      master_format_info(m.master_format()).summary, scaler_.kind.c_str(),
      cfg_.precision.stochastic_rounding ? ", stochastic rounding" : "");
  const auto& st = cfg_.precision.state;
  if (st.adam_m != StateFormat::FP32 || st.adam_v != StateFormat::FP32)
    printf("optimizer state: Adam m in %s, v in %s: %.4g bytes per parameter instead of 8\n",
           moment_blocking_name(st.adam_m, moment_blocking(cfg_)).c_str(),
           moment_blocking_name(st.adam_v, moment_blocking(cfg_)).c_str(),
           state_format_bytes(st.adam_m, moment_blocking(cfg_)) +
               state_format_bytes(st.adam_v, moment_blocking(cfg_)));
  precision_->print_start();
  if (std::isfinite(loss_floor_))
    printf("loss floor of this dataset: %.4f (untrained: ln(V) = %.4f)\n", loss_floor_, ln_vocab_);
  if (device_decision_) printf("loss scale: decided on the device\n");
  if (m.attention_lse())
    printf("attention: flash (per-row logsumexp kept, no T x T probabilities)\n");
  fflush(stdout);
}

// ---- the step ----

StepResult Trainer::step() {
  if (tuner_) cpu::set_parallelism(cpu::num_parts(), tuner_->next_threads());
  const double t0 = now_seconds();
  model_->take_comm_bytes();  // the set-up's weight all-gather is no step's
  StepResult r;
  r.step = step_ + 1;
  // The schedule follows applied updates, so a skipped step does not advance it.
  r.lr = lr_at(int(opt_step_), cfg_.train.steps, cfg_.optim.lr, cfg_.optim.warmup_steps,
               cfg_.optim.schedule, cfg_.optim.final_lr_frac);
  r.scale = scaler_.scale;
  const double loss = sum_gradients(forward_backward(r), r);
  if (cfg_.precision.inject_nonfinite_step == r.step) poison_gradient(*be_, model_->grads());
  const bool telemetry =
      cfg_.precision.telemetry_every > 0 && r.step % cfg_.precision.telemetry_every == 0;
  if (telemetry) record_numerics(r.step, r.scale);
  if (!std::isfinite(loss))
    throw Error(strf("training diverged at step %lld: the loss is %g (try a lower optim.lr)",
                     (long long)r.step, loss));
  // What the state's formats do to this update (src/training/state_telemetry.h).
  StateProbe probe;
  if (telemetry) probe = state_probe_before(*model_);
  update(r);
  if (telemetry && !r.skipped)
    metrics_.write(json({{"kind", "state"},
                         {"step", r.step},
                         {"master", master_format_name(model_->master_format())},
                         {"adam_m", state_format_name(cfg_.precision.state.adam_m)},
                         {"adam_v", state_format_name(cfg_.precision.state.adam_v)},
                         {"layers", state_probe_after(*model_, probe, cm_)}})
                       .dump());
  end_step(r, loss, t0);
  return r;
}

double Trainer::forward_backward(const StepResult& r) {
  GPT& model = *model_;
  model.zero_grad();
  precision_->begin_step(r.step);
  double loss = 0;
  for (int micro = 0; micro < grad_accum_; micro++) {
    train_loader_->next_batch(inputs_.data(), targets_.data());
    precision_->before_forward(micro);
    loss += model.forward(inputs_.data(), targets_.data(), B_, T_,
                          float(r.scale / (double(grad_accum_) * world_))) /
            grad_accum_;
    model.backward();
    precision_->after_backward();
  }
  model.finish_grads();  // fp32 accumulation: the sum rounded once to the compute type
  return loss;
}

double Trainer::sum_gradients(double loss, StepResult& r) {
  if (test_hooks::fail_rank() == rank_ && r.step == 2)
    throw Error(strf("injected failure on rank %d (TG_TEST_FAIL_RANK)", rank_));
  precision_->before_gradient_sum(*cm_);
  // A stop signal is read here on every rank and travels with the loss's all-reduce (no
  // collective of its own): its number and whether one came, summed.
  const int sig = stop_signal_received();
  r.stop_signal = sig;
  if (world_ > 1) {
    model_->sync_grads();
    double sums[3] = {loss, double(sig), sig ? 1.0 : 0.0};
    cm_->all_reduce_sum(sums, 3);
    loss = sums[0] / world_;
    // A rank not signalled takes the others' signal (their mean: one signal, sent to all).
    if (!sig && sums[2] > 0) r.stop_signal = int(std::lround(sums[1] / sums[2]));
  }
  precision_->after_gradient_sum(*cm_, metrics_);
  return loss;
}

void Trainer::update(StepResult& r) {
  if (device_decision_) {
    // The same decision on the device (src/numerics/loss_scaler.h's loss_scale_step); the host
    // waits once, after AdamW, to learn it.
    model_->device_decided_step(scaler_.state(), scaler_.params(), cfg_.optim.grad_clip,
                                adamw_args(cfg_, r.lr, 0.f, opt_step_ + 1));
    const Backend::DeviceStepReport rep = be_->device_step_report();
    scaler_.set_state(rep.state);
    r.skipped = rep.step.skip;
    r.norm = rep.step.norm;
    if (!r.skipped) opt_step_++;
  } else {
    r.skipped = apply_update(*model_, scaler_, cfg_, r.lr, r.scale, opt_step_, &r.norm);
  }
  if (r.skipped) {
    counters_.skipped_steps++;
    printf("step %lld skipped: non-finite gradient at loss scale %g; next scale %g\n",
           (long long)r.step, r.scale, scaler_.scale);
  }
}

void Trainer::end_step(StepResult& r, double loss, double t0) {
  be_->synchronize();  // the step's time includes the device's queued work
  r.seconds = now_seconds() - t0;
  r.comm_bytes = model_->take_comm_bytes();
  run_comm_bytes_ += r.comm_bytes;
  r.threads = cpu::active_threads();
  if (tuner_) {
    const std::string change = tuner_->report(r.seconds);
    cpu::set_parallelism(cpu::num_parts(), tuner_->active());  // evaluation and sampling too
    if (!change.empty()) printf("step %lld: %s\n", (long long)r.step, change.c_str());
  }
  r.loss = loss;
  step_ = r.step;
  last_loss_ = loss;
  recent_losses_.push_back(loss);
  if (recent_losses_.size() > 10) recent_losses_.erase(recent_losses_.begin());
  counters_.tokens_seen += step_tokens_;
  counters_.train_seconds += r.seconds;
  run_train_seconds_ += r.seconds;
  run_tokens_ += step_tokens_;
  run_steps_++;
  eta_.add(r.seconds);
}

void Trainer::log_step(const StepResult& r) {
  const double tok_s = step_tokens_ / r.seconds;
  metrics_.write(json({{"kind", "train"},
                       {"step", r.step},
                       {"loss", r.loss},
                       {"lr", r.lr},
                       {"grad_norm", nan_to_null(r.norm)},
                       {"loss_scale", r.scale},
                       {"skipped", r.skipped},
                       {"ms", r.seconds * 1e3},
                       {"tokens_per_second", tok_s},
                       {"comm_bytes", r.comm_bytes},
                       {"threads", r.threads}})
                     .dump());
  const int64_t steps = cfg_.train.steps;
  if (r.step % cfg_.train.log_every != 0 && r.step != steps && r.step != start_step_ + 1) return;
  const std::string scale_txt = scaler_.kind == "none" ? "" : strf(" | scale %g", r.scale);
  const std::string skip_txt = counters_.skipped_steps > 0
                                   ? strf(" | skipped %lld", (long long)counters_.skipped_steps)
                                   : "";
  std::string mfu_txt;
  if (peak_flops_ > 0)
    mfu_txt = strf(" | MFU %.1f%%", 100.0 * tok_s * flops_per_token(mc_, T_) / peak_flops_);
  // No estimate before a few steps after the first are timed (EtaClock), nor at the end.
  const std::string eta_txt = eta_.ready() && r.step < steps
                                  ? " | eta " + fmt_duration(eta_.seconds_left(steps - r.step))
                                  : "";
  printf("step %*lld/%lld | loss %.4f | lr %.2e | norm %.3f%s%s | %.1f ms | %s tok/s%s%s\n",
         int(std::to_string(steps).size()), (long long)r.step, (long long)steps, r.loss, r.lr,
         r.norm, scale_txt.c_str(), skip_txt.c_str(), r.seconds * 1e3, fmt_rate(tok_s).c_str(),
         mfu_txt.c_str(), eta_txt.c_str());
  fflush(stdout);
}

// Numerics telemetry: one metrics line per sampled step, and totals per group (act, dact,
// grad) for the summary. A tensor that holds one slice per block is measured per slice
// ("layers": per tensor, one value per block for each statistic) and summed exactly for
// "tensors", so the report can draw layer x tensor maps at no extra cost.
namespace {
json stats_json(const TensorStats& st) {
  const double n = double(std::max<size_t>(st.n, 1));
  return {{"amax", st.amax},
          {"zero_frac", st.zeros / n},
          {"subnormal_frac", st.subnormals / n},
          {"nonfinite_frac", st.nonfinite / n}};
}

void add_stats(TensorStats& tot, const TensorStats& st) {
  tot.amax = std::max(tot.amax, st.amax);
  tot.n += st.n;
  tot.zeros += st.zeros;
  tot.subnormals += st.subnormals;
  tot.nonfinite += st.nonfinite;
}
}  // namespace

void Trainer::record_numerics(int64_t step, double scale) {
  json tensors = json::object(), layers = json::object();
  for (const TelemetryTensor& tt : model_->telemetry_tensors()) {
    const bool sliced = tt.layers > 0 && tt.t.numel > 0 && tt.t.numel % size_t(tt.layers) == 0;
    TensorStats st;
    if (sliced) {
      const size_t per = tt.t.numel / size_t(tt.layers);
      json per_layer = {{"amax", json::array()},
                        {"zero_frac", json::array()},
                        {"subnormal_frac", json::array()},
                        {"nonfinite_frac", json::array()}};
      for (int l = 0; l < tt.layers; l++) {
        const TensorStats sl = be_->stats(tt.t.slice(size_t(l) * per, per));
        const double n = double(std::max<size_t>(sl.n, 1));
        per_layer["amax"].push_back(sl.amax);
        per_layer["zero_frac"].push_back(sl.zeros / n);
        per_layer["subnormal_frac"].push_back(sl.subnormals / n);
        per_layer["nonfinite_frac"].push_back(sl.nonfinite / n);
        add_stats(st, sl);
      }
      layers[tt.name] = per_layer;
    } else {
      st = be_->stats(tt.t);
    }
    tensors[tt.name] = stats_json(st);
    add_stats(numerics_totals_[tt.name.substr(0, tt.name.find('/'))], st);
  }
  metrics_.write(json({{"kind", "numerics"},
                       {"step", step},
                       {"dtype", dtype_name(model_->dtype())},
                       {"loss_scale", scale},
                       {"tensors", tensors},
                       {"layers", layers}})
                     .dump());
}

// ---- evaluation, samples, checkpoints ----

double Trainer::evaluate() {
  DataLoader& val = *val_loader_;
  val.reset();
  double sum = 0;
  for (int i = 0; i < cfg_.eval.batches; i++) {
    val.next_batch(inputs_.data(), targets_.data());
    sum += model_->forward(inputs_.data(), targets_.data(), B_, T_, 0.0f);
  }
  double v = sum / cfg_.eval.batches;
  cm_->all_reduce_sum(&v, 1);
  return v / world_;
}

void Trainer::log_val(int64_t step, double v) {
  std::string floor_txt;
  if (std::isfinite(loss_floor_))
    floor_txt = strf(" | floor %.4f | gap closed %.1f%%", loss_floor_,
                     100.0 * (ln_vocab_ - v) / (ln_vocab_ - loss_floor_));
  const double bpb = bits_per_byte(v, val_tpb_.ratio);
  const std::string bpb_txt = std::isfinite(bpb) ? strf(" | %.3f bpb", bpb) : "";
  printf("val   step %lld | val loss %.4f%s%s\n", (long long)step, v, bpb_txt.c_str(),
         floor_txt.c_str());
  fflush(stdout);
  json record = {{"kind", "val"}, {"step", step}, {"val_loss", v}};
  if (std::isfinite(bpb)) record["val_bpb"] = bpb;
  metrics_.write(record.dump());
}

void Trainer::sample() {
  if (cfg_.sample.tokens <= 0 || rank_ != 0) return;
  std::vector<int32_t> prompt = !cfg_.sample.prompt.empty() ? tokenizer_.encode(cfg_.sample.prompt)
                                                            : std::vector<int32_t>{first_token_};
  std::vector<int32_t> out = generate(*model_, prompt, cfg_.sample.tokens, cfg_.sample.temperature,
                                      cfg_.sample.top_k, sample_rng_);
  std::string text;
  for (int32_t id : out) text += tokenizer_.decode(id);
  printf("sample at step %lld:\n%s\n", (long long)step_, printable(text).c_str());
  samples_.write(strf("--- step %lld\n%s", (long long)step_, text.c_str()));
}

void Trainer::save() {
  GPT& model = *model_;
  const std::string& out = cfg_.train.out_dir;
  if (!model.sharded() && rank_ != 0) {  // every rank holds the same state; rank 0 writes it
    cm_->barrier();
    return;
  }
  // The moments as the optimizer stores them (fp32, or bf16 / fp16 codes), written as they are.
  std::vector<char> m(model.adam_m().bytes()), v(model.adam_v().bytes());
  std::vector<char> comp(model.compensation() ? model.compensation().bytes() : 0);
  std::vector<float> m_meta(model.adam_m_meta().numel), v_meta(model.adam_v_meta().numel);
  MomentBytes mb{cfg_.precision.state.adam_m,
                 cfg_.precision.state.adam_v,
                 m.data(),
                 v.data(),
                 model.master_format(),
                 comp.data()};
  mb.blocking = moment_blocking(cfg_);
  mb.m_meta = m_meta.data();
  mb.v_meta = v_meta.data();
  if (model.compensation()) be_->download(comp.data(), model.compensation());
  if (model.adam_m_meta()) be_->download(m_meta.data(), model.adam_m_meta());
  if (model.adam_v_meta()) be_->download(v_meta.data(), model.adam_v_meta());
  std::string dir;
  if (!model.sharded()) {
    be_->download(m.data(), model.adam_m());
    be_->download(v.data(), model.adam_v());
    dir = save_checkpoint(out, step_, mc_, run_state_to_json(run_state()), model.params_f32(), mb,
                          cfg_.checkpoint.keep);
  } else {
    // ZeRO-1: the master weights are gathered for the model file; every rank writes the
    // Adam moments of its shard; rank 0 publishes once all are written.
    std::vector<float> params = model.params_f32();
    if (rank_ == 0) prepare_checkpoint_dir(out, step_);
    cm_->barrier();
    be_->download(m.data(), model.adam_m());
    be_->download(v.data(), model.adam_v());
    OptimFileRecord mine = write_optim_shard(
        checkpoint_tmp_dir(out, step_), int64_t(model.num_params()), int64_t(model.shard_begin()),
        mb, int64_t(model.shard_count()), rank_, world_);
    std::vector<OptimFileRecord> all(world_);
    cm_->all_gather_bytes(&mine, all.data(), sizeof(mine));
    if (rank_ == 0)
      dir = publish_checkpoint(out, step_, mc_, run_state_to_json(run_state()), params, all,
                               cfg_.checkpoint.keep);
  }
  if (rank_ == 0) {
    printf("checkpoint %s\n", dir.c_str());
    fflush(stdout);
  }
  cm_->barrier();
}

json Trainer::write_partial_summary(const json& extra) {
  json partial = {{"stopped_at_step", step_}, {"steps", cfg_.train.steps}};
  partial.update(extra);
  if (rank_ == 0)
    write_text_atomic(join_path(cfg_.train.out_dir, "summary.json"), partial.dump(2) + "\n");
  return partial;
}

json Trainer::stop_early() {
  save();
  printf(
      "stopping after step %lld as train.stop_at_step asks; continue with "
      "--checkpoint.resume=true\n",
      (long long)step_);
  return write_partial_summary(json::object());
}

void Trainer::stop_on_signal(int sig) {
  save();
  write_partial_summary({{"stopped_by", signal_name(sig)}});
  fflush(stdout);
  throw StoppedBySignal(sig, strf("stopped by %s after step %lld of %lld; its checkpoint is in %s",
                                  signal_name(sig).c_str(), (long long)step_,
                                  (long long)cfg_.train.steps, cfg_.train.out_dir.c_str()));
}

json Trainer::finish() {
  const bool trained = step_ > start_step_ || resumed_from_.empty();
  double final_val_loss = NAN;
  if (val_loader_) {
    final_val_loss = evaluate();
    // Resumed from the final checkpoint: its val line is in the log already.
    if (trained) log_val(step_, final_val_loss);
  }
  if (trained) {
    sample();
    save();
  }
  const FinalNumbers f = final_numbers(final_val_loss);
  const json summary = summary_json(f);
  if (rank_ == 0)
    write_text_atomic(join_path(cfg_.train.out_dir, "summary.json"), summary.dump(2) + "\n");
  print_summary(f);
  return summary;
}

Trainer::FinalNumbers Trainer::final_numbers(double final_val_loss) const {
  FinalNumbers f;
  f.val_loss = final_val_loss;
  f.val_bpb = bits_per_byte(final_val_loss, val_tpb_.ratio);
  if (!recent_losses_.empty()) {
    f.train_loss = 0;
    for (double x : recent_losses_) f.train_loss += x;
    f.train_loss /= recent_losses_.size();
  }
  f.wall = now_seconds() - t_start_;
  f.others_cpu_share = others_cpu_share(cpu_start_, cpu_times_now());
  f.tokens_per_second = run_train_seconds_ > 0 ? run_tokens_ / run_train_seconds_ : NAN;
  if (std::isfinite(loss_floor_) && std::isfinite(final_val_loss))
    f.gap = (ln_vocab_ - final_val_loss) / (ln_vocab_ - loss_floor_);
  return f;
}

json Trainer::summary_json(const FinalNumbers& f) const {
  const double fpt = flops_per_token(mc_, T_), tps = f.tokens_per_second;
  const GPT& m = *model_;
  json summary = {
      {"mode", mode_name(cfg_.precision.mode)},
      {"device", be_->name()},
      {"steps", cfg_.train.steps},
      {"num_params", m.num_params()},
      {"tokens_per_step", step_tokens_},
      {"initial_val_loss", nan_to_null(initial_val_loss_)},
      {"final_train_loss", nan_to_null(f.train_loss)},
      {"last_train_loss", nan_to_null(last_loss_)},
      {"final_val_loss", nan_to_null(f.val_loss)},
      {"initial_val_bpb", nan_to_null(bits_per_byte(initial_val_loss_, val_tpb_.ratio))},
      {"final_val_bpb", nan_to_null(f.val_bpb)},
      {"bpb_tokens_per_byte", nan_to_null(val_tpb_.ratio)},
      {"bpb_source", val_loader_ ? json(val_tpb_.source) : json(nullptr)},
      {"loss_floor", nan_to_null(loss_floor_)},
      {"ln_vocab", ln_vocab_},
      {"gap_closed", nan_to_null(f.gap)},
      {"tokens_per_second", nan_to_null(tps)},
      {"flops_per_token", fpt},
      {"mfu",
       peak_flops_ > 0 && std::isfinite(tps) ? json(tps * fpt / peak_flops_) : json(nullptr)},
      {"gpu", be_->device_model().empty() ? json(nullptr) : json(be_->device_model())},
      {"peak_memory_bytes", be_->peak_bytes()},
      {"planned_memory_bytes",
       plan_memory(mc_, m.dtype(), B_, T_, m.sharded() ? world_ : 1, m.attention_lse(), world_,
                   m.moment_formats(), m.master_format(), m.grad_wire(), m.fp32_grad_accumulation(),
                   m.fp8_weights())
           .total()},
      {"peak_rss_bytes", peak_rss_bytes()},
      // Bytes this rank sent per step for the gradients and weights, over this process's steps.
      {"ranks", world_},
      {"comm_bytes_per_step",
       run_steps_ > 0 ? json(double(run_comm_bytes_) / double(run_steps_)) : json(nullptr)},
      {"state", state_json(m, cfg_)},
      {"skipped_steps", counters_.skipped_steps},
      {"final_loss_scale", scaler_.scale},
      {"loss_scale_kind", scaler_.kind},
      {"optimizer_steps", opt_step_},
      {"wall_seconds", f.wall},
      {"machine", machine_json(cpu_start_.cpus, f.others_cpu_share)},
      {"run_id", run_id_},
      {"resumed_from", resumed_from_.empty() ? json(nullptr) : json(resumed_from_)}};
  if (!numerics_totals_.empty()) {
    json nj = json::object();
    for (const auto& [group, t] : numerics_totals_) nj[group] = stats_json(t);
    summary["numerics"] = nj;
  }
  precision_->add_summary(summary);
  return summary;
}

void Trainer::print_summary(const FinalNumbers& f) const {
  printf(
      "summary: train loss %.4f (mean of the last %zu steps) | final val loss %s%s | %s tok/s | "
      "peak memory %.1f MiB | %s\n",
      f.train_loss, recent_losses_.size(),
      std::isfinite(f.val_loss) ? strf("%.4f", f.val_loss).c_str() : "n/a",
      std::isfinite(f.val_bpb) ? strf(" (%.3f bpb)", f.val_bpb).c_str() : "",
      fmt_rate(f.tokens_per_second).c_str(), be_->peak_bytes() / 1048576.0,
      fmt_duration(f.wall).c_str());
  if (std::isfinite(f.gap))
    printf("summary: val loss %.4f vs floor %.4f: %.1f%% of the gap from ln(V) = %.4f closed\n",
           f.val_loss, loss_floor_, 100 * f.gap, ln_vocab_);
  if (f.others_cpu_share > kSharedMachineShare)
    printf(
        "summary: the cores were shared: other processes took %.0f%% of this run's %d CPUs' "
        "time, so its speed is not this machine's own (summary.json: machine.shared)\n",
        100 * f.others_cpu_share, cpu_start_.cpus);
  precision_->print_summary();
  printf("run directory: %s\n", cfg_.train.out_dir.c_str());
  fflush(stdout);
}

}  // namespace tg
