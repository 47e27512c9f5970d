// model_params.cpp: the GPT's parameters in and out: set from the host (fp64, fp32, a bf16
// master, its compensation), re-rounded from the master weights, all-gathered across ZeRO-1
// shards (plain or in fp8 blocks), and copied back to the host for checkpoints and tests
// (parameters, gradients, master and moment shards).
#include <algorithm>
#include <utility>

#include "host_copy.h"
#include "model.h"
#include "src/base/host_memory.h"
#include "src/comm/comm.h"
#include "src/numerics/moment_block.h"

namespace tg {

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

}  // namespace tg
