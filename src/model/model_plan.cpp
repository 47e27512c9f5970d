// model_plan.cpp: what a model of a given shape needs before it exists: its parameter
// tensors' sizes and names, the bytes of memory a run plans for (weights, master, gradients,
// optimizer moments, activations, communication staging), the bytes a step sends between ranks,
// its FLOPs per token, and the ZeRO-1 shard size. GPT (model.cpp) allocates what these count:
// where the two must agree, the comments say "must mirror" and a test checks it.
#include <algorithm>

#include "model.h"
#include "src/comm/comm.h"
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
  // att(B,NH,T,T) in the compute type, or with lse attention lse(B,NH,T) in the statistics.
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

}  // namespace tg
