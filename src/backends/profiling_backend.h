// profiling_backend.h: the per-op profile's decorator. A Backend that runs every op on another
// backend and records each call: the op, its shape, the layer and phase the model was in
// (set_scope), the op's analytic FLOPs and minimum bytes (every input read once, every output
// written once; a tensor that is read and updated counts twice), the inner backend's time marks
// around it (host clock on the CPU, CUDA events on a GPU) and the GEMM algorithms it ran.
//
// The model and the precision runtime drive it like any backend, so a profiled step runs the
// very ops of an unprofiled one, in the same order, with the same results.
#pragma once
#include <string>
#include <vector>

#include "src/backends/backend.h"

namespace tg {

// What kind of work an op is, for the floor it is measured against: GEMMs against the
// GEMM ceiling, everything else against the copy ceiling (transfers between host and device
// against none: the profile does not measure the host link).
enum class OpKind : uint8_t { Gemm, Attention, Memory, Transfer };
const char* op_kind_name(OpKind k);

// One op call of a profiled step.
struct OpRecord {
  std::string op;     // the Backend method, e.g. "matmul_backward"
  std::string shape;  // its dimensions, e.g. "N=8192 C=768 OC=2304"
  int layer = -1;     // -1: outside the blocks (embeddings, lm_head, classifier, optimizer)
  StepPhase phase = StepPhase::Other;
  OpKind kind = OpKind::Memory;
  double flops = 0;  // analytic floating-point operations
  double bytes = 0;  // minimum bytes moved: inputs read once, outputs written once
  std::string gemm;  // the GEMM algorithms the backend ran for it ("" when it says none)
  size_t mark_begin = 0, mark_end = 0;
  double ms = 0;  // filled by ProfilingBackend::take_records
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : in_(inner) {}
  Backend& inner() { return in_; }
  // Records from now on (true) or runs the ops untouched (false, the default: warm-up steps).
  void set_recording(bool on) { recording_ = on; }
  // Marks the start or the end of a step (their times bound what the ops cover).
  size_t step_mark() { return in_.record_mark(); }
  // Every record since the last call with its time filled in, and the times of every mark
  // (step marks included), after one wait for the inner backend; the marks are then cleared.
  std::vector<OpRecord> take_records(std::vector<double>* mark_ms);

  std::string name() const override { return in_.name(); }
  Tensor alloc(DType dtype, size_t numel) override { return in_.alloc(dtype, numel); }
  void free(Tensor t) override { in_.free(t); }
  void upload(Tensor dst, const void* host) override;
  void download(void* host, Tensor src) override;
  void zero(Tensor t) override;
  size_t bytes_in_use() const override { return in_.bytes_in_use(); }
  size_t peak_bytes() const override { return in_.peak_bytes(); }
  void synchronize() override { in_.synchronize(); }
  void queue_read(Tensor src) override { in_.queue_read(src); }
  std::vector<std::vector<char>> take_reads() override { return in_.take_reads(); }
  std::string device_model() const override { return in_.device_model(); }
  bool device_memory(size_t* free, size_t* total) const override {
    return in_.device_memory(free, total);
  }
  int device_index() const override { return in_.device_index(); }
  void set_scope(int layer, StepPhase phase) override;
  size_t record_mark() override { return in_.record_mark(); }
  std::vector<double> mark_times_ms() override { return in_.mark_times_ms(); }
  void clear_marks() override { in_.clear_marks(); }
  std::string take_gemm_log() override { return in_.take_gemm_log(); }

  void encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                       int C) override;
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                        int C) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b,
                         int N, int C, InputAmax amax = {}) override;
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd, int N, int C) override;
  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC) override;
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override;
  void lm_head_backward(Tensor dinp, Tensor dw, Tensor dlogits, Tensor inp, Tensor w, int N, int C,
                        int Vp) override;
  void matmul_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                           int OC) override;
  bool has_block_scaled_linears() const override { return in_.has_block_scaled_linears(); }
  void matmul_forward_scaled(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC,
                             const ScaledLinear& q) override;
  void matmul_backward_scaled(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor w, int N, int C, int OC, const ScaledLinear& q) override;
  void set_quant_options(const QuantOptions& o) override { in_.set_quant_options(o); }
  std::string fp8_path_name() const override { return in_.fp8_path_name(); }
  std::vector<float> take_amaxes(int n_slots) override { return in_.take_amaxes(n_slots); }
  void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH,
                         InputAmax amax = {}) override;
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int B, int T, int C,
                          int NH) override;
  AttentionChoice attention_choice(int head_size, DType t) const override {
    return in_.attention_choice(head_size, t);
  }
  AttentionChoice settle_attention(const AttentionShape& s) override {
    return in_.settle_attention(s);
  }
  void settle_agreed_attention(const AttentionShape& s, const AttentionChoice& agreed) override {
    in_.settle_agreed_attention(s, agreed);
  }
  void attention_forward_lse(Tensor out, Tensor lse, Tensor qkv, int B, int T, int C, int NH,
                             InputAmax amax = {}) override;
  void attention_backward_lse(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int B,
                              int T, int C, int NH) override;
  void gelu_forward(Tensor out, Tensor inp, size_t n, InputAmax amax = {}) override;
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override;
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override;
  void residual_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                  Tensor b, Tensor w, Tensor bias, int N, int C,
                                  InputAmax amax = {}) override;
  void classifier(Tensor logits, Tensor losses, Tensor targets, Tensor dlogits, float dloss, int N,
                  int V, int Vp) override;
  double sum_squares(Tensor t) override;
  GradCheck unscale_check_norm(Tensor grads, double loss_scale) override;
  bool device_loss_scale() const override { return in_.device_loss_scale(); }
  void device_decide_step(Tensor grads, const LossScaleState& s, const LossScaleParams& p,
                          double max_norm) override;
  void adamw_decided(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                     const AdamWArgs& a) override;
  DeviceStepReport device_step_report() override { return in_.device_step_report(); }
  void adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
             const AdamWArgs& a) override;
  TensorStats stats(Tensor t) override;
  void convert(Tensor dst, Tensor src, const Rounding& r) override;
  void wire_encode(Tensor x, size_t part, WireFormat f, Tensor out) override;
  void wire_sum(Tensor in, size_t part, WireFormat f, Tensor sum) override;
  void wire_decode(Tensor in, size_t part, WireFormat f, Tensor out) override;
  std::unique_ptr<OperandView> operand_view(Tensor t, int rows, int cols) override {
    return in_.operand_view(t, rows, cols);
  }

 private:
  // Starts a record (when recording) and returns its index, or -1.
  long begin(const char* op, OpKind kind, std::string shape, double flops, double bytes);
  void end(long rec);

  Backend& in_;
  bool recording_ = false;
  int layer_ = -1;
  StepPhase phase_ = StepPhase::Other;
  std::vector<OpRecord> records_;
};

}  // namespace tg
