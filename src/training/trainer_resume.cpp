// trainer_resume.cpp: how a run starts from its directory: a fresh run claims it; a resumed
// one cleans up what a kill left, then takes the newest checkpoint that every rank verifies
// (verify: read and check, changing nothing; vote: one collective; apply: the same state on
// every rank), and the RunState a checkpoint saves.
#include <cstdio>

#include "src/precision/moment_resume.h"
#include "run_dir.h"
#include "src/base/common.h"
#include "src/base/test_hooks.h"
#include "src/comm/comm.h"
#include "src/io/checkpoint_cleanup.h"
#include "src/precision/precision.h"
#include "trainer.h"

namespace tg {

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
  // The weights learned one tokenizer's ids: data of another would give them other meanings.
  if (s.tokenizer.known() && tokenizer_record_.known() &&
      !same_tokenizer(s.tokenizer, tokenizer_record_))
    throw Error(strf("checkpoint state %s: field 'tokenizer': the run was trained with %s, but "
                     "the data (data.train) is %s; resume on the data it was trained on",
                     state_path.c_str(), describe_tokenizer(s.tokenizer).c_str(),
                     describe_tokenizer(tokenizer_record_).c_str()));
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
  if (s.mode == spec_.mode && s.loss_scale.kind == scaler_.kind) {
    scaler_.scale = s.loss_scale.scale;
    scaler_.good_steps = s.loss_scale.good_steps;
    scaler_.hysteresis_left = s.loss_scale.hysteresis_left;
  } else {
    printf("note: the checkpoint was trained in %s; continuing in %s from its master weights\n",
           mode_name(s.mode), mode_name(spec_.mode));
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
  s.mode = spec_.mode;
  s.loss_scale = scaler_;
  precision_->save(s);
  s.initial_val_loss = initial_val_loss_;
  s.config = cfg_json_;
  s.tokenizer = tokenizer_record_;
  s.model = mc_;
  s.num_params = model_->num_params();
  return s;
}

}  // namespace tg
