// trainer_summary.cpp: a run's evaluation, samples and checkpoints, and how it ends: finished,
// stopped early or by a signal, with summary.json and the printed summary.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>

#include "gpu_peak.h"
#include "run_dir.h"
#include "signals.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/base/common.h"
#include "src/base/test_hooks.h"
#include "src/comm/comm.h"
#include "src/model/sample.h"
#include "src/precision/precision.h"
#include "src/precision/quant_memory.h"
#include "trainer.h"

namespace tg {
using json = nlohmann::json;

namespace {

size_t peak_rss_bytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return size_t(ru.ru_maxrss) * 1024;
}

// The summary's "machine": the CPU, and whether other processes shared its cores during the
// run (src/base/cpu_load.h), which decides whether the run's speed figures are its own.
json machine_json(int cpus, double share) {
  return {{"cpu", cpu::cpu_model_name()},
          {"cpus", cpus},
          {"others_cpu_share", json_or_null(share)},
          {"shared", std::isfinite(share) ? json(share > kSharedMachineShare) : json(nullptr)}};
}

// The summary's "state": the optimizer state's formats (precision.state.*) and what they keep
// per parameter beyond the compute weights (master weights, Adam's m and v).
json state_json(const GPT& m, const Config& cfg) {
  const PrecisionSpec spec = precision_spec(cfg);
  const auto& st = spec.state;
  const size_t master = m.dtype() == DType::BF16 || m.dtype() == DType::F16
                            ? master_format_info(m.master_format()).bytes
                            : 0;
  const MomentBlocking b = moment_blocking(cfg);
  return {{"master", master_format_name(m.master_format())},
          {"grad_comm", wire_format_name(m.grad_wire())},
          {"grads", enum_name(m.fp32_grad_accumulation() ? GradAccum::FP32 : GradAccum::Compute)},
          {"weight_comm", enum_name(m.fp8_weights() ? WeightComm::FP8E4M3 : WeightComm::Compute)},
          {"adam_m", moment_blocking_name(st.adam_m, b)},
          {"adam_v", moment_blocking_name(st.adam_v, b)},
          {"bytes_per_parameter",
           double(master) + state_format_bytes(st.adam_m, b) + state_format_bytes(st.adam_v, b)}};
}

}  // namespace

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
  MomentBytes mb{spec_.state.adam_m,
                 spec_.state.adam_v,
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
      {"mode", mode_name(spec_.mode)},
      {"device", be_->name()},
      {"steps", cfg_.train.steps},
      {"num_params", m.num_params()},
      {"tokens_per_step", step_tokens_},
      {"initial_val_loss", json_or_null(initial_val_loss_)},
      {"final_train_loss", json_or_null(f.train_loss)},
      {"last_train_loss", json_or_null(last_loss_)},
      {"final_val_loss", json_or_null(f.val_loss)},
      {"initial_val_bpb", json_or_null(bits_per_byte(initial_val_loss_, val_tpb_.ratio))},
      {"final_val_bpb", json_or_null(f.val_bpb)},
      {"bpb_tokens_per_byte", json_or_null(val_tpb_.ratio)},
      {"bpb_source", val_loader_ ? json(val_tpb_.source) : json(nullptr)},
      {"loss_floor", json_or_null(loss_floor_)},
      {"ln_vocab", ln_vocab_},
      {"gap_closed", json_or_null(f.gap)},
      {"tokens_per_second", json_or_null(tps)},
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
      {"loss_scale_kind", enum_name(scaler_.kind)},
      {"optimizer_steps", opt_step_},
      {"wall_seconds", f.wall},
      {"machine", machine_json(cpu_start_.cpus, f.others_cpu_share)},
      {"run_id", run_id_},
      {"resumed_from", resumed_from_.empty() ? json(nullptr) : json(resumed_from_)}};
  if (!numerics_totals_.empty()) summary["numerics"] = numerics_summary();
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
