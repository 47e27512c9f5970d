// model.cpp: the GPT model on a backend: its tensors allocated (parameters, gradients, master
// weights and moments on this rank's shard, activations laid out for (B, T)), random
// initialisation, and the forward and backward passes block by block, with each linear layer
// through its precision recipe (quantized_linear.h). Plans of its memory: model_plan.cpp;
// parameters in and out: model_params.cpp; gradients and the optimizer step: model_grads.cpp.
#include "model.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "host_copy.h"
#include "quantized_linear.h"
#include "src/base/host_memory.h"
#include "src/base/rng.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/numerics/moment_block.h"

namespace tg {

GPT::GPT(const GPTConfig& cfg, Backend& be, DType dtype, DataParallel dp,
         const MomentFormats& moments, MasterFormat master)
    : cfg_(cfg),
      be_(be),
      dtype_(dtype),
      master_dtype_(dtype == DType::F64 ? DType::F64 : DType::F32),
      dp_(dp),
      moments_(moments),
      master_format_(master),
      lse_(be.attention_saves_lse(cfg.n_embd / cfg.n_head, dtype)) {
  if (dtype_ != DType::F32 && dtype_ != DType::BF16 && dtype_ != DType::F16 && dtype_ != DType::F64)
    throw Error(strf("a model cannot compute in %s", dtype_name(dtype_)));
  if (dtype_ == DType::F64 && !(moment_is_plain(moments.m) && moment_is_plain(moments.v)))
    throw Error("an fp64 model keeps its Adam moments in fp64");
  if (master_in_weights(master) && dtype_ != DType::BF16)
    throw Error(strf("%s master weights are the bf16 weights: a model computing in %s has none",
                     master_format_name(master), dtype_name(dtype_)));
  auto sizes = param_sizes(cfg_);
  num_params_ = num_parameters(cfg_);
  const int world = dp_.comm ? dp_.comm->world() : 1;
  // With a communicator the collectives run even for one rank (tests use that); the
  // training loop passes none to a single process.
  sharded_ = dp_.zero && dp_.comm;
  if (sharded_ && dtype_ == DType::F64) throw Error("ZeRO-1 sharding needs an fp32 master");
  shard_size_ = sharded_ ? zero_shard_size(num_params_, world, moments_) : num_params_;
  shard_begin_ = sharded_ ? size_t(dp_.comm->rank()) * shard_size_ : 0;
  padded_params_ = sharded_ ? shard_size_ * size_t(world) : num_params_;
  AllocPurpose purpose("the weights, gradients, master weights and Adam moments");
  params_ = be_.alloc(dtype_, padded_params_);
  grads_ = be_.alloc(dtype_, padded_params_);
  // In fp32 the master weights are the compute weights (under ZeRO-1: this rank's shard);
  // bf16 master weights are the bf16 weights, with a compensation for bf16-kahan.
  if (master_format_ == MasterFormat::FP32)
    master_ = dtype_ == master_dtype_ ? params_.slice(shard_begin_, shard_size_)
                                      : be_.alloc(master_dtype_, shard_size_);
  if (master_format_ == MasterFormat::BF16Kahan) comp_ = be_.alloc(DType::BF16, shard_size_);
  m_ = be_.alloc(moment_dtype(dtype_, moments_.m), shard_size_);
  v_ = be_.alloc(moment_dtype(dtype_, moments_.v), shard_size_);
  // FP8 moments: a block's meta, zero = an all-zero block's (codes 0, any normalizer).
  for (auto [meta, f] : {std::pair{&m_meta_, moments_.m}, std::pair{&v_meta_, moments_.v}})
    if (moment_is_blocked(f))
      *meta = be_.alloc(DType::F32, moment_blocks(shard_size_, f.block) * moment_meta_words(f));
  for (Tensor t : {params_, grads_, master_, m_, v_, comp_, m_meta_, v_meta_})
    if (t) be_.zero(t);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    param_views_[i] = params_.slice(off, sizes[i]);
    grad_views_[i] = grads_.slice(off, sizes[i]);
    off += sizes[i];
  }
}

GPT::~GPT() {
  if (master_ && dtype_ != master_dtype_) be_.free(master_);
  for (Tensor t :
       {params_, grads_, m_, v_, comp_, m_meta_, v_meta_, act_buf_, stat_buf_, tokens_, targets_})
    if (t) be_.free(t);
}

void GPT::init_random(uint64_t seed) {
  auto sizes = param_sizes(cfg_);
  std::vector<double> host(num_params_, 0.0);
  const double std_base = 0.02, std_resid = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    Rng rng = Rng::derive(seed, 0x494E4954ull /*"INIT"*/, uint64_t(i));
    double* p = host.data() + off;
    if (i == LN1W || i == LN2W || i == LNFW) {
      for (size_t k = 0; k < sizes[i]; k++) p[k] = 1.0;
    } else if (param_decays(i)) {
      double s = (i == ATTPROJW || i == FCPROJW) ? std_resid : std_base;
      // Only the real vocabulary rows of wte are drawn; the padding stays zero.
      size_t n = i == WTE ? size_t(cfg_.vocab_size) * cfg_.n_embd : sizes[i];
      for (size_t k = 0; k < n; k++) p[k] = float(rng.normal() * s);
    }
    off += sizes[i];
  }
  set_params(host);
}

void GPT::ensure_acts(int B, int T) {
  auto need = layout_acts(B, T, nullptr);
  AllocPurpose purpose("the activations");
  if (need.first > act_capacity_ || need.second > stat_capacity_) {
    if (act_buf_) be_.free(act_buf_);
    if (stat_buf_) be_.free(stat_buf_);
    act_buf_ = be_.alloc(dtype_, need.first);
    stat_buf_ = be_.alloc(master_dtype_, need.second);
    act_capacity_ = need.first;
    stat_capacity_ = need.second;
    B_ = T_ = 0;
  }
  size_t BT = size_t(B) * T;
  if (BT > tok_capacity_) {
    if (tokens_) be_.free(tokens_);
    if (targets_) be_.free(targets_);
    tokens_ = be_.alloc(DType::I32, BT);
    targets_ = be_.alloc(DType::I32, BT);
    tok_capacity_ = BT;
  }
  if (B != B_ || T != T_) {
    layout_acts(B, T, &acts_);
    B_ = B;
    T_ = T;
  }
}

void GPT::take_amaxes(bool backward, bool training) {
  if (!fp8_ || fp8_->block_scaled()) return;
  const int n = cfg_.n_layer * LinearQuantizers::kLinears;
  const std::vector<float> amax = be_.take_amaxes(n);
  if (!training) return;
  fp8_->record_pass(amax, backward);
}

std::pair<size_t, size_t> GPT::layout_acts(int B, int T, Acts* out) {
  size_t BT = size_t(B) * T, C = cfg_.n_embd, L = cfg_.n_layer;
  size_t Vp = cfg_.padded_vocab_size, att = att_elems(B, T);
  size_t off = 0, soff = 0;
  Acts a;
  auto take = [&](Tensor& t, size_t n) {  // compute-type activations
    if (out) t = act_buf_.slice(off, n);
    off += n;
  };
  auto stat = [&](Tensor& t, size_t n) {  // fp32 statistics, logits, losses
    if (out) t = stat_buf_.slice(soff, n);
    soff += n;
  };
  take(a.encoded, BT * C);
  take(a.ln1, L * BT * C);
  stat(a.ln1_mean, L * BT);
  stat(a.ln1_rstd, L * BT);
  take(a.qkv, L * BT * 3 * C);
  take(a.atty, L * BT * C);
  if (lse_)
    stat(a.att, L * att);  // lse(B,NH,T) per layer (attention keeping lse)
  else
    take(a.att, L * att);
  take(a.attproj, L * BT * C);
  take(a.residual2, L * BT * C);
  take(a.ln2, L * BT * C);
  stat(a.ln2_mean, L * BT);
  stat(a.ln2_rstd, L * BT);
  take(a.fch, L * BT * 4 * C);
  take(a.fch_gelu, L * BT * 4 * C);
  take(a.fcproj, L * BT * C);
  take(a.residual3, L * BT * C);
  take(a.lnf, BT * C);
  stat(a.lnf_mean, BT);
  stat(a.lnf_rstd, BT);
  stat(a.logits, BT * Vp);
  stat(a.losses, BT);
  take(a.dresidual, BT * C);
  take(a.dln, BT * C);
  take(a.dqkv, BT * 3 * C);
  take(a.datty, BT * C);
  take(a.dfch, BT * 4 * C);
  take(a.dfch_gelu, BT * 4 * C);
  if (out) *out = a;
  return {off, soff};
}

// Layer l of forward(): from its residual stream (the encoder's output, or the layer
// before's) to its own, with ln1 of the next layer (or lnf after the last) fused in.
void GPT::block_forward(int l, int B, int T, bool training) {
  const int BT = B * T, C = cfg_.n_embd, NH = cfg_.n_head, L = cfg_.n_layer;
  const size_t btc = size_t(BT) * C, att = att_elems(B, T);
  const auto& P = param_views_;
  Acts& a = acts_;
  Tensor residual = l == 0 ? a.encoded : a.residual3.slice((l - 1) * btc, btc);
  Tensor ln1 = a.ln1.slice(l * btc, btc), qkv = a.qkv.slice(l * 3 * btc, 3 * btc);
  Tensor atty = a.atty.slice(l * btc, btc), attl = a.att.slice(l * att, att);
  Tensor attproj = a.attproj.slice(l * btc, btc), res2 = a.residual2.slice(l * btc, btc);
  Tensor ln2 = a.ln2.slice(l * btc, btc), fch = a.fch.slice(l * 4 * btc, 4 * btc);
  Tensor fchg = a.fch_gelu.slice(l * 4 * btc, 4 * btc);
  Tensor fcproj = a.fcproj.slice(l * btc, btc), res3 = a.residual3.slice(l * btc, btc);
  be_.set_scope(l, StepPhase::Forward);
  // The ops that write a quantized linear's input take its amax for it where its recipe asks
  // (input_amax: current per-tensor scales), so that its quantizer reads the input once.
  using LQ = LinearQuantizers;
  auto amax_for = [&](int layer, int lin) { return input_amax({fp8_, layer, lin}); };
  // Later layers' ln1 (and lnf) run fused with the residual add that ends the layer before.
  if (l == 0)
    be_.layernorm_forward(ln1, a.ln1_mean.slice(0, BT), a.ln1_rstd.slice(0, BT), residual,
                          P[LN1W].slice(0, C), P[LN1B].slice(0, C), BT, C, amax_for(l, LQ::QKV));
  linear_forward(l, LinearQuantizers::QKV, qkv, ln1,
                 P[QKVW].slice(size_t(l) * 3 * C * C, size_t(3) * C * C),
                 P[QKVB].slice(l * 3 * C, 3 * C), BT, C, 3 * C, training);
  if (lse_)
    be_.attention_forward_lse(atty, attl, qkv, B, T, C, NH, amax_for(l, LQ::ATTPROJ));
  else
    be_.attention_forward(atty, attl, qkv, B, T, C, NH, amax_for(l, LQ::ATTPROJ));
  linear_forward(l, LinearQuantizers::ATTPROJ, attproj, atty,
                 P[ATTPROJW].slice(size_t(l) * C * C, size_t(C) * C), P[ATTPROJB].slice(l * C, C),
                 BT, C, C, training);
  be_.residual_layernorm_forward(res2, ln2, a.ln2_mean.slice(l * BT, BT),
                                 a.ln2_rstd.slice(l * BT, BT), residual, attproj,
                                 P[LN2W].slice(l * C, C), P[LN2B].slice(l * C, C), BT, C,
                                 amax_for(l, LQ::FC));
  if (fp8_ && fp8_->layer_in_fp8(l)) {
    linear_forward(l, LinearQuantizers::FC, fch, ln2,
                   P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                   P[FCB].slice(l * 4 * C, 4 * C), BT, C, 4 * C, training);
    be_.gelu_forward(fchg, fch, 4 * btc, amax_for(l, LQ::FCPROJ));
  } else {
    if (training) {
      probe_take(l, LinearQuantizers::FC, kLinearInput, ln2, BT, C);
      probe_take(l, LinearQuantizers::FC, kLinearWeight,
                 P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C), 4 * C, C);
    }
    be_.matmul_gelu_forward(fch, fchg, ln2, P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                            P[FCB].slice(l * 4 * C, 4 * C), BT, C, 4 * C);
  }
  linear_forward(l, LinearQuantizers::FCPROJ, fcproj, fchg,
                 P[FCPROJW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                 P[FCPROJB].slice(l * C, C), BT, 4 * C, C, training);
  if (l + 1 < L)
    be_.residual_layernorm_forward(
        res3, a.ln1.slice((l + 1) * btc, btc), a.ln1_mean.slice((l + 1) * BT, BT),
        a.ln1_rstd.slice((l + 1) * BT, BT), res2, fcproj, P[LN1W].slice((l + 1) * C, C),
        P[LN1B].slice((l + 1) * C, C), BT, C, amax_for(l + 1, LQ::QKV));
  else
    be_.residual_layernorm_forward(res3, a.lnf, a.lnf_mean, a.lnf_rstd, res2, fcproj, P[LNFW],
                                   P[LNFB], BT, C);
}

double GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
  if (!targets) {
    forward_logits(inputs, nullptr, B, T, dloss);
    return NAN;
  }
  if (!queued_losses_.empty())
    throw Error("GPT::forward: forward_queued's losses have not been taken (take_losses)");
  forward_queued(inputs, targets, B, T, dloss);
  return take_losses().front();
}

void GPT::forward_queued(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
  if (!targets) throw Error("GPT::forward_queued needs targets");
  forward_logits(inputs, targets, B, T, dloss);
  if (acts_.losses.dtype != DType::F32 && acts_.losses.dtype != DType::F64)
    throw Error("GPT::forward_queued: losses are fp32 or fp64");
  be_.queue_read(acts_.losses.slice(0, size_t(B) * T));
  queued_losses_.push_back({acts_.losses.dtype, B * T});
}

std::vector<double> GPT::take_losses() {
  const std::vector<std::vector<char>> reads = be_.take_reads();
  if (reads.size() != queued_losses_.size())
    throw Error(strf("GPT::take_losses: %zu reads for %zu queued losses", reads.size(),
                     queued_losses_.size()));
  std::vector<double> means;
  for (size_t i = 0; i < reads.size(); i++) {
    const auto [dtype, rows] = queued_losses_[i];
    double sum = 0;  // in row order, in double: the loss every mode has always reported
    for (int r = 0; r < rows; r++) {
      if (dtype == DType::F64) {
        double x;
        std::memcpy(&x, reads[i].data() + size_t(r) * 8, 8);
        sum += x;
      } else {
        float x;
        std::memcpy(&x, reads[i].data() + size_t(r) * 4, 4);
        sum += double(x);
      }
    }
    means.push_back(sum / rows);
  }
  queued_losses_.clear();
  return means;
}

// The forward pass; with targets, the losses (and with dloss != 0 dlogits) in acts_.
void GPT::forward_logits(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
  if (T > cfg_.max_seq_len)
    throw Error(strf("sequence of %d tokens exceeds max_seq_len %d", T, cfg_.max_seq_len));
  for (int i = 0; i < B * T; i++)
    if (inputs[i] < 0 || inputs[i] >= cfg_.vocab_size)
      throw Error(strf("token %d out of range for vocab_size %d", inputs[i], cfg_.vocab_size));
  ensure_acts(B, T);
  const bool training = dloss != 0;
  const int BT = B * T, C = cfg_.n_embd, L = cfg_.n_layer;
  const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size;
  Tensor tok = tokens_.slice(0, BT), tgt = targets_.slice(0, BT);
  be_.set_scope(-1, StepPhase::Forward);
  be_.upload(tok, inputs);
  const auto& P = param_views_;
  Acts& a = acts_;

  be_.encoder_forward(a.encoded, tok, P[WTE], P[WPE], B, T, C);
  for (int l = 0; l < L; l++) block_forward(l, B, T, training);
  be_.set_scope(-1, StepPhase::Forward);
  be_.matmul_forward(a.logits, a.lnf, P[WTE], Tensor{}, BT, C, Vp);
  have_dlogits_ = false;
  if (!targets) {
    take_amaxes(false, false);
    return;
  }

  for (int i = 0; i < BT; i++)
    if (targets[i] < 0 || targets[i] >= V)
      throw Error(strf("target %d out of range for vocab_size %d", targets[i], V));
  be_.upload(tgt, targets);
  // The loss from the fp32 logits; their gradient in the compute type, in their own rows
  // (dlogits_view), for the lm_head's backward GEMMs in that type.
  be_.classifier(a.logits, a.losses, tgt, dlogits_view(a.logits, dtype_), dloss / float(BT), BT, V,
                 Vp);
  have_dlogits_ = dloss != 0;
  take_amaxes(false, training);
}

void GPT::backward() {
  if (!have_dlogits_) throw Error("backward() needs a forward pass with targets and dloss != 0");
  const int B = B_, T = T_, BT = B * T, C = cfg_.n_embd, NH = cfg_.n_head, L = cfg_.n_layer;
  const int Vp = cfg_.padded_vocab_size;
  const size_t btc = size_t(BT) * C, att = att_elems(B, T);
  const auto& P = param_views_;
  const auto& G = grad_views_;
  Acts& a = acts_;
  Tensor dres = a.dresidual, dln = a.dln;

  be_.set_scope(-1, StepPhase::Backward);
  be_.lm_head_backward(dln, G[WTE], dlogits_view(a.logits, dtype_), a.lnf, P[WTE], BT, C, Vp);
  be_.zero(dres);
  Tensor last = a.residual3.slice((L - 1) * btc, btc);
  be_.layernorm_backward(dres, G[LNFW], G[LNFB], dln, last, P[LNFW], a.lnf_mean, a.lnf_rstd, BT, C);
  for (int l = L - 1; l >= 0; l--) {
    Tensor residual = l == 0 ? a.encoded : a.residual3.slice((l - 1) * btc, btc);
    Tensor ln1 = a.ln1.slice(l * btc, btc), qkv = a.qkv.slice(l * 3 * btc, 3 * btc);
    Tensor atty = a.atty.slice(l * btc, btc), attl = a.att.slice(l * att, att);
    Tensor res2 = a.residual2.slice(l * btc, btc), ln2 = a.ln2.slice(l * btc, btc);
    Tensor fch = a.fch.slice(l * 4 * btc, 4 * btc);
    Tensor fchg = a.fch_gelu.slice(l * 4 * btc, 4 * btc);
    be_.set_scope(l, StepPhase::Backward);
    // residual3 = residual2 + fcproj: dres is the gradient of both.
    linear_backward(l, LinearQuantizers::FCPROJ, a.dfch_gelu,
                    G[FCPROJW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                    G[FCPROJB].slice(l * C, C), dres, fchg,
                    P[FCPROJW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C), BT, 4 * C, C);
    be_.gelu_backward(a.dfch, fch, a.dfch_gelu, 4 * btc);
    linear_backward(l, LinearQuantizers::FC, dln,
                    G[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                    G[FCB].slice(l * 4 * C, 4 * C), a.dfch, ln2,
                    P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C), BT, C, 4 * C);
    be_.layernorm_backward(dres, G[LN2W].slice(l * C, C), G[LN2B].slice(l * C, C), dln, res2,
                           P[LN2W].slice(l * C, C), a.ln2_mean.slice(l * BT, BT),
                           a.ln2_rstd.slice(l * BT, BT), BT, C);
    // residual2 = residual + attproj: dres is now the gradient of both.
    linear_backward(l, LinearQuantizers::ATTPROJ, a.datty,
                    G[ATTPROJW].slice(size_t(l) * C * C, size_t(C) * C),
                    G[ATTPROJB].slice(l * C, C), dres, atty,
                    P[ATTPROJW].slice(size_t(l) * C * C, size_t(C) * C), BT, C, C);
    if (lse_)
      be_.attention_backward_lse(a.dqkv, a.datty, qkv, atty, attl, B, T, C, NH);
    else
      be_.attention_backward(a.dqkv, a.datty, qkv, attl, B, T, C, NH);
    linear_backward(l, LinearQuantizers::QKV, dln,
                    G[QKVW].slice(size_t(l) * 3 * C * C, size_t(3) * C * C),
                    G[QKVB].slice(l * 3 * C, 3 * C), a.dqkv, ln1,
                    P[QKVW].slice(size_t(l) * 3 * C * C, size_t(3) * C * C), BT, C, 3 * C);
    be_.layernorm_backward(dres, G[LN1W].slice(l * C, C), G[LN1B].slice(l * C, C), dln, residual,
                           P[LN1W].slice(l * C, C), a.ln1_mean.slice(l * BT, BT),
                           a.ln1_rstd.slice(l * BT, BT), BT, C);
  }
  be_.set_scope(-1, StepPhase::Backward);
  be_.encoder_backward(G[WTE], G[WPE], dres, tokens_.slice(0, BT), B, T, C);
  take_amaxes(true, true);
  have_dlogits_ = false;
  if (grad_acc_) fold_grads();
}

void GPT::probe_take(int l, int lin, int operand, Tensor t, int rows, int cols) {
  if (!probe_) return;
  const std::unique_ptr<OperandView> v = be_.operand_view(t, rows, cols);
  if (!v)
    throw Error(
        strf("the %s backend measures no operands (precision.mode=auto, quantization "
             "telemetry, channel smoothing)",
             be_.name().c_str()));
  probe_->take(l, lin, operand, *v);
}

void GPT::linear_forward(int l, int lin, Tensor out, Tensor inp, Tensor w, Tensor b, int N, int C,
                         int OC, bool training) {
  if (training) {
    probe_take(l, lin, kLinearInput, inp, N, C);
    probe_take(l, lin, kLinearWeight, w, OC, C);
  }
  quantized_linear_forward(be_, {fp8_, l, lin}, out, inp, w, b, N, C, OC);
}

void GPT::linear_backward(int l, int lin, Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                          Tensor inp, Tensor w, int N, int C, int OC) {
  probe_take(l, lin, kLinearGrad, dout, N, OC);
  quantized_linear_backward(be_, {fp8_, l, lin}, dinp, dw, db, dout, inp, w, N, C, OC);
}

std::vector<TelemetryTensor> GPT::telemetry_tensors() const {
  const Acts& a = acts_;
  const int L = cfg_.n_layer;
  std::vector<TelemetryTensor> t = {{"act/encoded", a.encoded, 0},
                                    {"act/ln1", a.ln1, L},
                                    {"act/qkv", a.qkv, L},
                                    {"act/att", a.att, L},
                                    {"act/atty", a.atty, L},
                                    {"act/attproj", a.attproj, L},
                                    {"act/residual2", a.residual2, L},
                                    {"act/ln2", a.ln2, L},
                                    {"act/fch", a.fch, L},
                                    {"act/fch_gelu", a.fch_gelu, L},
                                    {"act/fcproj", a.fcproj, L},
                                    {"act/residual3", a.residual3, L},
                                    {"act/lnf", a.lnf, 0},
                                    {"dact/dresidual", a.dresidual, 0},
                                    {"dact/dln", a.dln, 0},
                                    {"dact/dqkv", a.dqkv, 0},
                                    {"dact/datty", a.datty, 0},
                                    {"dact/dfch", a.dfch, 0},
                                    {"dact/dfch_gelu", a.dfch_gelu, 0}};
  for (int i = 0; i < kNumParamTensors; i++) {
    const bool layered = i != WTE && i != WPE && i != LNFW && i != LNFB;
    t.push_back({std::string("grad/") + param_name(i), grad_views_[i], layered ? L : 0});
  }
  return t;
}

GPTConfig model_config(const Config& cfg) {
  return gpt_config(cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                    cfg.model.max_seq_len);
}

}  // namespace tg
