#include "train.h"

#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "checkpoint.h"
#include "comm.h"
#include "common.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"
#ifdef TG_CUDA
#include "cuda/cuda_backend.h"
#endif
#include "data.h"
#include "fileio.h"
#include "fp8.h"
#include "loss_scaler.h"
#include "perf.h"
#include "prepare.h"
#include "rng.h"
#include "sample.h"
#include "schedule.h"
#include "tokenizer.h"

namespace tg {
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fmt_duration(double s) {
  long t = long(s + 0.5);
  if (t >= 3600) return strf("%ldh%02ldm", t / 3600, (t / 60) % 60);
  return strf("%ldm%02lds", t / 60, t % 60);
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

json rng_to_json(const Rng& r) { return json::array({r.s[0], r.s[1], r.s[2], r.s[3]}); }
Rng rng_from_json(const json& j) {
  Rng r;
  for (int i = 0; i < 4; i++) r.s[i] = j.at(i).get<uint64_t>();
  return r;
}

json nan_to_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

double evaluate(GPT& model, DataLoader& val, int batches, int B, int T) {
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  val.reset();
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    val.next_batch(in.data(), tgt.data());
    sum += model.forward(in.data(), tgt.data(), B, T, 0.0f);
  }
  return sum / batches;
}

}  // namespace

DType mode_dtype(const std::string& mode) {
  if (mode == "fp32") return DType::F32;
  if (mode == "bf16") return DType::BF16;
  if (mode == "fp16") return DType::F16;
  if (mode == "fp8") return DType::BF16;  // FP8 only in the block linears
  throw UsageError(strf("config key 'precision.mode': unknown mode '%s'", mode.c_str()));
}

std::string loss_scale_kind(const Config& cfg) {
  const std::string& k = cfg.precision.loss_scale.kind;
  if (k != "auto") return k;
  return cfg.precision.mode == "fp16" ? "dynamic" : "none";
}

Rounding weight_rounding(const Config& cfg, int opt_step) {
  Rounding r;
  r.stochastic = cfg.precision.stochastic_rounding && opt_step > 0;
  // A fresh stream of random bits for every update, the same on every backend.
  uint64_t x = uint64_t(cfg.train.seed) ^ 0x5352ull /*"SR"*/;
  r.seed = splitmix64(x) + uint64_t(opt_step) * 0x9E3779B97F4A7C15ull;
  return r;
}

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
#ifdef TG_CUDA
  const int gpus = cuda_device_count();
  if (device == "cuda") {
    if (gpus == 0)
      throw UsageError(
          "config key 'train.device': cuda was asked for, but no CUDA GPU is visible (use cpu "
          "or auto)");
    return "cuda";
  }
  // auto. TG_AUTO_DEVICE=cpu keeps `auto` on the CPU (the CPU-only tests set it).
  const char* env = getenv("TG_AUTO_DEVICE");
  if (env && std::string(env) == "cpu") return "cpu";
  return gpus > 0 ? "cuda" : "cpu";
#else
  if (device == "cuda")
    throw UsageError(
        "config key 'train.device': cuda is not available: this binary was built without CUDA "
        "(build with nvcc installed; use cpu or auto)");
  return "cpu";
#endif
}

std::unique_ptr<Backend> make_backend(const Config& cfg, int local_rank) {
  const std::string device = resolve_device(cfg.train.device);
  int threads = cfg.train.threads > 0 ? cfg.train.threads : omp_get_num_procs();
  omp_set_num_threads(threads);
  // The CPU ops split GEMMs across OpenMP threads themselves (src/cpu/matmul.cpp).
  cpu::blas_set_threads(1);
#ifdef TG_CUDA
  if (device == "cuda") return make_cuda_backend(local_rank % std::max(1, cuda_device_count()));
#else
  (void)local_rank;
#endif
  return make_cpu_backend();
}

GPTConfig model_config(const Config& cfg) {
  return gpt_config(cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                    cfg.model.max_seq_len);
}

json run_training(const Config& cfg_in) {
  Config cfg = cfg_in;
  const auto t_start = Clock::now();
  comm_init(DistOptions{cfg.dist.rank, cfg.dist.world_size, cfg.dist.rendezvous, cfg.dist.timeout});
  Comm& job = comm();  // MPI, TCP or single process: how the processes found each other
  std::unique_ptr<Backend> be = make_backend(cfg, comm_local_rank());
  // GPUs reduce over NCCL, bootstrapped by the job's communicator; every collective of the
  // run then goes through it (host values are staged through the GPU).
  std::unique_ptr<Comm> nccl;
  if (job.world() > 1 && be->name() == "cuda") nccl = make_nccl_comm(job, be->device_index());
  Comm& cm = nccl ? *nccl : job;

  // Model shape; an llm.c file defines it, and the effective config records it.
  ModelFile init;
  if (!cfg.model.init_from.empty()) {
    init = read_model_file(cfg.model.init_from);
    cfg.model.n_layer = init.cfg.n_layer;
    cfg.model.n_head = init.cfg.n_head;
    cfg.model.n_embd = init.cfg.n_embd;
    cfg.model.max_seq_len = init.cfg.max_seq_len;
    cfg.model.vocab_size = init.cfg.vocab_size;
  }
  const int world = cm.world(), rank = cm.rank();
  // Only rank 0 talks and writes; the others train in silence.
  if (rank != 0 && !freopen("/dev/null", "w", stdout))
    throw Error("cannot silence stdout on a non-zero rank");
  config_validate(cfg, world);
  const GPTConfig mc = cfg.model.init_from.empty() ? model_config(cfg) : init.cfg;

  json meta = read_dataset_meta(cfg.data.train);
  if (meta.contains("vocab_size") && meta["vocab_size"].is_number_integer() &&
      meta["vocab_size"].get<int>() > mc.vocab_size)
    throw UsageError(
        strf("config key 'model.vocab_size': %d is smaller than the dataset's "
             "vocabulary (%d, from meta.json)",
             mc.vocab_size, meta["vocab_size"].get<int>()));
  const int B = cfg.data.batch_size, T = cfg.data.seq_len;
  const int64_t micro_tokens = int64_t(B) * T * world;
  const int grad_accum =
      cfg.data.total_batch_tokens > 0 ? int(cfg.data.total_batch_tokens / micro_tokens) : 1;
  const int64_t step_tokens = micro_tokens * grad_accum;
  const double loss_floor = dataset_loss_floor(meta, T);
  const double ln_vocab = std::log(double(mc.vocab_size));

  DataLoader train_loader(cfg.data.train, "training", B, T, rank, world, cfg.data.shuffle,
                          uint64_t(cfg.train.seed), mc.vocab_size);
  std::unique_ptr<DataLoader> val_loader;
  if (!cfg.data.val.empty())
    val_loader = std::make_unique<DataLoader>(cfg.data.val, "validation", B, T, rank, world, false,
                                              uint64_t(cfg.train.seed), mc.vocab_size);

  DataParallel dp{world > 1 ? &cm : nullptr, cfg.train.zero_stage == 1};
  // Tests shrink the staging chunk of the gradient reduction to exercise many chunks.
  if (getenv("TG_TEST_REDUCE_CHUNK")) dp.chunk = size_t(atol(getenv("TG_TEST_REDUCE_CHUNK")));
  GPT model(mc, *be, mode_dtype(cfg.precision.mode), dp);
  std::unique_ptr<Fp8State> fp8;
  if (cfg.precision.mode == "fp8") {
    const auto& f = cfg.precision.fp8;
    fp8 = std::make_unique<Fp8State>(Fp8Config{f.recipe, f.history_len, f.margin, f.keep_bf16},
                                     mc.n_layer);
    Fp8Options o;
    o.fast_accum = f.fast_accum;
    be->set_fp8_options(o);
    // The training shapes are checked up front: a block linear that cannot take the
    // backend's FP8 GEMMs is a configuration error (sampling, with its own shapes, may still
    // take the slower path of the same numerics).
    const int N = B * T, C = mc.n_embd;
    const int shapes[4][3] = {{N, C, 3 * C}, {N, C, C}, {N, C, 4 * C}, {N, 4 * C, C}};
    for (const auto& sh : shapes) {
      const std::string p = be->fp8_shape_problem(sh[0], sh[1], sh[2]);
      if (!p.empty())
        throw UsageError(
            strf("precision.mode=fp8 on %s: the block linear N=%d (data.batch_size x "
                 "data.seq_len), C=%d, OC=%d: %s",
                 be->name().c_str(), sh[0], sh[1], sh[2], p.c_str()));
    }
    model.set_fp8(fp8.get());
  }
  if (!cfg.model.init_from.empty())
    model.set_params(init.params);
  else
    model.init_random(uint64_t(cfg.train.seed));

  make_dirs(cfg.train.out_dir);
  Rng sample_rng = Rng::derive(uint64_t(cfg.train.seed), 0x53414D50ull /*"SAMP"*/);
  int start_step = 0;
  int opt_step = 0;  // applied optimizer updates (skipped steps do not count)
  const auto& lsc = cfg.precision.loss_scale;
  LossScaler scaler = LossScaler::make(loss_scale_kind(cfg), lsc.init, lsc.growth_interval,
                                       lsc.growth, lsc.backoff, lsc.min, lsc.max, lsc.hysteresis);
  json counters = {{"tokens_seen", 0}, {"train_seconds", 0.0}, {"skipped_steps", 0}};
  double initial_val_loss = NAN;
  std::string resumed_from;
  if (cfg.checkpoint.resume) {
    std::vector<std::string> ckpts = list_checkpoints(cfg.train.out_dir);
    if (ckpts.empty()) {
      printf("checkpoint.resume: no checkpoint in %s, starting from scratch\n",
             cfg.train.out_dir.c_str());
    } else {
      resumed_from = ckpts.back();
      // Under ZeRO-1 each rank reads the Adam moments of its own shard, whichever way the
      // checkpoint was sharded.
      CheckpointData cd =
          load_checkpoint(resumed_from, mc, model.shard_begin(), model.shard_count());
      model.set_params(cd.params);
      cd.m.resize(model.shard_size(), 0.0f);
      cd.v.resize(model.shard_size(), 0.0f);
      be->upload(model.adam_m(), cd.m.data());
      be->upload(model.adam_v(), cd.v.data());
      const json& s = cd.state;
      try {
        start_step = s.at("step").get<int>();
        LoaderPosition p;
        p.epoch = s.at("data").at("epoch").get<uint64_t>();
        p.shard = s.at("data").at("shard").get<uint64_t>();
        p.row = s.at("data").at("row").get<uint64_t>();
        if (s.at("data").at("batch_size").get<int>() != B ||
            s.at("data").at("seq_len").get<int>() != T ||
            s.at("data").at("world_size").get<int>() != world)
          throw Error(
              strf("checkpoint %s was written with a different batch shape or world "
                   "size; resume with the same data.batch_size, data.seq_len and ranks",
                   resumed_from.c_str()));
        train_loader.set_position(p);
        sample_rng = rng_from_json(s.at("rng").at("sample"));
        counters = s.at("counters");
        const json& prec = s.at("precision");
        opt_step = prec.at("opt_step").get<int>();
        if (prec.at("mode").get<std::string>() == cfg.precision.mode &&
            prec.at("loss_scale").at("kind").get<std::string>() == scaler.kind) {
          scaler.scale = prec["loss_scale"].at("scale").get<double>();
          scaler.good_steps = prec["loss_scale"].at("good_steps").get<int>();
          scaler.hysteresis_left = prec["loss_scale"].at("hysteresis_left").get<int>();
        } else {
          printf(
              "note: the checkpoint was trained in %s; continuing in %s from its fp32 master "
              "weights\n",
              prec.at("mode").get<std::string>().c_str(), cfg.precision.mode.c_str());
        }
        if (fp8 && prec.at("mode").get<std::string>() == "fp8" && s.contains("fp8"))
          fp8->from_json(s["fp8"]);
        // The compute copy of the weights is what the last update rounded, stochastic or not.
        model.refresh_params(weight_rounding(cfg, opt_step));
        initial_val_loss = s.value("initial_val_loss", json(nullptr)).is_number()
                               ? s["initial_val_loss"].get<double>()
                               : NAN;
      } catch (const json::exception& e) {
        throw Error(strf("checkpoint %s/state.json is missing a field: %s", resumed_from.c_str(),
                         e.what()));
      }
      printf("resumed from %s at step %d\n", resumed_from.c_str(), start_step);
    }
  }

  json cfg_json = config_to_json(cfg);
  LineWriter metrics, samples;  // written by rank 0 only
  if (rank == 0) {
    write_text_atomic(join_path(cfg.train.out_dir, "config.json"), cfg_json.dump(2) + "\n");
    metrics.open(join_path(cfg.train.out_dir, "metrics.jsonl"), !resumed_from.empty());
    samples.open(join_path(cfg.train.out_dir, "samples.txt"), !resumed_from.empty());
  }

  printf("config:\n%s\n", cfg_json.dump(2).c_str());
  printf("model: %d layers, %d heads, %d channels, vocab %d (padded %d), %zu parameters\n",
         mc.n_layer, mc.n_head, mc.n_embd, mc.vocab_size, mc.padded_vocab_size, model.num_params());
  printf(
      "data: %zu training shard(s), %lld tokens; batch %d x %d, %d micro-step(s) per step = "
      "%lld tokens/step\n",
      train_loader.files().size(), (long long)train_loader.total_tokens(), B, T, grad_accum,
      (long long)step_tokens);
  if (world > 1)
    printf("data parallel: %s, %d rows per rank%s\n", cm.name().c_str(), B,
           model.sharded()
               ? strf(", ZeRO-1: fp32 master weights and Adam moments sharded, %zu parameters "
                      "per rank",
                      model.shard_size())
                     .c_str()
               : "");
  printf(
      "device: %s%s, %d thread(s); precision %s (%s weights and activations, fp32 master "
      "weights), loss scaling %s%s\n",
      be->name().c_str(),
      be->device_model().empty() ? "" : (" (" + be->device_model() + ")").c_str(),
      omp_get_max_threads(), cfg.precision.mode.c_str(), dtype_name(model.dtype()),
      scaler.kind.c_str(), cfg.precision.stochastic_rounding ? ", stochastic rounding" : "");
  if (fp8) {
    std::string kept;
    for (int l = 0; l < mc.n_layer; l++)
      if (!fp8->layer_in_fp8(l)) kept += (kept.empty() ? "" : ",") + std::to_string(l);
    printf(
        "fp8: block linears in E4M3 (forward) / E5M2 (gradients), %s scaling (history %d, "
        "margin %d), layers kept in bf16: %s; path: %s%s\n",
        cfg.precision.fp8.recipe.c_str(), cfg.precision.fp8.history_len, cfg.precision.fp8.margin,
        kept.empty() ? "none" : kept.c_str(), be->fp8_path_name().c_str(),
        be->name() == "cpu"            ? ""
        : cfg.precision.fp8.fast_accum ? ", fast accumulation in the forward GEMM"
                                       : ", exact fp32 accumulation everywhere");
  }
  if (std::isfinite(loss_floor))
    printf("loss floor of this dataset: %.4f (untrained: ln(V) = %.4f)\n", loss_floor, ln_vocab);
  fflush(stdout);

  Tokenizer tokenizer;
  // Without a prompt, samples start from the first token of the training data.
  int32_t first_token = 0;
  if (cfg.sample.tokens > 0 && cfg.sample.prompt.empty())
    first_token = int32_t(read_shard(train_loader.files()[0], mc.vocab_size).at(0));
  auto do_sample = [&](int step) {
    if (cfg.sample.tokens <= 0 || rank != 0) return;
    std::vector<int32_t> prompt = !cfg.sample.prompt.empty() ? tokenizer.encode(cfg.sample.prompt)
                                                             : std::vector<int32_t>{first_token};
    std::vector<int32_t> out = generate(model, prompt, cfg.sample.tokens, cfg.sample.temperature,
                                        cfg.sample.top_k, sample_rng);
    std::string text;
    for (int32_t id : out) text += tokenizer.decode(id);
    printf("sample at step %d:\n%s\n", step, printable(text).c_str());
    samples.write(strf("--- step %d\n%s", step, text.c_str()));
  };

  auto log_val = [&](int step, double v) {
    std::string floor_txt;
    if (std::isfinite(loss_floor))
      floor_txt = strf(" | floor %.4f | gap closed %.1f%%", loss_floor,
                       100.0 * (ln_vocab - v) / (ln_vocab - loss_floor));
    printf("val   step %d | val loss %.4f%s\n", step, v, floor_txt.c_str());
    fflush(stdout);
    metrics.write(json({{"kind", "val"}, {"step", step}, {"val_loss", v}}).dump());
  };

  // Every rank evaluates its rows of the same val batches; the mean is all-reduced.
  auto eval_all = [&]() {
    double v = evaluate(model, *val_loader, cfg.eval.batches, B, T);
    cm.all_reduce_sum(&v, 1);
    return v / world;
  };
  if (val_loader && start_step == 0) {
    initial_val_loss = eval_all();
    log_val(0, initial_val_loss);
  }

  auto state_json = [&](int step) {
    LoaderPosition p = train_loader.position();
    return json{{"config", cfg_json},
                {"model",
                 {{"max_seq_len", mc.max_seq_len},
                  {"vocab_size", mc.vocab_size},
                  {"padded_vocab_size", mc.padded_vocab_size},
                  {"n_layer", mc.n_layer},
                  {"n_head", mc.n_head},
                  {"n_embd", mc.n_embd}}},
                {"num_params", model.num_params()},
                {"data",
                 {{"epoch", p.epoch},
                  {"shard", p.shard},
                  {"row", p.row},
                  {"batch_size", B},
                  {"seq_len", T},
                  {"world_size", world}}},
                {"rng", {{"sample", rng_to_json(sample_rng)}}},
                {"counters", counters},
                {"precision",
                 {{"mode", cfg.precision.mode},
                  {"opt_step", opt_step},
                  {"loss_scale",
                   {{"kind", scaler.kind},
                    {"scale", scaler.scale},
                    {"good_steps", scaler.good_steps},
                    {"hysteresis_left", scaler.hysteresis_left}}}}},
                {"initial_val_loss", nan_to_null(initial_val_loss)},
                {"completed_steps", step}};
  };
  auto save = [&](int step) {
    if (!model.sharded() && rank != 0) {  // every rank holds the same state; rank 0 writes it
      cm.barrier();
      return;
    }
    std::vector<float> m(model.shard_size()), v(model.shard_size());
    std::string dir;
    if (!model.sharded()) {
      json st = state_json(step);
      if (fp8) st["fp8"] = fp8->to_json();
      be->download(m.data(), model.adam_m());
      be->download(v.data(), model.adam_v());
      dir = save_checkpoint(cfg.train.out_dir, step, mc, st, model.params_f32(), m, v,
                            cfg.checkpoint.keep);
    } else {
      // ZeRO-1: the master weights are gathered for the model file; every rank writes the
      // Adam moments of its shard; rank 0 publishes once all are written.
      std::vector<float> params = model.params_f32();
      if (rank == 0) prepare_checkpoint_dir(cfg.train.out_dir, step);
      cm.barrier();
      be->download(m.data(), model.adam_m());
      be->download(v.data(), model.adam_v());
      OptimFileRecord mine =
          write_optim_shard(checkpoint_tmp_dir(cfg.train.out_dir, step),
                            int64_t(model.num_params()), int64_t(model.shard_begin()), m.data(),
                            v.data(), int64_t(model.shard_count()), rank, world);
      std::vector<OptimFileRecord> all(world);
      cm.all_gather_bytes(&mine, all.data(), sizeof(mine));
      if (rank == 0) {
        json st = state_json(step);
        if (fp8) st["fp8"] = fp8->to_json();
        dir = publish_checkpoint(cfg.train.out_dir, step, mc, st, params, all, cfg.checkpoint.keep);
      }
    }
    if (rank == 0) {
      printf("checkpoint %s\n", dir.c_str());
      fflush(stdout);
    }
    cm.barrier();
  };

  // Numerics telemetry: one metrics line per sampled step, and totals per group
  // (act, dact, grad) for the summary.
  std::map<std::string, TensorStats> numerics_totals;
  auto record_numerics = [&](int step, double scale) {
    json tensors = json::object();
    for (const auto& [name, t] : model.telemetry_tensors()) {
      TensorStats st = be->stats(t);
      double n = double(std::max<size_t>(st.n, 1));
      tensors[name] = {{"amax", st.amax},
                       {"zero_frac", st.zeros / n},
                       {"subnormal_frac", st.subnormals / n},
                       {"nonfinite_frac", st.nonfinite / n}};
      TensorStats& tot = numerics_totals[name.substr(0, name.find('/'))];
      tot.amax = std::max(tot.amax, st.amax);
      tot.n += st.n;
      tot.zeros += st.zeros;
      tot.subnormals += st.subnormals;
      tot.nonfinite += st.nonfinite;
    }
    metrics.write(json({{"kind", "numerics"},
                        {"step", step},
                        {"dtype", dtype_name(model.dtype())},
                        {"loss_scale", scale},
                        {"tensors", tensors}})
                      .dump());
  };

  // MFU against the GPU's peak for this mode (src/perf.h); none on the CPU.
  const double peak_flops =
      be->name() == "cuda" ? gpu_peak_flops(be->device_model(), cfg.precision.mode) : 0.0;
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  std::vector<double> recent_losses;
  double final_val_loss = NAN, last_loss = NAN;
  double run_train_seconds = 0;
  int64_t run_tokens = 0;
  const int steps = cfg.train.steps;
  // Tests make one rank fail to check that the whole job ends with its message.
  const int test_fail_rank = getenv("TG_TEST_FAIL_RANK") ? atoi(getenv("TG_TEST_FAIL_RANK")) : -1;
  // TG_DEVICE_LOSS_SCALE=1 on a backend that has it: the skip/scale decision on the device
  // (one process, unsharded; otherwise the found-inf flag or the norm needs the other ranks).
  const bool device_decision = be->device_loss_scale() && world == 1 && !model.sharded();
  if (device_decision) printf("loss scale: decided on the device\n");
  if (model.attention_lse())
    printf("attention: flash (per-row logsumexp kept, no T x T probabilities)\n");
  for (int step = start_step; step < steps; step++) {
    const auto t0 = Clock::now();
    // The schedule follows applied updates, so a skipped step does not advance it.
    const double lr = lr_at(opt_step, steps, cfg.optim.lr, cfg.optim.warmup_steps,
                            cfg.optim.schedule, cfg.optim.final_lr_frac);
    const double scale = scaler.scale;
    model.zero_grad();
    double loss = 0;
    for (int micro = 0; micro < grad_accum; micro++) {
      train_loader.next_batch(inputs.data(), targets.data());
      loss += model.forward(inputs.data(), targets.data(), B, T,
                            float(scale / (double(grad_accum) * world))) /
              grad_accum;
      model.backward();
    }
    if (test_fail_rank == rank && step + 1 == 2)
      throw Error(strf("injected failure on rank %d (TG_TEST_FAIL_RANK)", rank));
    if (world > 1) {
      if (fp8) fp8->reduce_latest(cm);
      model.sync_grads();
      cm.all_reduce_sum(&loss, 1);
      loss /= world;
    }
    if (cfg.precision.inject_nonfinite_step == step + 1) poison_gradient(*be, model.grads());
    if (cfg.precision.telemetry_every > 0 && (step + 1) % cfg.precision.telemetry_every == 0)
      record_numerics(step + 1, scale);
    if (!std::isfinite(loss))
      throw Error(strf("training diverged at step %d: the loss is %g (try a lower optim.lr)",
                       step + 1, loss));
    // One fused pass over the gradients: unscaled norm and finiteness.
    double norm = NAN;
    bool skipped = false;
    if (device_decision) {
      // The same decision on the device (src/loss_scaler.h's loss_scale_step); the host
      // waits once, after AdamW, to learn it.
      model.device_decided_step(
          scaler.state(), scaler.params(), cfg.optim.grad_clip,
          {float(lr), float(cfg.optim.beta1), float(cfg.optim.beta2), float(cfg.optim.eps),
           float(cfg.optim.weight_decay), 0.f, opt_step + 1, weight_rounding(cfg, opt_step + 1)});
      const Backend::DeviceStepReport r = be->device_step_report();
      scaler.set_state(r.state);
      skipped = r.step.skip;
      norm = r.step.norm;
      if (!skipped) opt_step++;
    } else {
      const GradCheck gc = model.check_grads(scale);
      norm = gc.finite ? gc.norm : NAN;
      skipped = scaler.update(!gc.finite);
      if (!skipped) {
        const double clip = cfg.optim.grad_clip;
        const double clip_factor = (clip > 0 && norm > clip) ? clip / norm : 1.0;
        opt_step++;
        model.adamw_step({float(lr), float(cfg.optim.beta1), float(cfg.optim.beta2),
                          float(cfg.optim.eps), float(cfg.optim.weight_decay),
                          float(clip_factor / scale), opt_step, weight_rounding(cfg, opt_step)});
      }
    }
    if (skipped) {
      counters["skipped_steps"] = counters["skipped_steps"].get<int>() + 1;
      printf("step %d skipped: non-finite gradient at loss scale %g; next scale %g\n", step + 1,
             scale, scaler.scale);
    }
    be->synchronize();  // the step's time includes the device's queued work
    const double dt = seconds_since(t0);
    last_loss = loss;
    recent_losses.push_back(loss);
    if (recent_losses.size() > 10) recent_losses.erase(recent_losses.begin());
    counters["tokens_seen"] = counters["tokens_seen"].get<int64_t>() + step_tokens;
    counters["train_seconds"] = counters["train_seconds"].get<double>() + dt;
    run_train_seconds += dt;
    run_tokens += step_tokens;
    const double tok_s = step_tokens / dt;
    metrics.write(json({{"kind", "train"},
                        {"step", step + 1},
                        {"loss", loss},
                        {"lr", lr},
                        {"grad_norm", nan_to_null(norm)},
                        {"loss_scale", scale},
                        {"skipped", skipped},
                        {"ms", dt * 1e3},
                        {"tokens_per_second", tok_s}})
                      .dump());
    if ((step + 1) % cfg.train.log_every == 0 || step + 1 == steps || step == start_step) {
      double avg = run_train_seconds / (step + 1 - start_step);
      std::string scale_txt = scaler.kind == "none" ? "" : strf(" | scale %g", scale);
      std::string skip_txt = counters["skipped_steps"].get<int>() > 0
                                 ? strf(" | skipped %d", counters["skipped_steps"].get<int>())
                                 : "";
      std::string mfu_txt;
      if (peak_flops > 0)
        mfu_txt = strf(" | MFU %.1f%%", 100.0 * tok_s * flops_per_token(mc, T) / peak_flops);
      printf("step %*d/%d | loss %.4f | lr %.2e | norm %.3f%s%s | %.1f ms | %s tok/s%s | eta %s\n",
             int(std::to_string(steps).size()), step + 1, steps, loss, lr, norm, scale_txt.c_str(),
             skip_txt.c_str(), dt * 1e3, fmt_rate(tok_s).c_str(), mfu_txt.c_str(),
             fmt_duration(avg * (steps - step - 1)).c_str());
      fflush(stdout);
    }
    const bool stop_early = cfg.train.stop_at_step > 0 && step + 1 == cfg.train.stop_at_step;
    if (stop_early && step + 1 < steps) {
      save(step + 1);
      printf(
          "stopping after step %d as train.stop_at_step asks; continue with "
          "--checkpoint.resume=true\n",
          step + 1);
      json partial = {{"stopped_at_step", step + 1}, {"steps", steps}};
      if (rank == 0)
        write_text_atomic(join_path(cfg.train.out_dir, "summary.json"), partial.dump(2) + "\n");
      return partial;
    }
    const bool last = step + 1 == steps;
    if (val_loader && !last && cfg.eval.every > 0 && (step + 1) % cfg.eval.every == 0)
      log_val(step + 1, eval_all());
    if (!last && cfg.sample.every > 0 && (step + 1) % cfg.sample.every == 0) do_sample(step + 1);
    if (!last && cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0) save(step + 1);
  }
  if (val_loader) {
    final_val_loss = eval_all();
    log_val(steps, final_val_loss);
  }
  if (steps > start_step || resumed_from.empty()) save(steps);
  do_sample(steps);

  double final_train = NAN;
  if (!recent_losses.empty()) {
    final_train = 0;
    for (double x : recent_losses) final_train += x;
    final_train /= recent_losses.size();
  }
  const double wall = seconds_since(t_start);
  const double tps = run_train_seconds > 0 ? run_tokens / run_train_seconds : NAN;
  double gap = NAN;
  if (std::isfinite(loss_floor) && std::isfinite(final_val_loss))
    gap = (ln_vocab - final_val_loss) / (ln_vocab - loss_floor);
  json summary = {
      {"mode", cfg.precision.mode},
      {"device", be->name()},
      {"steps", steps},
      {"num_params", model.num_params()},
      {"tokens_per_step", step_tokens},
      {"initial_val_loss", nan_to_null(initial_val_loss)},
      {"final_train_loss", nan_to_null(final_train)},
      {"last_train_loss", nan_to_null(last_loss)},
      {"final_val_loss", nan_to_null(final_val_loss)},
      {"loss_floor", nan_to_null(loss_floor)},
      {"ln_vocab", ln_vocab},
      {"gap_closed", nan_to_null(gap)},
      {"tokens_per_second", nan_to_null(tps)},
      {"flops_per_token", flops_per_token(mc, T)},
      {"mfu", peak_flops > 0 && std::isfinite(tps) ? json(tps * flops_per_token(mc, T) / peak_flops)
                                                   : json(nullptr)},
      {"gpu", be->device_model().empty() ? json(nullptr) : json(be->device_model())},
      {"peak_memory_bytes", be->peak_bytes()},
      {"planned_memory_bytes", plan_memory(mc, model.dtype(), B, T, model.sharded() ? world : 1,
                                           model.attention_lse(), world)
                                   .total()},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"skipped_steps", counters["skipped_steps"]},
      {"final_loss_scale", scaler.scale},
      {"loss_scale_kind", scaler.kind},
      {"optimizer_steps", opt_step},
      {"wall_seconds", wall},
      {"resumed_from", resumed_from.empty() ? json(nullptr) : json(resumed_from)}};
  if (!numerics_totals.empty()) {
    json nj = json::object();
    for (const auto& [group, t] : numerics_totals) {
      double n = double(std::max<size_t>(t.n, 1));
      nj[group] = {{"amax", t.amax},
                   {"zero_frac", t.zeros / n},
                   {"subnormal_frac", t.subnormals / n},
                   {"nonfinite_frac", t.nonfinite / n}};
    }
    summary["numerics"] = nj;
  }
  if (rank == 0)
    write_text_atomic(join_path(cfg.train.out_dir, "summary.json"), summary.dump(2) + "\n");
  printf(
      "summary: final train loss %.4f | final val loss %s | %s tok/s | peak memory %.1f MiB "
      "| %s\n",
      final_train, std::isfinite(final_val_loss) ? strf("%.4f", final_val_loss).c_str() : "n/a",
      fmt_rate(tps).c_str(), be->peak_bytes() / 1048576.0, fmt_duration(wall).c_str());
  if (std::isfinite(gap))
    printf("summary: val loss %.4f vs floor %.4f: %.1f%% of the gap from ln(V) = %.4f closed\n",
           final_val_loss, loss_floor, 100 * gap, ln_vocab);
  printf("run directory: %s\n", cfg.train.out_dir.c_str());
  fflush(stdout);
  return summary;
}

}  // namespace tg
