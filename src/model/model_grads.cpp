// model_grads.cpp: the GPT's gradients after the backward pass: zeroed, folded into fp32 sums
// across micro-steps, summed across ranks (fp32 all-reduce or reduce-scatter in staging chunks,
// or in a wire format through all-to-all), their norm and finiteness check, and the AdamW step
// on this rank's shard (plain or with FP8 moment blocks), all-gathering the updated weights.
#include <algorithm>
#include <cmath>

#include "model.h"
#include "src/base/host_memory.h"
#include "src/comm/comm.h"

namespace tg {

void GPT::zero_grad() {
  be_.set_scope(-1, StepPhase::Backward);
  be_.zero(grads_);
  if (grad_acc_) be_.zero(grad_acc_);
}

void GPT::set_fp32_grad_accumulation(bool on) {
  if (!on || dtype_size(dtype_) != 2 || grad_acc_) return;
  AllocPurpose purpose("the fp32 gradient accumulation");
  grad_acc_ = be_.alloc(DType::F32, padded_params_);
  be_.zero(grad_acc_);
}

// grad_acc_ += grads, grads = 0: a chunk at a time through an fp32 staging buffer.
void GPT::fold_grads() {
  AllocPurpose purpose("the fp32 gradient accumulation's staging");
  const size_t n = padded_params_, chunk = std::min(n, kGradSyncChunk);
  Tensor stage = be_.alloc(DType::F32, chunk);
  for (size_t off = 0; off < n; off += chunk) {
    const size_t len = std::min(chunk, n - off);
    be_.convert(stage.slice(0, len), grads_.slice(off, len), Rounding{});
    Tensor acc = grad_acc_.slice(off, len);
    be_.residual_forward(acc, acc, stage.slice(0, len), len);
  }
  be_.free(stage);
  be_.zero(grads_);
}

void GPT::finish_grads() {
  if (grad_acc_) be_.convert(grads_, grad_acc_, Rounding{});
}

void GPT::sync_grads() {
  if (!dp_.comm) return;
  if (dp_.grad_wire != WireFormat::FP32) return sync_grads_wire();
  Comm& cm = *dp_.comm;
  const size_t S = shard_size_, W = size_t(cm.world());
  // The collectives on fp32 backend buffers: in place when the communicator can read the
  // backend's memory (host memory, or NCCL on device memory), else through host copies.
  const bool direct = be_.name() == "cpu" || cm.device_memory();
  auto all_reduce = [&](Tensor t) {
    comm_bytes_ += ring_all_reduce_bytes(t.numel * sizeof(float), int(W));
    if (direct) return cm.all_reduce_sum(t.as<float>(), t.numel);
    std::vector<float> host(t.numel);
    be_.download(host.data(), t);
    cm.all_reduce_sum(host.data(), host.size());
    be_.upload(t, host.data());
  };
  auto reduce_scatter = [&](Tensor in, Tensor out) {
    comm_bytes_ += ring_scatter_gather_bytes(out.numel * W * sizeof(float), int(W));
    if (direct) return cm.reduce_scatter_sum(in.as<float>(), out.as<float>(), out.numel);
    std::vector<float> hin(in.numel), hout(out.numel);
    be_.download(hin.data(), in);
    cm.reduce_scatter_sum(hin.data(), hout.data(), hout.size());
    be_.upload(out, hout.data());
  };
  if (dtype_ == DType::F32) {
    if (!sharded_) {
      all_reduce(grads_.slice(0, num_params_));
      return;
    }
    Tensor sum = be_.alloc(DType::F32, S);
    reduce_scatter(grads_, sum);
    be_.convert(grads_.slice(shard_begin_, S), sum, Rounding{});
    be_.free(sum);
    return;
  }
  // 16-bit gradients are summed in fp32 and rounded once, a chunk at a time through a
  // staging buffer of a few MiB (not a whole fp32 copy of the gradients).
  const size_t kChunk = std::max<size_t>(1, dp_.chunk);
  AllocPurpose purpose("the gradient reduction's staging");
  if (!sharded_) {
    const size_t chunk = std::min(num_params_, kChunk);
    Tensor stage = be_.alloc(DType::F32, chunk);
    for (size_t off = 0; off < num_params_; off += chunk) {
      const size_t len = std::min(chunk, num_params_ - off);
      be_.convert(stage.slice(0, len), grads_.slice(off, len), Rounding{});
      all_reduce(stage.slice(0, len));
      be_.convert(grads_.slice(off, len), stage.slice(0, len), Rounding{});
    }
    be_.free(stage);
    return;
  }
  // ZeRO-1: chunk k of every rank's part side by side, so one reduce-scatter hands each rank
  // the sums of chunk k of its own shard.
  const size_t chunk = std::min(S, kChunk);
  Tensor stage = be_.alloc(DType::F32, W * chunk), sum = be_.alloc(DType::F32, chunk);
  for (size_t off = 0; off < S; off += chunk) {
    const size_t len = std::min(chunk, S - off);
    for (size_t r = 0; r < W; r++)
      be_.convert(stage.slice(r * len, len), grads_.slice(r * S + off, len), Rounding{});
    reduce_scatter(stage.slice(0, W * len), sum.slice(0, len));
    be_.convert(grads_.slice(shard_begin_ + off, len), sum.slice(0, len), Rounding{});
  }
  be_.free(stage);
  be_.free(sum);
}

void GPT::sync_grads_wire() {
  Comm& cm = *dp_.comm;
  const WireFormat f = dp_.grad_wire;
  const size_t W = size_t(cm.world()), S = shard_size_;
  const size_t total = sharded_ ? S : num_params_;
  const size_t step = std::min(total, std::max<size_t>(1, dp_.chunk));
  const size_t rows = wire_part(step, W, sharded_), row_bytes = wire_bytes(rows, f);
  // The encoded rows travel from the backend's memory when the communicator reads it (host
  // memory, or NCCL on device memory), else through host copies.
  const bool direct = be_.name() == "cpu" || cm.device_memory();
  auto exchange = [&](Tensor send, Tensor recv, size_t bytes, bool gather) {
    comm_bytes_ += uint64_t(W - 1) * bytes;
    if (direct)
      return gather ? cm.all_gather_bytes(send.data, recv.data, bytes)
                    : cm.all_to_all_bytes(send.data, recv.data, bytes);
    std::vector<uint8_t> hs(send.bytes()), hr(recv.bytes());
    be_.download(hs.data(), send);
    gather ? cm.all_gather_bytes(hs.data(), hr.data(), bytes)
           : cm.all_to_all_bytes(hs.data(), hr.data(), bytes);
    be_.upload(recv, hr.data());
  };
  AllocPurpose purpose("the gradient reduction's staging");
  Tensor stage = be_.alloc(DType::F32, W * rows), sum = be_.alloc(DType::F32, rows);
  Tensor send = be_.alloc(DType::E4M3, W * row_bytes), recv = be_.alloc(DType::E4M3, W * row_bytes);
  for (size_t off = 0; off < total; off += step) {
    const size_t len = std::min(step, total - off), part = wire_part(len, W, sharded_);
    const size_t bytes = wire_bytes(part, f);
    // Row r of the stage: the elements rank r sums (zero past the chunk's end).
    auto row = [&](size_t r) -> std::pair<size_t, size_t> {  // {first gradient, count}
      if (sharded_) return {r * S + off, len};
      const size_t lo = std::min(len, r * part);
      return {off + lo, std::min(len, lo + part) - lo};
    };
    be_.zero(stage);
    for (size_t r = 0; r < W; r++)
      if (const auto [g, cnt] = row(r); cnt)
        be_.convert(stage.slice(r * part, cnt), grads_.slice(g, cnt), Rounding{});
    be_.wire_encode(stage.slice(0, W * part), part, f, send.slice(0, W * bytes));
    exchange(send.slice(0, W * bytes), recv.slice(0, W * bytes), bytes, false);
    be_.wire_sum(recv.slice(0, W * bytes), part, f, sum.slice(0, part));
    if (sharded_) {
      be_.convert(grads_.slice(shard_begin_ + off, len), sum.slice(0, len), Rounding{});
      continue;
    }
    // Every rank's sums back to every rank, encoded again.
    be_.wire_encode(sum.slice(0, part), part, f, send.slice(0, bytes));
    exchange(send.slice(0, bytes), recv.slice(0, W * bytes), bytes, true);
    be_.wire_decode(recv.slice(0, W * bytes), part, f, stage.slice(0, W * part));
    for (size_t r = 0; r < W; r++)
      if (const auto [g, cnt] = row(r); cnt)
        be_.convert(grads_.slice(g, cnt), stage.slice(r * part, cnt), Rounding{});
  }
  for (Tensor t : {stage, sum, send, recv}) be_.free(t);
}

double GPT::grad_norm() {
  double ss = be_.sum_squares(grads_.slice(shard_begin_, shard_size_));
  if (sharded_) dp_.comm->all_reduce_sum(&ss, 1);
  return std::sqrt(ss);
}

GradCheck GPT::check_grads(double loss_scale) {
  be_.set_scope(-1, StepPhase::Optimizer);
  if (!sharded_) return be_.unscale_check_norm(grads_.slice(0, num_params_), loss_scale);
  // ZeRO-1: only this rank's shard holds summed gradients; the squares are summed over the
  // shards (a non-finite value anywhere makes every rank's sum non-finite).
  double ss = be_.sum_squares(grads_.slice(shard_begin_, shard_size_));
  dp_.comm->all_reduce_sum(&ss, 1);
  GradCheck g;
  g.norm = std::sqrt(ss) / loss_scale;
  g.finite = std::isfinite(g.norm);
  return g;
}

void GPT::device_decided_step(const LossScaleState& st, const LossScaleParams& p, double clip,
                              const AdamWArgs& args) {
  if (sharded_) throw Error("the device loss-scale decision needs unsharded gradients");
  be_.set_scope(-1, StepPhase::Optimizer);
  be_.device_decide_step(grads_.slice(0, num_params_), st, p, clip);
  adamw_step(args, true);
}

// None where the parameters are sharded (a rank's shard may hold part of a weight, whose amax
// would then need the ranks' max) or no linear reads its weight at a current per-tensor scale.
WeightAmax GPT::weight_amax_in(size_t lo, size_t n) const {
  WeightAmax w;
  if (!fp8_ || sharded_) return w;
  using LQ = LinearQuantizers;
  static constexpr int kWeight[LQ::kLinears] = {QKVW, ATTPROJW, FCW, FCPROJW};
  const auto sizes = param_sizes(cfg_);
  for (int linear = 0; linear < LQ::kLinears; linear++) {
    const int t = kWeight[linear];
    size_t off = 0;
    for (int i = 0; i < t; i++) off += sizes[i];
    if (off < lo || off + sizes[t] > lo + n || !fp8_->weight_amax_wanted(linear)) continue;
    w.lo[w.n] = off - lo;
    w.seg_len[w.n] = sizes[t] / size_t(cfg_.n_layer);
    w.segs[w.n] = cfg_.n_layer;
    w.slot0[w.n] = linear;  // layer 0's; layer l's is l kLinears + linear
    w.slot_step[w.n++] = LQ::kLinears;
  }
  return w;
}

void GPT::adamw_step(const AdamWArgs& args, bool decided) {
  be_.set_scope(-1, StepPhase::Optimizer);
  if (moment_block_of(moments_)) return adamw_step_blocked(args, decided);
  // Each parameter tensor's part of this rank's shard (all of it without sharding).
  auto sizes = param_sizes(cfg_);
  const size_t lo_shard = shard_begin_, hi_shard = shard_begin_ + shard_count();
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t lo = std::max(off, lo_shard), hi = std::min(off + sizes[i], hi_shard);
    off += sizes[i];
    if (lo >= hi) continue;
    AdamWArgs a = args;
    a.m_format = moments_.m;
    a.v_format = moments_.v;
    a.master = master_format_;
    if (!param_decays(i)) a.weight_decay = 0;
    a.rounding.offset = args.rounding.offset + lo;
    const size_t n = hi - lo, k = lo - lo_shard;
    a.weight_amax = weight_amax_in(lo, n);
    // The fp32 master, or bf16-kahan's compensation, or nothing (bf16-sr).
    const Tensor w = master_ ? master_.slice(k, n) : comp_ ? comp_.slice(k, n) : Tensor{};
    if (decided)
      be_.adamw_decided(params_.slice(lo, n), w, grads_.slice(lo, n), m_.slice(k, n),
                        v_.slice(k, n), a);
    else
      be_.adamw(params_.slice(lo, n), w, grads_.slice(lo, n), m_.slice(k, n), v_.slice(k, n), a);
  }
  if (sharded_) gather_params();
}

// FP8 moments: the whole shard in one call (a block may span two parameter tensors), the
// tensors that take weight decay named by their ranges. The padding beyond the parameters
// (last shard) is updated too: zero gradients, weights and moments, which stay zero.
void GPT::adamw_step_blocked(const AdamWArgs& args, bool decided) {
  AdamWArgs a = args;
  a.m_format = moments_.m;
  a.v_format = moments_.v;
  a.master = master_format_;
  a.m_meta = m_meta_;
  a.v_meta = v_meta_;
  a.rounding.offset = args.rounding.offset + shard_begin_;
  auto sizes = param_sizes(cfg_);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t lo = std::max(off, shard_begin_),
                 hi = std::min(off + sizes[i], shard_begin_ + shard_size_);
    off += sizes[i];
    if (lo >= hi || !param_decays(i)) continue;
    if (a.decay.n == DecayRanges::kMax) throw Error("adamw: too many weight-decay ranges");
    a.decay.lo[a.decay.n] = lo - shard_begin_;
    a.decay.hi[a.decay.n++] = hi - shard_begin_;
  }
  if (a.decay.n == 0) a.weight_decay = 0;  // no decaying tensor in this shard
  a.weight_amax = weight_amax_in(shard_begin_, shard_size_);
  const Tensor w = master_ ? master_ : comp_ ? comp_ : Tensor{};
  const Tensor p = params_.slice(shard_begin_, shard_size_),
               g = grads_.slice(shard_begin_, shard_size_);
  if (decided)
    be_.adamw_decided(p, w, g, m_, v_, a);
  else
    be_.adamw(p, w, g, m_, v_, a);
  if (sharded_) gather_params();
}

}  // namespace tg
