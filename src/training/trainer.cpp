// trainer.cpp: one training run: set-up, start, the step and its numerics telemetry (resume:
// trainer_resume.cpp; evaluation, checkpoints and the summary: trainer_summary.cpp).
#include "trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>

#include "backend_factory.h"
#include "gpu_peak.h"
#include "memory_check.h"
#include "run_dir.h"
#include "schedule.h"
#include "signals.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cuda_library.h"
#include "src/base/common.h"
#include "src/base/test_hooks.h"
#include "src/comm/comm.h"
#include "src/io/hf.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"
#include "src/precision/state_telemetry.h"

namespace tg {
using json = nlohmann::json;

namespace {

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
  settle_attention();
  check_memory();  // before anything is allocated
  lock_out_dir();  // before anything is written to the run directory
  setup_data();
  setup_model();
  sample_rng_ = Rng::derive(uint64_t(cfg_.train.seed), 0x53414D50ull /*"SAMP"*/);
  inputs_.resize(size_t(B_) * T_);
  targets_.resize(size_t(B_) * T_);
  // MFU against the GPU's peak for this mode (src/training/gpu_peak.h); none on the CPU.
  peak_flops_ =
      be_->name() == "cuda" ? gpu_peak_flops(be_->device_model(), spec_.mode) : 0.0;
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
  spec_ = precision_spec(cfg_);
  mc_ = c.model.init_from.empty() ? model_config(cfg_) : init_.cfg;
}

void Trainer::check_memory() const {
  if (!cfg_.train.memory_check) return;
  const int hs = mc_.n_embd / mc_.n_head;
  const bool lse = be_->attention_saves_lse(hs, spec_.compute);
  // The GPU plan of the path this backend takes (auto resolved), not of the key's value.
  Config planned = cfg_;
  planned.cuda.attention =
      attention_request(be_->attention_choice(hs, spec_.compute).path);
  const int zero = cfg_.train.zero_stage == 1 ? world_ : 1;
  const MemoryPlan p = plan_memory_of(cfg_, spec_.mode, mc_, cfg_.data.batch_size,
                                      cfg_.data.seq_len, zero, world_, lse);
  size_t free = 0, total = 0;
  const std::string why =
      be_->device_memory(&free, &total)
          ? gpu_memory_refusal(cfg_, p, planned_gpu_bytes(planned, mc_, world_), free, total,
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
  if (refused && world_ > 1) comm_agree_to_stop();
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
  dp.grad_wire = spec_.state.grad_comm;
  dp.fp8_weights = spec_.state.weight_comm == WeightComm::FP8E4M3;
  model_ = std::make_unique<GPT>(mc_, *be_, spec_.compute, dp, spec_.moments, spec_.master);
  model_->set_fp32_grad_accumulation(spec_.state.grads == GradAccum::FP32);
  const auto& lsc = spec_.loss_scale;
  scaler_ = LossScaler::make(lsc.kind, lsc.init, lsc.growth_interval, lsc.growth,
                             lsc.backoff, lsc.min, lsc.max, lsc.hysteresis);
  precision_ = std::make_unique<PrecisionRuntime>(cfg_, *be_, *model_);
  if (!c.model.init_from.empty()) {
    model_->set_params(init_.params);
    std::vector<float>().swap(init_.params);  // only its shape is needed from here on
  } else
    model_->init_random(uint64_t(c.train.seed));
  inject_outlier(*model_, mc_, spec_.inject_outlier);
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
      omp_get_max_threads(), mode_name(spec_.mode), dtype_name(m.dtype()),
      master_format_info(m.master_format()).summary, enum_name(scaler_.kind),
      spec_.stochastic_rounding ? ", stochastic rounding" : "");
  const auto& st = spec_.state;
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
  // Which attention path runs and why (cuda.attention); a CPU run on the reference says nothing,
  // as before the choice existed. An old config's flash (fused) is read as cudnn (cublas): a
  // notice says so.
  const std::string notice = attention_request_notice(cfg_.cuda.attention);
  if (!notice.empty()) printf("%s\n", notice.c_str());
  const AttentionChoice att = be_->attention_choice(mc_.n_embd / mc_.n_head, m.dtype());
  if (att.lse || !att.reason.empty())
    printf("attention: %s (%s)\n", attention_path_name(att.path), att.reason.c_str());
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
  forward_backward(r);
  // Where the device decides the step (one process), the losses are read after its report,
  // which waited for the update: the step's one wait for the device. Elsewhere the host needs
  // the loss first (the ranks' all-reduce) and waits for the gradients' norm anyway; the read
  // is still queued, so the backward is queued before the host waits.
  double loss = sum_gradients(device_decision_ ? NAN : take_loss(), r);
  if (spec_.inject_nonfinite_step == r.step) poison_gradient(*be_, model_->grads());
  const bool telemetry = spec_.telemetry_every > 0 && r.step % spec_.telemetry_every == 0;
  if (telemetry) record_numerics(r.step, r.scale);
  if (!device_decision_) check_loss(loss, r);
  // What the state's formats do to this update (src/precision/state_telemetry.h).
  StateProbe probe;
  if (telemetry) probe = state_probe_before(*model_);
  update(r);
  if (device_decision_) {
    loss = take_loss();   // one process: sum_gradients had no use for it
    check_loss(loss, r);  // a non-finite loss's gradients skipped the update on the device
  }
  if (telemetry && !r.skipped)
    metrics_.write(json({{"kind", "state"},
                         {"step", r.step},
                         {"master", master_format_name(model_->master_format())},
                         {"adam_m", state_format_name(spec_.state.adam_m)},
                         {"adam_v", state_format_name(spec_.state.adam_v)},
                         {"layers", state_probe_after(*model_, probe, cm_)}})
                       .dump());
  end_step(r, loss, t0);
  return r;
}

void Trainer::forward_backward(const StepResult& r) {
  GPT& model = *model_;
  model.zero_grad();
  precision_->begin_step(r.step);
  for (int micro = 0; micro < grad_accum_; micro++) {
    train_loader_->next_batch(inputs_.data(), targets_.data());
    precision_->before_forward(micro);
    model.forward_queued(inputs_.data(), targets_.data(), B_, T_,
                         float(r.scale / (double(grad_accum_) * world_)));
    model.backward();
    precision_->after_backward();
  }
  model.finish_grads();  // fp32 accumulation: the sum rounded once to the compute type
}

double Trainer::take_loss() {
  double loss = 0;  // the micro-batches' mean losses over grad_accum, summed in their order
  for (double l : model_->take_losses()) loss += l / grad_accum_;
  return loss;
}

void Trainer::check_loss(double loss, const StepResult& r) const {
  if (!std::isfinite(loss))
    throw Error(strf("training diverged at step %lld: the loss is %g (try a lower optim.lr)",
                     (long long)r.step, loss));
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
                       {"grad_norm", json_or_null(r.norm)},
                       {"loss_scale", r.scale},
                       {"skipped", r.skipped},
                       {"ms", r.seconds * 1e3},
                       {"tokens_per_second", tok_s},
                       {"comm_bytes", r.comm_bytes},
                       {"threads", r.threads}})
                     .dump());
  const int64_t steps = cfg_.train.steps;
  if (r.step % cfg_.train.log_every != 0 && r.step != steps && r.step != start_step_ + 1) return;
  const std::string scale_txt =
      scaler_.kind == LossScaling::None ? "" : strf(" | scale %g", r.scale);
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

json Trainer::numerics_summary() const {
  json nj = json::object();
  for (const auto& [group, t] : numerics_totals_) nj[group] = stats_json(t);
  return nj;
}

}  // namespace tg
