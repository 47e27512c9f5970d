#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "quantized_linear.h"
#include "src/base/host_memory.h"
#include "src/base/rng.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/numerics/moment_block.h"

namespace tg {

std::array<size_t, kNumParamTensors> param_sizes(const GPTConfig& c) {
  size_t C = c.n_embd, L = c.n_layer, Vp = c.padded_vocab_size, T = c.max_seq_len;
  // clang-format off
  return {Vp * C,        T * C,          // wte wpe
          L * C,         L * C,          // ln1w ln1b
          L * 3 * C * C, L * 3 * C,      // qkvw qkvb
          L * C * C,     L * C,          // attprojw attprojb
          L * C,         L * C,          // ln2w ln2b
          L * 4 * C * C, L * 4 * C,      // fcw fcb
          L * C * 4 * C, L * C,          // fcprojw fcprojb
          C,             C};             // lnfw lnfb
  // clang-format on
}

size_t num_parameters(const GPTConfig& c) {
  size_t n = 0;
  for (size_t s : param_sizes(c)) n += s;
  return n;
}

const char* param_name(int i) {
  static const char* names[kNumParamTensors] = {
      "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};
  return names[i];
}

bool param_decays(int i) {
  return i == WTE || i == WPE || i == QKVW || i == ATTPROJW || i == FCW || i == FCPROJW;
}

std::pair<size_t, size_t> activation_elems(const GPTConfig& c, int B, int T, bool lse) {
  size_t BT = size_t(B) * T, C = c.n_embd, L = c.n_layer, NH = c.n_head;
  // att(B,NH,T,T) in the compute type, or with flash attention lse(B,NH,T) in the statistics.
  size_t att = lse ? 0 : size_t(B) * NH * T * T, lse_n = lse ? size_t(B) * NH * T : 0;
  // Must mirror GPT::layout_acts (checked by a test).
  size_t compute = BT * C                                              // encoded
                   + L * (BT * C * 7 + BT * 3 * C + att + BT * 8 * C)  // per layer
                   + BT * C                                            // lnf
                   + BT * C * 2 + BT * 3 * C + BT * C + BT * 8 * C;    // gradient scratch
  size_t stats = L * BT * 4 + L * lse_n + BT * 2 + BT * size_t(c.padded_vocab_size) + BT;
  return {compute, stats};
}

DType moment_dtype(DType dtype, const MomentFormat& f) {
  if (!moment_is_plain(f)) return f.dtype;
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

size_t wire_part(size_t len, size_t world, bool sharded) {
  return sharded ? len : (len + world - 1) / world;
}

MemoryPlan plan_memory(const GPTConfig& c, DType dtype, int B, int T, int zero_world,
                       bool attention_lse, int ranks, const MomentFormats& moments,
                       MasterFormat master, WireFormat grad_wire, bool fp32_grads,
                       bool fp8_weights) {
  const size_t n = num_parameters(c), x = dtype_size(dtype);
  const size_t m = dtype == DType::F64 ? 8 : 4;  // master / statistics element size
  const size_t shard = zero_world > 1 ? zero_shard_size(n, zero_world, moments) : n;
  const size_t padded = zero_world > 1 ? shard * size_t(zero_world) : n;
  MemoryPlan p;
  p.weights = padded * x;
  p.master = dtype == DType::F32 || dtype == DType::F64 ? 0
             : master_in_weights(master)                ? shard * master_format_info(master).bytes
                                                        : shard * m;
  p.grads = padded * x;
  // Mirrors GPT::set_fp32_grad_accumulation.
  const bool fp32_acc = fp32_grads && x == 2;
  if (fp32_acc) p.grads += padded * 4;
  for (const MomentFormat& f : {moments.m, moments.v})
    p.optimizer += moment_is_blocked(f) ? moment_blocked_bytes(shard, f)
                                        : shard * dtype_size(moment_dtype(dtype, f));
  auto a = activation_elems(c, B, T, attention_lse);
  p.activations = a.first * x + a.second * m + 2 * size_t(B) * T * 4;  // + token ids
  // Must mirror GPT::sync_grads and GPT::sync_grads_wire.
  if (ranks > 1 && grad_wire != WireFormat::FP32) {
    const size_t W = size_t(ranks), chunk = std::min(zero_world > 1 ? shard : n, kGradSyncChunk);
    const size_t part = wire_part(chunk, W, zero_world > 1);
    p.comm = (W + 1) * part * 4 + 2 * W * wire_bytes(part, grad_wire);
  } else if (ranks > 1) {
    const bool zero = zero_world > 1;
    if (dtype == DType::F32)
      p.comm = zero ? shard * 4 : 0;
    else if (!zero)
      p.comm = std::min(n, kGradSyncChunk) * 4;
    else
      p.comm = (size_t(ranks) + 1) * std::min(shard, kGradSyncChunk) * 4;
  }
  // The fold of each micro-step into the fp32 sums (GPT::fold_grads) stages through a chunk
  // of its own, never at the same time as the reduction's.
  if (fp32_acc) p.comm = std::max(p.comm, std::min(padded, kGradSyncChunk) * 4);
  // GPT::gather_params_fp8's staging, after the reduction's.
  if (fp8_weights && zero_world > 1) {
    const size_t W = size_t(zero_world), len = std::min(shard, kGradSyncChunk);
    const size_t bytes = wire_bytes(len, WireFormat::FP8E4M3);
    p.comm = std::max(p.comm, W * len * 4 + (W + 1) * bytes);
  }
  return p;
}

uint64_t plan_comm_bytes(const GPTConfig& c, DType dtype, int ranks, bool zero,
                         const MomentFormats& moments, WireFormat grad_wire, bool fp8_weights) {
  if (ranks <= 1) return 0;
  const size_t n = num_parameters(c), W = size_t(ranks);
  const size_t S = zero ? zero_shard_size(n, ranks, moments) : n, total = zero ? S : n;
  uint64_t bytes = zero ? ring_scatter_gather_bytes(uint64_t(S) * dtype_size(dtype) * W, ranks) : 0;
  if (zero && fp8_weights) {  // mirrors GPT::gather_params_fp8
    bytes = 0;
    for (size_t off = 0, step = std::min(S, kGradSyncChunk); off < S; off += step)
      bytes += (W - 1) * wire_bytes(std::min(step, S - off), WireFormat::FP8E4M3);
  }
  // Must mirror GPT::sync_grads and GPT::sync_grads_wire.
  if (grad_wire != WireFormat::FP32) {
    const size_t step = std::min(total, kGradSyncChunk);
    for (size_t off = 0; off < total; off += step) {
      const size_t len = std::min(step, total - off);
      bytes += uint64_t(zero ? 1 : 2) * (W - 1) * wire_bytes(wire_part(len, W, zero), grad_wire);
    }
    return bytes;
  }
  const size_t step = dtype == DType::F32 ? total : std::min(total, kGradSyncChunk);
  for (size_t off = 0; off < total; off += step) {
    const uint64_t len = std::min(step, total - off);
    bytes += zero ? ring_scatter_gather_bytes(len * W * 4, ranks)
                  : ring_all_reduce_bytes(len * 4, ranks);
  }
  return bytes;
}

double flops_per_token(const GPTConfig& c, int T) {
  // Weights: 2 FLOPs per multiply-add, times 3 for forward + two backward GEMMs. The
  // embedding lookup is not a matmul; the tied lm_head is (Vp x C).
  double C = c.n_embd, L = c.n_layer;
  double matmul_params = L * 12.0 * C * C + double(c.padded_vocab_size) * C;
  // Attention scores and weighted sum: 2 * T * C per layer per token forward (causal
  // halves it on average, counted in full as is customary for MFU).
  double attn = L * 2.0 * 2.0 * T * C;
  return 6.0 * matmul_params + 3.0 * attn;
}

int moment_block_of(const MomentFormats& moments) {
  if (moment_is_blocked(moments.m)) return moments.m.block;
  return moment_is_blocked(moments.v) ? moments.v.block : 0;
}

size_t zero_shard_size(size_t n, int world, const MomentFormats& moments) {
  const size_t s = (n + size_t(world) - 1) / size_t(world);
  const size_t align = std::max<size_t>(16, size_t(moment_block_of(moments)));  // powers of two
  return (s + align - 1) / align * align;
}

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

namespace {
template <typename Dst, typename Src>
std::vector<Dst> convert(const std::vector<Src>& v) {
  return std::vector<Dst>(v.begin(), v.end());
}
}  // namespace

void GPT::set_params(const std::vector<double>& p) {
  if (p.size() != num_params_) throw Error("set_params: wrong parameter count");
  if (master_dtype_ == DType::F64)
    be_.upload(master_, p.data());
  else
    set_params(convert<float>(p));
}

void GPT::set_params(const std::vector<float>& p) {
  if (p.size() != num_params_) throw Error("set_params: wrong parameter count");
  if (master_dtype_ == DType::F64) {
    be_.upload(master_, convert<double>(p).data());
    return;
  }
  if (master_in_weights(master_format_)) return set_bf16_master(p);
  if (!sharded_) {
    be_.upload(master_, p.data());
    refresh_params(Rounding{});
    return;
  }
  // Every rank has all of p: it keeps its shard as master weights and rounds all of it (in
  // fp32 the shard is a slice of the weights themselves).
  if (dtype_ == DType::F32) {
    be_.upload(params_.slice(0, num_params_), p.data());
  } else {
    std::vector<float> shard(shard_size_, 0.0f);
    std::copy(p.begin() + shard_begin_, p.begin() + shard_begin_ + shard_count(), shard.begin());
    be_.upload(master_, shard.data());
    Tensor wide = be_.alloc(DType::F32, num_params_);
    be_.upload(wide, p.data());
    be_.convert(params_.slice(0, num_params_), wide, Rounding{});
    be_.free(wide);
  }
}

// bf16 master weights: every rank has all of p and rounds it to nearest into the weights; a
// bf16-kahan model keeps the rounding error of its shard as the compensation.
void GPT::set_bf16_master(const std::vector<float>& p) {
  std::vector<uint16_t> w(padded_params_, 0), c(shard_size_, 0);
  for (size_t i = 0; i < num_params_; i++) w[i] = f32_to_bf16(p[i]);
  be_.upload(params_, w.data());
  if (!comp_) return;
  for (size_t i = 0; i < shard_count(); i++) {
    const size_t k = shard_begin_ + i;
    c[i] = f32_to_bf16(p[k] - bf16_to_f32(w[k]));
  }
  be_.upload(comp_, c.data());
}

void GPT::set_compensation(const std::vector<uint16_t>& codes) {
  if (!comp_) throw Error("set_compensation: the model keeps no compensation");
  if (codes.size() != shard_size_)
    throw Error(strf("set_compensation: %zu codes for a shard of %zu", codes.size(), shard_size_));
  be_.upload(comp_, codes.data());
}

void GPT::refresh_params(const Rounding& r) {
  // The weights are the master itself (fp32 models, bf16 master weights): nothing to round.
  if (dtype_ == master_dtype_ || !master_) return;
  Rounding rs = r;
  rs.offset += shard_begin_;  // random bits follow the parameter's global position
  be_.convert(params_.slice(shard_begin_, shard_size_), master_, rs);
  if (sharded_) gather_params();
}

size_t GPT::shard_count() const {
  return shard_begin_ >= num_params_ ? 0 : std::min(shard_size_, num_params_ - shard_begin_);
}

uint64_t GPT::take_comm_bytes() { return std::exchange(comm_bytes_, 0); }

void GPT::gather_params() {
  if (dp_.fp8_weights) return gather_params_fp8();
  const size_t bytes = shard_size_ * dtype_size(dtype_);
  comm_bytes_ += ring_scatter_gather_bytes(uint64_t(bytes) * dp_.comm->world(), dp_.comm->world());
  // In place: host memory (CPU backend) or device memory (a GPU backend with NCCL); else
  // through a host copy.
  if (be_.name() == "cpu" || dp_.comm->device_memory())
    return dp_.comm->all_gather_bytes(nullptr, params_.data, bytes);
  std::vector<char> host(params_.bytes());
  be_.download(host.data(), params_);
  dp_.comm->all_gather_bytes(nullptr, host.data(), bytes);
  be_.upload(params_, host.data());
}

// Each rank's updated shard encoded in fp8 blocks, a chunk at a time: every rank (this one too)
// decodes every shard's chunk into its compute weights, so that all ranks compute with the same
// weights.
void GPT::gather_params_fp8() {
  Comm& cm = *dp_.comm;
  const WireFormat f = WireFormat::FP8E4M3;
  const size_t W = size_t(cm.world()), S = shard_size_, step = std::min(S, kGradSyncChunk);
  const size_t row_bytes = wire_bytes(step, f);
  const bool direct = be_.name() == "cpu" || cm.device_memory();
  AllocPurpose purpose("the fp8 weight all-gather's staging");
  Tensor stage = be_.alloc(DType::F32, W * step);
  Tensor send = be_.alloc(DType::E4M3, row_bytes), recv = be_.alloc(DType::E4M3, W * row_bytes);
  for (size_t off = 0; off < S; off += step) {
    const size_t len = std::min(step, S - off), bytes = wire_bytes(len, f);
    be_.convert(stage.slice(0, len), params_.slice(shard_begin_ + off, len), Rounding{});
    be_.wire_encode(stage.slice(0, len), len, f, send.slice(0, bytes));
    comm_bytes_ += uint64_t(W - 1) * bytes;
    if (direct) {
      cm.all_gather_bytes(send.data, recv.data, bytes);
    } else {
      std::vector<uint8_t> hs(bytes), hr(W * bytes);
      be_.download(hs.data(), send.slice(0, bytes));
      cm.all_gather_bytes(hs.data(), hr.data(), bytes);
      be_.upload(recv.slice(0, W * bytes), hr.data());
    }
    be_.wire_decode(recv.slice(0, W * bytes), len, f, stage.slice(0, W * len));
    for (size_t r = 0; r < W; r++)
      be_.convert(params_.slice(r * S + off, len), stage.slice(r * len, len), Rounding{});
  }
  for (Tensor t : {stage, send, recv}) be_.free(t);
}

namespace {
// Any tensor as fp64 on the host (16-bit types are widened on the backend first).
std::vector<double> download_f64(Backend& be, Tensor t) {
  if (t.dtype == DType::F64) {
    std::vector<double> out(t.numel);
    be.download(out.data(), t);
    return out;
  }
  std::vector<float> tmp(t.numel);
  if (t.dtype == DType::F32) {
    be.download(tmp.data(), t);
  } else {
    Tensor wide = be.alloc(DType::F32, t.numel);
    be.convert(wide, t, Rounding{});
    be.download(tmp.data(), wide);
    be.free(wide);
  }
  return convert<double>(tmp);
}
// A bf16, fp16 or fp32 tensor widened on the host (no device scratch: the plan counts none).
std::vector<float> download_host_f32(Backend& be, Tensor t) {
  std::vector<float> out(t.numel);
  if (t.dtype == DType::F32) {
    be.download(out.data(), t);
    return out;
  }
  if (t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(strf("download_host_f32: a %s tensor", dtype_name(t.dtype)));
  std::vector<uint16_t> codes(t.numel);
  be.download(codes.data(), t);
  for (size_t i = 0; i < t.numel; i++)
    out[i] = t.dtype == DType::BF16 ? bf16_to_f32(codes[i]) : f16_to_f32(codes[i]);
  return out;
}
}  // namespace

std::vector<double> GPT::params_f64() {
  if (sharded_ || !master_) return convert<double>(params_f32());
  return download_f64(be_, master_);
}
std::vector<double> GPT::grads_f64() { return download_f64(be_, grads_.slice(0, num_params_)); }
std::vector<float> GPT::params_f32() {
  if (master_dtype_ == DType::F64) return convert<float>(params_f64());
  // bf16 master weights: the weights, whole on every rank.
  if (!master_) return download_host_f32(be_, params_.slice(0, num_params_));
  if (!sharded_) {
    std::vector<float> out(num_params_);
    be_.download(out.data(), master_);
    return out;
  }
  std::vector<float> mine(shard_size_), all(padded_params_);
  be_.download(mine.data(), master_);
  dp_.comm->all_gather(mine.data(), all.data(), shard_size_);
  all.resize(num_params_);
  return all;
}

std::vector<float> GPT::master_shard_f32() {
  if (master_) return convert<float>(download_f64(be_, master_));
  std::vector<float> w = download_host_f32(be_, params_.slice(shard_begin_, shard_size_));
  if (comp_) {
    const std::vector<float> c = download_host_f32(be_, comp_);
    for (size_t i = 0; i < w.size(); i++) w[i] += c[i];  // kahan_load's sum
  }
  return w;
}

std::vector<float> GPT::grads_shard_f32() {
  return download_host_f32(be_, grads_.slice(shard_begin_, shard_size_));
}

std::vector<float> GPT::moment_shard_f32(bool second) {
  const Tensor t = second ? v_ : m_;
  const MomentFormat& f = second ? moments_.v : moments_.m;
  if (moment_is_plain(f)) return convert<float>(download_f64(be_, t));
  std::vector<float> out(t.numel);
  if (moment_is_blocked(f)) {
    std::vector<uint8_t> codes(t.numel);
    const Tensor meta_t = second ? v_meta_ : m_meta_;
    std::vector<float> meta(meta_t.numel);
    be_.download(codes.data(), t);
    be_.download(meta.data(), meta_t);
    moment_decode_blocks(codes.data(), meta.data(), out.size(), f, out.data());
    return out;
  }
  std::vector<uint16_t> codes(t.numel);
  be_.download(codes.data(), t);
  for (size_t i = 0; i < codes.size(); i++) out[i] = moment_decode16(codes[i], f);
  return out;
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
  const int n = cfg_.n_layer * QuantState::kLinears;
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
    stat(a.att, L * att);  // lse(B,NH,T) per layer (flash attention)
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
  // Later layers' ln1 (and lnf) run fused with the residual add that ends the layer before.
  if (l == 0)
    be_.layernorm_forward(ln1, a.ln1_mean.slice(0, BT), a.ln1_rstd.slice(0, BT), residual,
                          P[LN1W].slice(0, C), P[LN1B].slice(0, C), BT, C);
  linear_forward(l, QuantState::QKV, qkv, ln1,
                 P[QKVW].slice(size_t(l) * 3 * C * C, size_t(3) * C * C),
                 P[QKVB].slice(l * 3 * C, 3 * C), BT, C, 3 * C, training);
  if (lse_)
    be_.attention_forward_lse(atty, attl, qkv, B, T, C, NH);
  else
    be_.attention_forward(atty, attl, qkv, B, T, C, NH);
  linear_forward(l, QuantState::ATTPROJ, attproj, atty,
                 P[ATTPROJW].slice(size_t(l) * C * C, size_t(C) * C), P[ATTPROJB].slice(l * C, C),
                 BT, C, C, training);
  be_.residual_layernorm_forward(res2, ln2, a.ln2_mean.slice(l * BT, BT),
                                 a.ln2_rstd.slice(l * BT, BT), residual, attproj,
                                 P[LN2W].slice(l * C, C), P[LN2B].slice(l * C, C), BT, C);
  if (fp8_ && fp8_->layer_in_fp8(l)) {
    linear_forward(l, QuantState::FC, fch, ln2,
                   P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                   P[FCB].slice(l * 4 * C, 4 * C), BT, C, 4 * C, training);
    be_.gelu_forward(fchg, fch, 4 * btc);
  } else {
    if (training) {
      probe_take(l, QuantState::FC, kLinearInput, ln2, BT, C);
      probe_take(l, QuantState::FC, kLinearWeight,
                 P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C), 4 * C, C);
    }
    be_.matmul_gelu_forward(fch, fchg, ln2, P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                            P[FCB].slice(l * 4 * C, 4 * C), BT, C, 4 * C);
  }
  linear_forward(l, QuantState::FCPROJ, fcproj, fchg,
                 P[FCPROJW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                 P[FCPROJB].slice(l * C, C), BT, 4 * C, C, training);
  if (l + 1 < L)
    be_.residual_layernorm_forward(
        res3, a.ln1.slice((l + 1) * btc, btc), a.ln1_mean.slice((l + 1) * BT, BT),
        a.ln1_rstd.slice((l + 1) * BT, BT), res2, fcproj, P[LN1W].slice((l + 1) * C, C),
        P[LN1B].slice((l + 1) * C, C), BT, C);
  else
    be_.residual_layernorm_forward(res3, a.lnf, a.lnf_mean, a.lnf_rstd, res2, fcproj, P[LNFW],
                                   P[LNFB], BT, C);
}

double GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
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
    return NAN;
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
  std::vector<double> losses = download_f64(be_, a.losses);
  double sum = 0;
  for (double x : losses) sum += x;
  return sum / BT;
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
    linear_backward(l, QuantState::FCPROJ, a.dfch_gelu,
                    G[FCPROJW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                    G[FCPROJB].slice(l * C, C), dres, fchg,
                    P[FCPROJW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C), BT, 4 * C, C);
    be_.gelu_backward(a.dfch, fch, a.dfch_gelu, 4 * btc);
    linear_backward(l, QuantState::FC, dln, G[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C),
                    G[FCB].slice(l * 4 * C, 4 * C), a.dfch, ln2,
                    P[FCW].slice(size_t(l) * 4 * C * C, size_t(4) * C * C), BT, C, 4 * C);
    be_.layernorm_backward(dres, G[LN2W].slice(l * C, C), G[LN2B].slice(l * C, C), dln, res2,
                           P[LN2W].slice(l * C, C), a.ln2_mean.slice(l * BT, BT),
                           a.ln2_rstd.slice(l * BT, BT), BT, C);
    // residual2 = residual + attproj: dres is now the gradient of both.
    linear_backward(l, QuantState::ATTPROJ, a.datty,
                    G[ATTPROJW].slice(size_t(l) * C * C, size_t(C) * C),
                    G[ATTPROJB].slice(l * C, C), dres, atty,
                    P[ATTPROJW].slice(size_t(l) * C * C, size_t(C) * C), BT, C, C);
    if (lse_)
      be_.attention_backward_lse(a.dqkv, a.datty, qkv, atty, attl, B, T, C, NH);
    else
      be_.attention_backward(a.dqkv, a.datty, qkv, attl, B, T, C, NH);
    linear_backward(l, QuantState::QKV, dln,
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
  const Tensor w = master_ ? master_ : comp_ ? comp_ : Tensor{};
  const Tensor p = params_.slice(shard_begin_, shard_size_),
               g = grads_.slice(shard_begin_, shard_size_);
  if (decided)
    be_.adamw_decided(p, w, g, m_, v_, a);
  else
    be_.adamw(p, w, g, m_, v_, a);
  if (sharded_) gather_params();
}

GPTConfig model_config(const Config& cfg) {
  return gpt_config(cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size,
                    cfg.model.max_seq_len);
}

}  // namespace tg
