// backend.h: the operations the model is written in, implemented once per device.
//
// The GPT forward/backward (model.cpp) is written once against this interface; the CPU
// backend (src/backends/cpu/) is the reference and the CUDA backend (kernels/) plugs in beside it,
// so both run the same graph op by op and can be compared op by op.
//
// Tensors of one op share an element type, except: layernorm mean/rstd, logits and losses are
// fp32 (fp64 in fp64 models) whatever the activations are; matmul_forward's output may be
// fp32 from 16-bit operands (the lm_head's logits); the classifier reads fp32 logits and
// writes the gradient in the compute type (dlogits_view). Conventions: weights are (out, in)
// row-major; N = rows (B*T). Gradients of parameters
// are accumulated (+=) so micro-batches add up; gradients of activations are written (=),
// except layernorm_backward and encoder_backward which add into dinp / dwte / dwpe, because
// the residual stream gathers gradients from two branches.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/attention_choice.h"
#include "src/base/common.h"
#include "src/numerics/adamw_math.h"
#include "src/numerics/loss_scaler.h"
#include "src/numerics/master_format.h"
#include "src/numerics/moment_format.h"
#include "src/numerics/operand_view.h"
#include "src/numerics/recipe.h"
#include "src/numerics/wire_format.h"

namespace tg {

// How a backend computes, from the config (cuda.*, precision.loss_scale.on_device): passed
// when the backend is made, recorded in config.json and every checkpoint's state.json.
struct BackendOptions {
  AttentionRequest attention = AttentionRequest::Cublas;  // fused: single-pass; cudnn: lse
  std::string cudnn_lib;           // cuda.cudnn_lib: the libcudnn file ("" searches)
  bool gemm_fallback = false;      // every GEMM through cuBLAS + our epilogue (cuda.gemm)
  bool gelu_epilogue = false;      // the MLP's GELU fused into cuBLASLt's epilogue
  bool device_loss_scale = false;  // the loss-scale decision on the device
};

// A view of backend memory: a pointer, an element type and a length. Not an owner.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  size_t numel = 0;

  size_t bytes() const { return numel * dtype_size(dtype); }
  Tensor slice(size_t offset, size_t n) const {
    return Tensor{static_cast<char*>(data) + offset * dtype_size(dtype), dtype, n};
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  explicit operator bool() const { return data != nullptr; }
};

// The lm_head's output gradient (dlogits) in type g, over the logits' own memory (N rows of Vp
// in the statistics type): the logits themselves when g is their type (fp32, fp64 models);
// for a 16-bit g, row n's Vp values in the first half of row n's fp32 bytes, so rows lie 2 Vp
// elements apart. The classifier writes it there and the lm_head's backward GEMMs read it in
// g like every other linear's gradient (tensor cores, no fp32 copies of their operands).
// Why there: `train_gpt memory` plans 8561 MiB for bf16 (and fp8) GPT-2 124M at 8 x 1024
// tokens with it, 9347 MiB with an N x Vp buffer of g of its own (+786 MiB); the fp32 logits
// are dead once the loss is taken. (Rows packed from the start, row n at byte 2 n Vp, would
// take no less memory and land on rows other threads have not read yet.) Before, the GPU
// widened the lm_head's 16-bit operands to fp32 instead: 343 MiB of scratch beyond the plan.
// A view d of N rows has row n at element n * (d.numel / N).
inline Tensor dlogits_view(Tensor logits, DType g) {
  if (g == logits.dtype) return logits;
  return Tensor{logits.data, g, logits.bytes() / dtype_size(g)};
}

// How a value is narrowed: to nearest even, or stochastically with random bits
// sr_hash(seed, offset + i) for element i (deterministic, the same on every backend).
struct Rounding {
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The linears' weights an adamw call writes, for a backend that takes each one's amax as it
// writes it (as InputAmax below, for the weights: the forward's quantizer then reads a weight
// at a current per-tensor scale once, not twice): range r is segs[r] weights of seg_len[r]
// elements from element lo[r] of the call on, weight s being linear slot0[r] + s *
// slot_step[r]'s (TensorScaling::slot). The amax stands for those elements until they are
// written again. A backend may ignore it; n = 0: none.
struct WeightAmax {
  static constexpr int kMax = 4;
  int n = 0;
  uint64_t lo[kMax] = {}, seg_len[kMax] = {};
  int segs[kMax] = {}, slot0[kMax] = {}, slot_step[kMax] = {};
};

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale;   // multiplies every gradient first (clipping, 1/loss-scale)
  int step;           // 1-based, for bias correction
  Rounding rounding;  // of the updated master weight into the compute copy
  // How m and v are stored (src/numerics/moment_format.h; the tensors' dtypes agree), and the
  // seeds of their stochastic rounding: element i of m draws sr_hash(m_seed, rounding.offset +
  // i), the index the weight's own rounding uses, so that every backend and every ZeRO-1
  // sharding draws the same bits. GPT::adamw_step sets the formats from the model's own.
  MomentFormat m_format{}, v_format{};
  uint64_t m_seed = 0, v_seed = 0;
  // Where the master weights live (src/numerics/master_format.h): an fp32 copy (the `master`
  // tensor of adamw), or the bf16 weights themselves (bf16-sr: `master` is unused and
  // `rounding` is stochastic; bf16-kahan: `master` is the bf16 compensation buffer).
  MasterFormat master = MasterFormat::FP32;
  // FP8 moments (src/numerics/moment_block.h): each block's meta, moment_meta_words floats per
  // block of the call (the call starts on a block boundary); empty for other formats.
  Tensor m_meta{}, v_meta{};
  DecayRanges decay{};  // which elements take weight_decay (all when decay.n = 0)
  WeightAmax weight_amax{};  // the linears' weights among the call's elements
};

// The operands of a per-tensor-scaled linear, in the order of its scales and amaxes.
enum TensorOperand { kTensorInput, kTensorWeight, kTensorGrad, kTensorOperands };

// Per-tensor scaling of one linear (the per-tensor recipes, fp8_tensor_recipe: one fp32 scale
// per operand, from a delayed amax history or the operand's current amax). Delayed scales come
// from the caller (LinearQuantizers keeps the histories on the host, where checkpoints and the
// ranks' reduction read them); the backend leaves each quantized operand's amax in the
// linear's slot for take_amaxes, so that a device never waits for the host inside a pass.
// A block-scaled recipe with a tensor scale over its groups (NVFP4) has a slot only: its
// tensor scale is its operands' current one, never delayed, and no history reads its amaxes.
struct TensorScaling {
  // The linear's slot (0 .. n_slots - 1): a per-tensor recipe's, or a block-scaled one's with a
  // tensor scale over its groups (has_tensor_scale_over_groups: NVFP4, which the CUDA backend
  // draws from amax words kept per slot); -1: none.
  int slot = -1;
  // Delayed sources: q = sat(x * scale[operand]); the backward takes the scales its forward
  // took for the input and the weight. Current sources ignore them and use
  // (fmax / amax) / 2^margin of the operand itself (the same in the forward and backward).
  float scale[kTensorOperands] = {1, 1, 1};
  int margin = 0;
};

// A quantized linear: the recipe of its three GEMMs (src/numerics/recipe.h: per-tensor,
// rows, blocks or tiles with their own scales), and the seed of the random bits its stochastic
// rounding and Hadamard signs draw (one per linear and micro-batch; each GEMM role and operand
// derives its own stream from it). Block-scaled operands take their scales from their current
// amax; per-tensor ones (`tensor`) as TensorScaling says, and report their amaxes back.
struct ScaledLinear {
  const QuantRecipe* recipe = nullptr;
  uint64_t seed = 0;
  TensorScaling tensor{};
};

// Whether linear q is per-tensor scaled (its slot's scales, amax histories): not a block-scaled
// recipe that takes a slot for its tensor scale alone.
inline bool per_tensor_scaled(const ScaledLinear& q) {
  return q.tensor.slot >= 0 && is_per_tensor(*q.recipe);
}

// Whether linear q reads operand o of its GEMMs at a current scale drawn from the tensor's
// amax (a per-tensor scale, NVFP4's tensor scale), the tensor as it lies (no smoothing, split
// channels or rotation): where it does, an amax taken before of the same values serves it (for
// the forward's input and weight, the op that writes them takes it: InputAmax below; AdamW for
// the weight, WeightAmax above), and the quantizer reads the operand once.
inline bool reads_at_current_amax(const ScaledLinear& q, const OperandRecipe& o) {
  const QuantRecipe& r = *q.recipe;
  return q.tensor.slot >= 0 && r.smooth.empty() && r.split_channels.empty() &&
         scales_from_tensor_amax(o) && o.transform == Transform::None &&
         o.source == ScaleSource::Current;
}
inline bool takes_input_amax(const ScaledLinear& q) {
  return reads_at_current_amax(q, q.recipe->gemm[kForward].a);
}
inline bool takes_weight_amax(const ScaledLinear& q) {
  return reads_at_current_amax(q, q.recipe->gemm[kForward].b);
}

// Per-tensor current scaling needs a tensor's whole amax before its first value is rounded, so
// a linear's quantizer would read its input twice (an amax pass, then the codes). The op that
// writes the input (a layernorm's output feeds the qkv and fc linears, the attention's output
// the attention projection, GELU's the MLP projection) can take that amax as it writes it: for
// linear `slot` (TensorScaling::slot; -1: none, the op as before), whose next forward given
// the tensor it wrote then reads it once. The model asks where takes_input_amax(q); a backend
// may ignore it (the CPU's quantizer takes its own amax): the results are the same either way,
// bit for bit.
struct InputAmax {
  int slot = -1;
};

// Options of a backend's quantized linears (precision.fp8.*, the recipe; the precision
// runtime passes them on).
struct QuantOptions {
  // Fast (reduced-precision, periodically promoted) accumulation in the forward FP8 GEMM on
  // devices that have it (cuBLASLt CUBLASLT_MATMUL_DESC_FAST_ACCUM). The backward GEMMs never
  // use it. The CPU accumulates exactly in fp32 and ignores this.
  bool fast_accum = true;
  // The run's recipe, so that fp8_path_name can say which GEMM path (native or portable) a
  // backend runs for it and why (null: not known).
  const QuantRecipe* recipe = nullptr;
};

// Numerics of one stored tensor (telemetry): the largest magnitude and how many values are
// exactly zero (where underflow lands), subnormal in the stored format (precision already
// lost), or non-finite (overflow).
struct TensorStats {
  double amax = 0;
  size_t n = 0, zeros = 0, subnormals = 0, nonfinite = 0;
};

// What the fused gradient check reports: the global norm of the unscaled gradients
// (sqrt(sum g^2) / loss_scale) and whether every gradient was finite.
struct GradCheck {
  double norm = 0;
  bool finite = true;
};

// Which part of a training step an op belongs to (the per-op profile tags each op with it and
// with the layer; src/backends/profiling_backend.h).
enum class StepPhase : uint8_t { Forward, Backward, Optimizer, Other };
const char* step_phase_name(StepPhase p);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory. Tensors are allocated here; contents start undefined.
  virtual Tensor alloc(DType dtype, size_t numel) = 0;
  virtual void free(Tensor t) = 0;
  virtual void upload(Tensor dst, const void* host) = 0;  // host holds dst.bytes()
  virtual void download(void* host, Tensor src) = 0;
  virtual void zero(Tensor t) = 0;
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  // Waits until all queued work is done (devices run asynchronously; the CPU never queues).
  virtual void synchronize() {}
  // Deferred reads, so that a training step waits for the device once: queue_read copies src
  // into host memory the backend keeps, after the work queued so far, without waiting for it;
  // take_reads waits once and returns the bytes of each read queued since its last call, in
  // order. The default copies at once (right for a backend that never queues: the CPU).
  virtual void queue_read(Tensor src);
  virtual std::vector<std::vector<char>> take_reads();
  // The hardware, e.g. "NVIDIA H100 80GB HBM3" ("" when it does not matter: the CPU).
  virtual std::string device_model() const { return ""; }
  // The device's free and total memory in bytes now; false where there is no such device (the
  // CPU: its memory is the machine's, src/base/host_memory.h).
  virtual bool device_memory(size_t* /*free*/, size_t* /*total*/) const { return false; }
  // Which GPU of the machine (0 for the CPU).
  virtual int device_index() const { return 0; }

  // The per-op profile (src/backends/profiling_backend.h). set_scope: where the model is in a
  // step (layer -1: outside the blocks); backends ignore it, the profiling decorator reads it.
  virtual void set_scope(int /*layer*/, StepPhase /*phase*/) {}
  // Time marks: record_mark() marks the point the backend's queued work has reached and returns
  // the mark's index; mark_times_ms() waits for that work and returns each mark's time in ms
  // since the first; clear_marks() forgets them. The default is the host's clock, right for a
  // backend that never queues (the CPU); devices mark their stream (CUDA events).
  virtual size_t record_mark();
  virtual std::vector<double> mark_times_ms();
  virtual void clear_marks();
  // The GEMM algorithms the backend ran since the last call ("" when none or not known: the
  // CPU's paths are one per mode and said at start), for the profile's algorithm column.
  virtual std::string take_gemm_log() { return ""; }

  // out(B,T,C) = wte[tokens] + wpe[t]
  virtual void encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                               int C) = 0;
  // dwte[tokens] += dout, dwpe[t] += dout
  virtual void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                                int C) = 0;
  // out = (inp - mean) * rstd * w + b per row of C; mean and rstd saved for backward. amax:
  // out's, for the linear it feeds (InputAmax), as in every op below that takes one.
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w,
                                 Tensor b, int N, int C, InputAmax amax = {}) = 0;
  // dinp += ..., dw += ..., db += ...
  virtual void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp,
                                  Tensor w, Tensor mean, Tensor rstd, int N, int C) = 0;
  // out(N,OC) = inp(N,C) W(OC,C)^T + bias(OC) (bias may be empty)
  virtual void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                              int OC) = 0;
  // dinp = dout W; dw += dout^T inp; dbias += sum_rows dout (dbias may be empty)
  virtual void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                               Tensor w, int N, int C, int OC) = 0;
  // The tied lm_head's backward: matmul_backward without bias, dout = the classifier's dlogits
  // (a dlogits_view: N rows of Vp in its type, row n at element n * (dlogits.numel / N)). All
  // operands share dlogits' type: X operands, fp32 accumulation, X outputs in 16-bit models.
  virtual void lm_head_backward(Tensor dinp, Tensor dw, Tensor dlogits, Tensor inp, Tensor w, int N,
                                int C, int Vp) = 0;
  // pre = matmul_forward(inp, w, bias), out = gelu(pre): the MLP's first linear with its
  // activation (devices may fuse the GELU into the GEMM's epilogue; two ops on the CPU).
  virtual void matmul_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor w, Tensor bias, int N,
                                   int C, int OC) {
    matmul_forward(pre, inp, w, bias, N, C, OC);
    gelu_forward(out, pre, size_t(N) * OC);
  }
  // Quantized linears (ScaledLinear): matmul_forward / matmul_backward with every GEMM
  // operand quantized as q.recipe says for that GEMM role, along that GEMM's reduction
  // dimension, products accumulated in fp32, outputs rounded once; dbias from the
  // unquantized dout. A non-finite operand poisons the results with NaN (the step is
  // skipped). Backends without them say so and the trainer refuses the quantized modes.
  virtual bool has_block_scaled_linears() const { return false; }
  virtual void matmul_forward_scaled(Tensor, Tensor, Tensor, Tensor, int, int, int,
                                     const ScaledLinear& q) {
    throw Error(name() + " has no quantized linears (" + q.recipe->name + ")");
  }
  virtual void matmul_backward_scaled(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, int, int, int,
                                      const ScaledLinear& q) {
    throw Error(name() + " has no quantized linears (" + q.recipe->name + ")");
  }
  // The amaxes per-tensor-scaled linears left in their slots since the last call: n_slots x
  // kTensorOperands values (a forward leaves the input's and the weight's, a backward the
  // gradient's; the latest call of a slot wins; 0 where none; +inf for an operand that held a
  // non-finite value), cleared. On a device this is the one wait for the queue, made once per
  // pass by the model, never one per GEMM.
  virtual std::vector<float> take_amaxes(int n_slots) {
    return std::vector<float>(size_t(n_slots) * kTensorOperands, 0.0f);
  }
  virtual void set_quant_options(const QuantOptions&) {}
  // Which GEMM path the quantized linears run, for the line printed at start.
  virtual std::string fp8_path_name() const {
    return "emulated: quantize-dequantize in fp32, fp32 GEMMs";
  }
  // Causal self-attention. qkv(B,T,3C) -> out(B,T,C); att(B,NH,T,T) keeps the softmax.
  virtual void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH,
                                 InputAmax amax = {}) = 0;
  // dqkv = gradient of the attention input
  virtual void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int B, int T,
                                  int C, int NH) = 0;
  // Attention keeping lse (BackendOptions::attention = cudnn, or auto where cuDNN runs; the
  // CPU's twin of cudnn): the path for heads of this size in compute type t
  // (attention_choice.h), whose lse says whether the model should keep lse(B,NH,T) instead of
  // att(B,NH,T,T) and call the two ops below. lse is in the statistics type (fp32; fp64 in
  // fp64 models). After settle_attention, the settled path.
  virtual AttentionChoice attention_choice(int /*head_size*/, DType /*t*/) const { return {}; }
  // Settles the path for a run of shape s before the model sizes its activations: the CUDA
  // backend builds cuDNN's forward and backward graphs at exactly this shape where cudnn would
  // run, so that auto takes cublas at start-up (and says why) where cuDNN refuses one, and a
  // refused explicit cudnn stops before training (require_runnable); attention_choice then
  // answers the settled path for s's head size and type.
  virtual AttentionChoice settle_attention(const AttentionShape& s) {
    return attention_choice(s.head_size, s.t);
  }
  // The ranks' agreed path for s (agree_attention, Trainer::settle_attention's vote) where it
  // is not the one this backend settled: cublas on a CUDA rank whose cuDNN built the graphs
  // another rank's refused. attention_choice then answers `agreed`.
  virtual void settle_agreed_attention(const AttentionShape& s, const AttentionChoice& agreed) {
    if (agreed.path != attention_choice(s.head_size, s.t).path)
      throw Error(name() + " backend cannot take the ranks' attention path " +
                  attention_path_name(agreed.path));
  }
  // attention_choice's lse; an error naming cuda.attention where the configured path cannot
  // run (require_runnable), so that a run asking for cudnn without it stops before training.
  bool attention_saves_lse(int head_size, DType t) const {
    const AttentionChoice c = attention_choice(head_size, t);
    require_runnable(c);
    return c.lse;
  }
  // out as attention_forward; lse = the logsumexp of each row's scaled causal scores.
  virtual void attention_forward_lse(Tensor, Tensor, Tensor, int, int, int, int,
                                     InputAmax = {}) {
    throw Error(name() + " has no attention keeping lse");
  }
  // dqkv from dout, qkv, the forward's out and lse (recomputes the probabilities).
  virtual void attention_backward_lse(Tensor, Tensor, Tensor, Tensor, Tensor, int, int, int, int) {
    throw Error(name() + " has no attention keeping lse");
  }
  // out = gelu(inp), tanh approximation
  virtual void gelu_forward(Tensor out, Tensor inp, size_t n, InputAmax amax = {}) = 0;
  // dinp = gelu'(inp) * dout
  virtual void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) = 0;
  // out = a + b
  virtual void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) = 0;
  // res = a + b, then layernorm_forward(out, mean, rstd, res, w, bias): the residual add
  // fused into the layernorm that reads it (one pass on devices; the two ops on the CPU).
  virtual void residual_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd,
                                          Tensor a, Tensor b, Tensor w, Tensor bias, int N, int C,
                                          InputAmax amax = {}) {
    residual_forward(res, a, b, size_t(N) * C);
    layernorm_forward(out, mean, rstd, res, w, bias, N, C, amax);
  }
  // Per row of logits(N,Vp) (fp32; fp64 in fp64 models): loss = -log softmax(logits[:V])
  // [target], from the logits in their own precision. When dloss != 0, dlogits receives
  // dloss * (softmax - onehot(target)), computed in the logits' type and rounded once (to
  // nearest even) to dlogits' type, zero in the padding: dlogits is dlogits_view(logits, t)
  // (in place, or 16-bit values over the first half of each row; rows ld = dlogits.numel / N
  // apart), so the probabilities never need a buffer of their own. A 16-bit gradient that
  // overflows is inf (never clamped), so a loss scale too large gives a skipped step.
  virtual void classifier(Tensor logits, Tensor losses, Tensor targets, Tensor dlogits, float dloss,
                          int N, int V, int Vp) = 0;
  // sum of squares of all elements, in fp64 on the CPU, fp32 on devices
  virtual double sum_squares(Tensor t) = 0;
  // One pass over the gradients: unscales them by loss_scale (without writing them back),
  // checks finiteness and computes the global norm. The CPU twin is sqrt(sum_squares) /
  // loss_scale in fp64; devices reduce in fp32.
  virtual GradCheck unscale_check_norm(Tensor grads, double loss_scale) {
    GradCheck g;
    g.norm = std::sqrt(sum_squares(grads)) / loss_scale;
    g.finite = std::isfinite(g.norm);
    return g;
  }
  // The loss-scale decision on the device (the CUDA backend with device_loss_scale; one
  // process): device_decide_step queues the fused gradient check at state.scale and
  // src/numerics/loss_scaler.h's loss_scale_step on the device (the state lives there),
  // adamw_decided is adamw with a.grad_scale and the skip taken from that decision, and
  // device_step_report waits and returns the new state and the decision (for the log and the
  // host's LossScaler, which stays the one that checkpoints). No host wait in between.
  struct DeviceStepReport {
    LossScaleState state;
    LossScaleStep step;
  };
  virtual bool device_loss_scale() const { return false; }
  virtual void device_decide_step(Tensor, const LossScaleState&, const LossScaleParams&, double) {
    throw Error(name() + " has no device loss scaler");
  }
  virtual void adamw_decided(Tensor, Tensor, Tensor, Tensor, Tensor, const AdamWArgs&) {
    throw Error(name() + " has no device loss scaler");
  }
  virtual DeviceStepReport device_step_report() {
    throw Error(name() + " has no device loss scaler");
  }
  // AdamW on master weights (fp32); params receives the updated weights rounded to its type
  // (params may be master itself). With a.master = bf16-sr / bf16-kahan the bf16 params are
  // the master weights and `master` is unused / their compensation buffer. m and v are stored per
  // a.m_format / a.v_format (their tensors' dtype: fp32, bf16 or fp16; E4M3 / E5M2 codes with each
  // block's scale in a.m_meta / a.v_meta): read widened to fp32, updated in fp32, stored back
  // rounded (src/numerics/moment_format.h, moment_block.h).
  virtual void adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                     const AdamWArgs& a) = 0;
  virtual TensorStats stats(Tensor t) = 0;
  // dst = src converted to dst's type (same length)
  virtual void convert(Tensor dst, Tensor src, const Rounding& r) = 0;
  // Gradients on the wire (src/numerics/wire_format.h), in rows of `part` elements; byte
  // buffers are tensors of one-byte elements. wire_encode: every fp32 row of x (rows x part)
  // encoded into out (rows x wire_bytes(part)). wire_sum: sum (fp32, part) = -0 plus every row
  // of `in` decoded, added in row order (in fp32; FP8 with one fmaf per element). wire_decode:
  // out (fp32, rows x part) = every row of `in` decoded. The defaults go through host copies
  // and the host functions; backends with memory of their own have kernels for them.
  virtual void wire_encode(Tensor x, size_t part, WireFormat f, Tensor out);
  virtual void wire_sum(Tensor in, size_t part, WireFormat f, Tensor sum);
  virtual void wire_decode(Tensor in, size_t part, WireFormat f, Tensor out);
  // The probes' view of the operand t(rows, cols) (src/numerics/operand_view.h), its statistics
  // reduced on this backend (the CPU: on the tensor itself; devices: on the device); null
  // when the backend has none (the probes then cannot run on it).
  virtual std::unique_ptr<OperandView> operand_view(Tensor /*t*/, int /*rows*/, int /*cols*/) {
    return nullptr;
  }

 private:
  std::vector<double> host_marks_;         // the default time marks: the host clock, in ms
  std::vector<std::vector<char>> reads_;  // the default deferred reads, already copied
};

}  // namespace tg
