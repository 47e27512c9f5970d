// model.h: GPT-2 (learned positions, pre-LayerNorm blocks, tanh GELU, tied embedding and
// lm_head, vocabulary padded to a multiple of 128), written once over the Backend ops.
//
// Parameters live in one flat buffer in llm.c's order (wte wpe ln1w ln1b qkvw qkvb
// attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb lnfw lnfb, each stacked over layers),
// so the model file is that buffer behind a header and the optimizer runs over it whole.
// Activations are one buffer laid out for the largest (B, T) seen so far; activation
// gradients need only one layer's worth of scratch, reused from the top layer down.
//
// Precision: the model computes in `dtype` (fp32, bf16 or fp16; fp64 for gradient checks):
// weights, activations and all gradients are stored in it. The optimizer owns fp32 master
// weights (the same buffer as the weights in fp32; none, or a bf16 compensation, with bf16
// master weights: MasterFormat) and Adam moments stored in their own formats (MomentFormats: fp32
// by default, or bf16 / fp16 codes; src/numerics/moment_format.h). Layernorm statistics, logits and
// losses are fp32 (fp64 in fp64 models); the logits' gradient is in `dtype`, written over the
// logits' rows (backend.h's dlogits_view), so the lm_head's backward runs in `dtype` like every
// other linear.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "linear_quantizers.h"
#include "src/backends/backend.h"
#include "src/backends/cpu/host_operand_view.h"
#include "src/numerics/operand_view.h"
#include "src/numerics/wire_format.h"

namespace tg {

struct GPTConfig {
  int max_seq_len = 0, vocab_size = 0, padded_vocab_size = 0, n_layer = 0, n_head = 0, n_embd = 0;
};
inline int pad_vocab(int V) { return (V + 127) / 128 * 128; }
inline GPTConfig gpt_config(int n_layer, int n_head, int n_embd, int vocab_size, int max_seq_len) {
  GPTConfig c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = pad_vocab(vocab_size);
  c.max_seq_len = max_seq_len;
  return c;
}
// GPT-2's four sizes (vocabulary 50257, 1024 positions): what `memory --preset` and the
// reports' "at GPT-2 1.5B" columns plan.
struct Gpt2Size {
  const char* name;   // gpt2, gpt2-medium, gpt2-large, gpt2-xl
  const char* label;  // 124M, 350M, 774M, 1.5B
  int n_layer, n_head, n_embd;
};
inline const std::vector<Gpt2Size>& gpt2_sizes() {
  static const std::vector<Gpt2Size> sizes = {{"gpt2", "124M", 12, 12, 768},
                                              {"gpt2-medium", "350M", 24, 16, 1024},
                                              {"gpt2-large", "774M", 36, 20, 1280},
                                              {"gpt2-xl", "1.5B", 48, 25, 1600}};
  return sizes;
}
inline GPTConfig gpt2_config(const Gpt2Size& s) {
  return gpt_config(s.n_layer, s.n_head, s.n_embd, 50257, 1024);
}
// GPT-2 1.5B (gpt2-xl).
inline GPTConfig gpt2_xl_config() { return gpt2_config(gpt2_sizes().back()); }

struct Config;
// Model shape from the model.* keys (model.init_from is not read here).
GPTConfig model_config(const Config& cfg);

// clang-format off
enum ParamIndex {
  WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB,
  LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB, kNumParamTensors
};
// clang-format on
std::array<size_t, kNumParamTensors> param_sizes(const GPTConfig& c);
size_t num_parameters(const GPTConfig& c);
const char* param_name(int i);
// Decoupled weight decay applies to the 2-D weights (embeddings and linear weights) only.
bool param_decays(int i);
// Floating-point operations of one training step per token (forward + backward: 6N for the
// weights plus attention), for tokens/s -> FLOP/s.
double flops_per_token(const GPTConfig& c, int T);
// Bytes one of `ranks` ranks sends per optimizer step for the gradient reduction in format
// `grad_wire` and, with ZeRO-1 (zero), the all-gather of the updated weights: what
// GPT::take_comm_bytes counts (ring bytes, comm.h), chunk for chunk. 0 for one rank.
uint64_t plan_comm_bytes(const GPTConfig& c, DType dtype, int ranks, bool zero,
                         const MomentFormats& moments = {}, WireFormat grad_wire = WireFormat::FP32,
                         bool fp8_weights = false);

// Bytes a GPT of this shape allocates to train on B x T in `dtype` (DType::F32, BF16, F16),
// by category. The model allocates exactly these (plus 64-byte rounding per buffer), so the
// plan can be checked against a run's measured peak.
struct MemoryPlan {
  size_t weights = 0, master = 0, grads = 0, activations = 0;
  size_t optimizer = 0;  // Adam m and v, each in its storage format
  size_t comm = 0;       // staging of the gradient reduction (several ranks)
  size_t total() const { return weights + master + grads + optimizer + activations + comm; }
};
// Elements per fp32 staging chunk when 16-bit gradients are reduced over ranks.
constexpr size_t kGradSyncChunk = size_t(1) << 20;
// With zero_world > 1: ZeRO-1 over that many ranks (master weights and Adam moments of one
// shard; weights and gradients padded to whole shards).
// attention_lse: the backend keeps lse(B,NH,T) in the statistics instead of att(B,NH,T,T)
// (Backend::attention_saves_lse: cuDNN attention and its CPU twin).
// ranks > 1: data parallelism over that many ranks (plain, or ZeRO-1 when zero_world > 1):
// adds the gradient reduction's staging buffers, which live only during the reduction.
// moments: how Adam's m and v are stored (their element sizes; fp32 by default).
// master: where the master weights live (src/numerics/master_format.h: an fp32 copy, none, or
// a bf16 compensation buffer).
// fp32_grads: a 16-bit model accumulates its gradients in an fp32 buffer (precision.state.grads;
// GPT::set_fp32_grad_accumulation), plus the staging that folds each micro-step into it.
// grad_wire: the format gradients travel in between ranks (its encode buffers replace fp32
// all-reduce's staging; src/numerics/wire_format.h).
MemoryPlan plan_memory(const GPTConfig& c, DType dtype, int B, int T, int zero_world = 1,
                       bool attention_lse = false, int ranks = 1, const MomentFormats& moments = {},
                       MasterFormat master = MasterFormat::FP32,
                       WireFormat grad_wire = WireFormat::FP32, bool fp32_grads = false,
                       bool fp8_weights = false);
// The element type a moment of format f is stored in, for a model computing in `dtype`: the
// master weights' type (fp32; fp64 in fp64 models) for plain formats, else the format's own.
DType moment_dtype(DType dtype, const MomentFormat& f);
// Elements of the activation buffers for (B, T): {compute dtype, fp32 statistics}.
std::pair<size_t, size_t> activation_elems(const GPTConfig& c, int B, int T, bool lse = false);

class Comm;

// How the model takes part in data parallelism. Without a communicator it trains alone. With one,
// sync_grads() sums the gradients of every rank. With zero, the flat parameter vector is cut into
// world equal shards (ZeRO-1): this rank keeps fp32 master weights and Adam moments for its own
// shard only, reduce-scatters the gradients, updates its shard and all-gathers the updated weights.
struct DataParallel {
  Comm* comm = nullptr;
  bool zero = false;
  size_t chunk = kGradSyncChunk;  // elements per fp32 staging chunk when reducing 16-bit grads
  // The format gradients travel in (precision.state.grad_comm; src/numerics/wire_format.h):
  // other than fp32, encoded by the backend (Backend::wire_encode) and exchanged by the
  // communicator's all-to-all (MPI, NCCL's grouped sends and receives).
  WireFormat grad_wire = WireFormat::FP32;
  // ZeRO-1's weight all-gather in fp8-e4m3 blocks (precision.state.weight_comm; 16-bit models
  // with an fp32 master): every rank computes with the decoded weights.
  bool fp8_weights = false;
};
// Elements per ZeRO-1 shard: n split over world ranks, rounded up to 16 elements so every
// shard starts 64-byte aligned (vector loads, NCCL), and to whole FP8 moment blocks when the
// moments have them (src/numerics/moment_block.h), so that no rank cuts a block. The last
// shard is padded.
size_t zero_shard_size(size_t n, int world, const MomentFormats& moments = {});
// Elements per rank part of a staging chunk of `len` gradients in a wire format other than fp32
// (GPT::sync_grads_wire): the chunk cut into `world` parts (the last padded with zeros), or
// under ZeRO-1 (sharded) the chunk itself, taken from every rank's shard.
size_t wire_part(size_t len, size_t world, bool sharded);
// Elements per FP8 moment block of these moments (0: neither is blocked).
int moment_block_of(const MomentFormats& moments);

// One tensor numerics telemetry reports; `layers` > 0 when it holds one equal slice per
// transformer block, in block order (so the report can draw layer x tensor maps).
struct TelemetryTensor {
  std::string name;
  Tensor t;
  int layers = 0;
};

// The operands of the block linears, handed to a probe as the training passes use them and
// before any quantization (precision.mode=auto's sensitivity statistics, quantization
// telemetry, channel smoothing): the forward's input (N, C) and weight (OC, C), the
// backward's output gradient (N, OC). A probe sees an operand view (src/numerics/operand_view.h):
// the statistics it asks for are reduced where the tensor lives (Backend::operand_view), and only
// they cross to the host.
enum LinearOperand { kLinearInput, kLinearWeight, kLinearGrad, kLinearOperands };
struct LinearProbe {
  virtual ~LinearProbe() = default;
  virtual void take(int layer, int linear, int operand, OperandView& x) = 0;
  // A host fp32 operand x(rows, cols), through a host view (how the tests hand operands in).
  void take(int layer, int linear, int operand, const float* x, int rows, int cols) {
    HostOperandView v(x, rows, cols);
    take(layer, linear, operand, v);
  }
};
// Several probes measuring the same micro-batch (precision.mode=auto and channel smoothing):
// each gets the same view.
struct ProbeFanout : LinearProbe {
  std::vector<LinearProbe*> to;
  using LinearProbe::take;
  void take(int layer, int linear, int operand, OperandView& x) override {
    for (LinearProbe* p : to) p->take(layer, linear, operand, x);
  }
};

class GPT {
 public:
  // dtype: F32, BF16 or F16 for training, F64 for gradient checks (CPU backend only).
  // moments: the storage of Adam's m and v (16-bit formats need an fp32 master).
  // master: where the master weights live (bf16-sr and bf16-kahan need a bf16 model).
  GPT(const GPTConfig& cfg, Backend& be, DType dtype = DType::F32, DataParallel dp = {},
      const MomentFormats& moments = {}, MasterFormat master = MasterFormat::FP32);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return cfg_; }
  size_t num_params() const { return num_params_; }
  Backend& backend() { return be_; }

  // GPT-2 initialisation from a seed: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
  // biases 0, layernorm weights 1, padded vocabulary rows 0.
  void init_random(uint64_t seed);
  DType dtype() const { return dtype_; }
  // Quantized block linears (per-tensor FP8 or block-scaled; bf16 model): the state lives
  // with the caller (PrecisionRuntime); nullptr turns quantization off.
  void set_quantizers(LinearQuantizers* s) { fp8_ = s; }
  // While set, training passes hand every block linear's operands to p (nullptr: none).
  void set_probe(LinearProbe* p) { probe_ = p; }
  // Host copies of all master weights (llm.c order). set_params also refreshes the compute
  // copy (rounded to nearest). Under ZeRO-1 params_f32 gathers the shards: every rank must
  // call it. With bf16 master weights (bf16-sr, bf16-kahan) these are the bf16 weights: a
  // bf16-kahan model's compensation is set_params's rounding error, or set_compensation's.
  void set_params(const std::vector<double>& p);
  void set_params(const std::vector<float>& p);
  std::vector<double> params_f64();
  std::vector<float> params_f32();
  std::vector<double> grads_f64();
  // This rank's shard of the master weights as their value (shard_size): the fp32 copy, the
  // bf16 weights (bf16-sr) or p + c (bf16-kahan). No collective.
  std::vector<float> master_shard_f32();
  // This rank's shard of the gradients (shard_size; all of them without ZeRO-1), widened on
  // the host.
  std::vector<float> grads_shard_f32();
  // This rank's shard of Adam's m or v (second = true) as their stored values, decoded.
  std::vector<float> moment_shard_f32(bool second);
  // Compute weights = master weights rounded per r (after loading master weights); under
  // ZeRO-1 every rank rounds its shard and the result is all-gathered.
  void refresh_params(const Rounding& r);

  // ZeRO-1: this rank's shard is [shard_begin, shard_begin + shard_size) of the flat
  // parameter vector, of which shard_count elements are real parameters (the rest is
  // padding). Without sharding the shard is everything.
  bool sharded() const { return sharded_; }
  WireFormat grad_wire() const { return dp_.grad_wire; }
  bool fp8_weights() const { return dp_.fp8_weights && sharded_; }
  size_t shard_begin() const { return shard_begin_; }
  size_t shard_size() const { return shard_size_; }
  size_t shard_count() const;

  // Runs the forward pass on B rows of T tokens. With targets, returns the mean loss; with
  // dloss != 0 it also leaves the gradient of dloss * (mean loss) with respect to the
  // logits ready for backward(), in the compute type over the logits' memory (logits() then
  // no longer holds the logits). Without targets the logits stay in logits() and NaN is
  // returned.
  double forward(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss);
  // forward() with targets whose mean loss the host collects later, with take_losses(): the
  // training step's forward, which queues the loss's read (Backend::queue_read) instead of
  // waiting for the device to finish the forward before the backward is queued.
  void forward_queued(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss);
  // The mean loss of each forward_queued since the last call, in order, after one wait.
  std::vector<double> take_losses();
  // Adds this micro-batch's gradients into grads (after forward with dloss != 0); with fp32
  // accumulation into the fp32 buffer instead (grads then hold zeros until finish_grads).
  void backward();
  // precision.state.grads=fp32 (16-bit models; before training): the micro-steps' gradients
  // are summed in an fp32 buffer, and finish_grads() rounds the sum once into grads.
  void set_fp32_grad_accumulation(bool on);
  bool fp32_grad_accumulation() const { return bool(grad_acc_); }
  // After a step's last backward(): grads = the fp32 sum rounded to the compute type (nothing
  // without fp32 accumulation).
  void finish_grads();
  void zero_grad();
  // Sums the gradients over the ranks (in fp32, rounded once to the compute type): all of
  // them, or under ZeRO-1 only this rank's shard (the rest stay this rank's own). In a wire
  // format other than fp32 each rank's parts travel encoded and are summed in fp32 where they
  // arrive (src/numerics/wire_format.h).
  void sync_grads();
  // Bytes this rank sent for the gradient reduction and ZeRO-1's weight all-gather since the
  // last call (ring_all_reduce_bytes / ring_scatter_gather_bytes of comm.h; the loss, norm
  // and amax scalars are left out), and zero again.
  uint64_t take_comm_bytes();
  // Global gradient norm (of the summed gradients; under ZeRO-1 reduced over the shards).
  double grad_norm();
  // The fused pass over the gradients: norm of grads / loss_scale and their finiteness.
  GradCheck check_grads(double loss_scale);
  // AdamW over every parameter tensor with its own weight decay; grads are multiplied by
  // grad_scale first. Stochastic rounding bits are indexed by the parameter's position.
  void adamw_step(const AdamWArgs& args, bool decided = false);
  // The loss-scale decision on the device (Backend::device_loss_scale; not sharded): queues
  // the gradient check and the decision, then AdamW with the decided factor and skip
  // (args.grad_scale unused); Backend::device_step_report() says what happened.
  void device_decided_step(const LossScaleState& st, const LossScaleParams& p, double clip,
                           const AdamWArgs& args);

  // Logits of the last forward, (B, T, Vp), on the backend (FP8 models reuse the buffer as
  // scratch during the next pass).
  Tensor logits() const { return acts_.logits; }
  // The compute weights and gradients, num_params elements (their buffers carry the ZeRO-1
  // padding beyond). Master weights and Adam moments: this rank's shard (shard_size).
  Tensor params() const { return params_.slice(0, num_params_); }
  Tensor master() const { return master_; }  // empty with bf16 master weights
  MasterFormat master_format() const { return master_format_; }
  // bf16-kahan: the bf16 compensation of this rank's shard (shard_size); empty otherwise.
  Tensor compensation() const { return comp_; }
  // bf16-kahan: this rank's shard of the compensation from its bf16 codes (a checkpoint's).
  void set_compensation(const std::vector<uint16_t>& codes);
  Tensor grads() const { return grads_.slice(0, num_params_); }
  Tensor adam_m() const { return m_; }
  Tensor adam_v() const { return v_; }
  // FP8 moments: each block's meta (moment_block.h), fp32 words; empty for other formats.
  Tensor adam_m_meta() const { return m_meta_; }
  Tensor adam_v_meta() const { return v_meta_; }
  const MomentFormats& moment_formats() const { return moments_; }
  Tensor param(int i) const { return param_views_[i]; }
  // Tensors that numerics telemetry reports, named "act/<name>" (all layers of one kind),
  // "dact/<name>" (activation-gradient scratch, as the last backward left it: layer 0) and
  // "grad/<param>". Valid after forward + backward.
  std::vector<TelemetryTensor> telemetry_tensors() const;
  Tensor grad(int i) const { return grad_views_[i]; }

 private:
  struct Acts {
    Tensor encoded, ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, residual2, ln2, ln2_mean,
        ln2_rstd, fch, fch_gelu, fcproj, residual3, lnf, lnf_mean, lnf_rstd, logits, losses;
    // gradient scratch, one layer's worth
    Tensor dresidual, dln, dqkv, datty, dfch, dfch_gelu;
  };
  void ensure_acts(int B, int T);
  // The block linears, on the GEMM path src/model/quantized_linear.h picks.
  void linear_forward(int l, int lin, Tensor out, Tensor inp, Tensor w, Tensor b, int N, int C,
                      int OC, bool training);
  void linear_backward(int l, int lin, Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp,
                       Tensor w, int N, int C, int OC);
  // The amaxes the per-tensor-scaled linears of a pass left with the backend, into the
  // LinearQuantizers' histories (Backend::take_amaxes: one read per pass; only training passes
  // record, so evaluation does not move the scales).
  void take_amaxes(bool backward, bool training);
  void probe_take(int l, int lin, int operand, Tensor t, int rows, int cols);
  // Offsets of every activation for (B, T); returns the element counts of the compute-type
  // and the statistics buffers. Fills *out (views into the buffers) when given.
  std::pair<size_t, size_t> layout_acts(int B, int T, Acts* out);
  void forward_logits(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss);
  // Layer l of forward() (its activations in acts_, for B rows of T tokens).
  void block_forward(int l, int B, int T, bool training);

  // Whether attention keeps lse instead of att (Backend::attention_saves_lse).
 public:
  bool attention_lse() const { return lse_; }

 private:
  // Under ZeRO-1: every rank receives the others' updated weights.
  void gather_params();
  void fold_grads();
  // gather_params in fp8-e4m3 blocks (dp_.fp8_weights).
  void gather_params_fp8();
  // sync_grads in dp_.grad_wire other than fp32.
  void sync_grads_wire();
  void set_bf16_master(const std::vector<float>& p);
  // adamw_step with FP8 moments: one call over the shard (src/numerics/moment_block.h).
  void adamw_step_blocked(const AdamWArgs& args, bool decided);
  // The linears' weights that lie whole among the parameters [lo, lo + n) of an adamw call,
  // where AdamW takes their amaxes for the forward (Backend's WeightAmax).
  WeightAmax weight_amax_in(size_t lo, size_t n) const;

  GPTConfig cfg_;
  Backend& be_;
  DType dtype_, master_dtype_;
  size_t num_params_ = 0;
  DataParallel dp_;
  MomentFormats moments_;
  MasterFormat master_format_ = MasterFormat::FP32;
  // Attention keeping lse (cuDNN, its CPU twin): acts_.att holds lse(B,NH,T) per layer in the
  // statistics buffer.
  bool lse_ = false;
  size_t att_elems(int B, int T) const {
    return size_t(B) * cfg_.n_head * T * (lse_ ? 1 : size_t(T));
  }
  bool sharded_ = false;
  size_t shard_begin_ = 0, shard_size_ = 0, padded_params_ = 0;
  uint64_t comm_bytes_ = 0;  // sent since take_comm_bytes()
  Tensor grad_acc_;          // fp32 gradient sums over micro-steps (precision.state.grads=fp32)
  Tensor params_, grads_, master_, m_, v_, comp_, m_meta_, v_meta_;
  std::array<Tensor, kNumParamTensors> param_views_, grad_views_;
  Tensor act_buf_, stat_buf_, tokens_, targets_;
  size_t act_capacity_ = 0, stat_capacity_ = 0, tok_capacity_ = 0;
  Acts acts_;
  int B_ = 0, T_ = 0;
  bool have_dlogits_ = false;
  std::vector<std::pair<DType, int>> queued_losses_;  // forward_queued's reads: type, rows
  LinearQuantizers* fp8_ = nullptr;
  LinearProbe* probe_ = nullptr;
};

}  // namespace tg
