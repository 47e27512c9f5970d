// backend.cu: CudaBackend, the Backend interface on one CUDA device.
//
// Memory is plain cudaMalloc (device_memory.h), counted for bytes_in_use / peak_bytes
// (scratch buffers and the cuBLASLt workspace count too; the pinned host staging of copies, at
// most 2 x kStagingHalfMax bytes, and the deferred reads' buffers are host memory and do not).
// All work is queued on one non-blocking stream; only the methods that return values to the
// host (download, take_reads, sum_squares, unscale_check_norm, stats, take_amaxes,
// device_step_report) and frees wait for it. Host data goes to and from the device through
// pinned staging (staging.h): cudaMemcpyAsync
// never sees pageable memory. encoder_backward groups token positions on the host
// from the copy of the last token upload (reading the tokens back, with a wait, only if there
// is none).
//
// Type rules are the CPU backend's: each op's tensors share an element type (fp32, bf16 or
// fp16; fp64 exists only on the CPU), statistics, logits and losses are fp32. The lm_head's
// forward writes fp32 logits straight from its 16-bit operands; its backward takes the
// classifier's 16-bit dlogits where they lie in the logits' rows (lm_head_backward), so every
// backward GEMM runs in the compute type. A forward whose operands mix types otherwise widens
// them to fp32 (the kScratchWide* slots), multiplies in fp32 and rounds each output once, as
// the CPU backend does; a backward refuses mixed types rather than run fp32 GEMMs unseen.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "amax_words.h"
#include "arg_checks.h"
#include "attention_paths.h"
#include "cuda_backend.h"
#include "device_memory.h"
#include "launch.h"
#include "operand_stats.h"
#include "scaled.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/numerics/moment_block.h"

namespace tg {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

namespace {

using gpu::Ctx;
using gpu::need_adamw;
using gpu::need_f32;
using gpu::need_moment;
using gpu::need_same;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const BackendOptions& o)
      : device_scale_(o.device_loss_scale), device_(device) {
    ctx_.opt = o;
    const int n = cuda_device_count();
    if (n == 0) throw Error("cuda backend: no CUDA device found");
    if (device < 0 || device >= n)
      throw Error(strf("cuda backend: no GPU %d (this machine has %d)", device, n));
    TG_CUDA_CHECK(cudaSetDevice(device));
    TG_CUDA_CHECK(cudaGetDeviceProperties(&ctx_.prop, device));
    TG_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    mem_.set_stream(ctx_.stream);
    TG_CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
    TG_CUBLAS_CHECK(cublasCreate(&ctx_.blas));
    TG_CUBLAS_CHECK(cublasSetStream(ctx_.blas, ctx_.stream));
    // 32 MiB of cuBLASLt workspace: what NVIDIA advises for Hopper.
    ctx_.lt_workspace_bytes = size_t(32) << 20;
    ctx_.lt_workspace = mem_.alloc(ctx_.lt_workspace_bytes);
    TG_CUBLAS_CHECK(cublasSetWorkspace(ctx_.blas, ctx_.lt_workspace, ctx_.lt_workspace_bytes));
    ctx_.scratch = [this](gpu::ScratchSlot s, size_t bytes) { return mem_.scratch(s, bytes); };
    ctx_.staging = &staging_;
    result_ = static_cast<float*>(mem_.alloc(64));
    cpu_ = make_cpu_backend(o);
  }
  int device_index() const override { return device_; }
  cudaStream_t stream() const { return ctx_.stream; }
  ~CudaBackend() override {
    cudaStreamSynchronize(ctx_.stream);
    ctx_.cudnn.reset();  // cuDNN's handle and graphs, before the stream they ran on
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
    gpu::staging_release(staging_);
    gpu::deferred_release(reads_, ctx_.stream);
    mem_.release_all();
    if (ctx_.blas) cublasDestroy(ctx_.blas);
    if (ctx_.lt) cublasLtDestroy(ctx_.lt);
    if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  }
  std::string name() const override { return "cuda"; }
  std::string device_model() const override { return ctx_.prop.name; }
  bool device_memory(size_t* free, size_t* total) const override {
    return cudaMemGetInfo(free, total) == cudaSuccess;
  }

  Tensor alloc(DType dtype, size_t numel) override {
    return Tensor{mem_.alloc(numel * dtype_size(dtype)), dtype, numel};
  }
  void free(Tensor t) override {
    token_shadow_.erase(t.data);
    amax_.forget(t);  // (not its tensor now)
    mem_.free(t.data);
  }
  // Through pinned staging (callers' buffers are pageable): the caller may reuse its buffer
  // at once, and the host does not wait for the device unless the staging is full. Token ids
  // (I32) are also remembered on the host, so that encoder_backward can group positions by
  // token without reading them back.
  void upload(Tensor dst, const void* host) override {
    amax_.forget(dst);
    gpu::upload(ctx_, dst.data, host, dst.bytes());
    if (dst.dtype == DType::I32) {
      const int32_t* h = static_cast<const int32_t*>(host);
      token_shadow_[dst.data].assign(h, h + dst.numel);
    }
  }
  void download(void* host, Tensor src) override {
    gpu::download(ctx_, host, src.data, src.bytes());
  }
  void zero(Tensor t) override {
    amax_.forget(t);
    TG_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), ctx_.stream));
  }
  size_t bytes_in_use() const override { return mem_.in_use(); }
  size_t peak_bytes() const override { return mem_.peak(); }
  void synchronize() override { TG_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }
  void queue_read(Tensor src) override {
    gpu::deferred_queue(reads_, ctx_.stream, src.data, src.bytes());
  }
  std::vector<std::vector<char>> take_reads() override {
    return gpu::deferred_take(reads_, ctx_.stream);
  }

  // The per-op profile's marks: CUDA events on the stream, reused across steps.
  size_t record_mark() override {
    if (marks_used_ == marks_.size()) {
      cudaEvent_t e;
      TG_CUDA_CHECK(cudaEventCreate(&e));
      marks_.push_back(e);
    }
    TG_CUDA_CHECK(cudaEventRecord(marks_[marks_used_], ctx_.stream));
    return marks_used_++;
  }
  std::vector<double> mark_times_ms() override {
    std::vector<double> t(marks_used_, 0.0);
    if (marks_used_ == 0) return t;
    TG_CUDA_CHECK(cudaEventSynchronize(marks_[marks_used_ - 1]));
    for (size_t i = 1; i < marks_used_; i++) {
      float ms = 0;
      TG_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[0], marks_[i]));
      t[i] = ms;
    }
    return t;
  }
  void clear_marks() override { marks_used_ = 0; }
  std::string take_gemm_log() override { return gpu::lt_take_log(); }

  void encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                       int C) override {
    need_same("encoder_forward", {out, wte, wpe});
    gpu::encoder_forward(ctx_, out.dtype, out.data, tokens.as<int32_t>(), wte.data, wpe.data, B, T,
                         C);
  }
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                        int C) override {
    need_same("encoder_backward", {dwte, dwpe, dout});
    auto it = token_shadow_.find(tokens.data);
    const int32_t* host = it != token_shadow_.end() && it->second.size() >= size_t(B) * T
                              ? it->second.data()
                              : nullptr;
    gpu::encoder_backward(ctx_, dout.dtype, dwte.data, dwpe.data, dout.data, tokens.as<int32_t>(),
                          host, B, T, C);
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b,
                         int N, int C, InputAmax amax) override {
    need_same("layernorm_forward", {out, inp, w, b});
    need_f32("layernorm_forward", mean);
    need_f32("layernorm_forward", rstd);
    gpu::layernorm_forward(ctx_, out.dtype, out.data, mean.as<float>(), rstd.as<float>(), inp.data,
                           w.data, b.data, N, C, amax_.input_word(amax, out));
  }
  void residual_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                  Tensor b, Tensor w, Tensor bias, int N, int C,
                                  InputAmax amax) override {
    need_same("residual_layernorm_forward", {res, out, a, b, w, bias});
    need_f32("residual_layernorm_forward", mean);
    need_f32("residual_layernorm_forward", rstd);
    amax_.forget(res);
    gpu::residual_layernorm_forward(ctx_, out.dtype, res.data, out.data, mean.as<float>(),
                                    rstd.as<float>(), a.data, b.data, w.data, bias.data, N, C,
                                    amax_.input_word(amax, out));
  }
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd, int N, int C) override {
    need_same("layernorm_backward", {dinp, dw, db, dout, inp, w});
    need_f32("layernorm_backward", mean);
    need_f32("layernorm_backward", rstd);
    gpu::layernorm_backward(ctx_, dout.dtype, dinp.data, dw.data, db.data, dout.data, inp.data,
                            w.data, mean.as<float>(), rstd.as<float>(), N, C);
  }

  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                      int OC) override {
    const bool direct = inp.dtype == w.dtype &&
                        (out.dtype == inp.dtype || out.dtype == DType::F32) &&
                        (!bias || bias.dtype == out.dtype);
    if (direct) {
      gpu::gemm(ctx_, false, true, N, OC, C, inp.dtype, inp.data, C, w.data, C, out.dtype, out.data,
                OC, 0.f, bias ? bias.data : nullptr);
      return;
    }
    float* o = wide(out, gpu::kScratchWideOut, false);
    gpu::gemm(ctx_, false, true, N, OC, C, DType::F32, wide(inp, gpu::kScratchWideA, true), C,
              wide(w, gpu::kScratchWideB, true), C, DType::F32, o, OC, 0.f,
              wide(bias, gpu::kScratchWideC, true));
    narrow_back(out, o);
  }
  void matmul_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                           int OC) override {
    const bool same = pre.dtype == out.dtype && inp.dtype == out.dtype && w.dtype == out.dtype &&
                      bias && bias.dtype == out.dtype;
    amax_.forget(pre);  // written here, taking no amax (a later linear reads out twice)
    amax_.forget(out);
    if (same && gpu::gemm_bias_gelu(ctx_, N, OC, C, out.dtype, inp.data, w.data, bias.data,
                                    pre.data, out.data))
      return;
    matmul_forward(pre, inp, w, bias, N, C, OC);
    gelu_forward(out, pre, size_t(N) * OC, InputAmax{});
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override {
    need_same("matmul_backward", {dinp, dw, dbias, dout, inp, w});
    backward_gemms(dinp, dw, dout, OC, inp, w, N, C, OC);
    if (dbias) gpu::bias_backward(ctx_, dout.dtype, dbias.data, dout.data, N, OC);
  }
  // The dlogits rows lie dlogits.numel / N apart: 2 Vp for the 16-bit gradient in the fp32
  // logits' rows (dlogits_view), Vp in fp32 models.
  void lm_head_backward(Tensor dinp, Tensor dw, Tensor dlogits, Tensor inp, Tensor w, int N, int C,
                        int Vp) override {
    need_same("lm_head_backward", {dinp, dw, dlogits, inp, w});
    backward_gemms(dinp, dw, dlogits, dlogits.numel / size_t(N), inp, w, N, C, Vp);
  }

  // ---- quantized linears (src/backends/cuda/matmul_scaled.cu, scaled.h; channel smoothing too)
  // ----
  bool has_block_scaled_linears() const override { return true; }
  // A scratch slot's size (cuda_scratch_bytes).
  size_t scratch_bytes(int s) const {
    return mem_.scratch_bytes(s);
  }
  // Linears with a slot (per-tensor scaled, NVFP4) leave their operands' amax bits in their
  // slot's words (device), read back by take_amaxes once per pass (fp8's histories): no wait per
  // GEMM. A forward reads its input once where the op that wrote inp took its amax (InputAmax),
  // its weight once where AdamW took it (WeightAmax), and at current scales keeps both amaxes
  // for its backward, which reads them when given the tensors that forward read (amax_words.h).
  void matmul_forward_scaled(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC,
                             const ScaledLinear& q) override {
    need_same("matmul_forward_scaled", {out, inp, w, bias});
    const auto f = amax_.forward(q, inp, w, N, C, OC);
    gpu::scaled_linear_forward(ctx_, out.dtype, out.data, inp.data, w.data, bias.data, N, C, OC, q,
                               f.slot, f.kept, f.input, f.weight);
  }
  void matmul_backward_scaled(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor w, int N, int C, int OC, const ScaledLinear& q) override {
    need_same("matmul_backward_scaled", {dinp, dw, dbias, dout, inp, w});
    if (!dinp) throw Error("cuda backend: matmul_backward_scaled needs dinp");
    const auto b = amax_.backward(q, inp, w, N, C, OC);
    gpu::scaled_linear_backward(ctx_, dout.dtype, dinp.data, dw.data, dbias.data, dout.data,
                                inp.data, w.data, N, C, OC, q, b.slot, b.kept);
  }
  std::vector<float> take_amaxes(int n_slots) override { return amax_.take(n_slots); }

  void set_quant_options(const QuantOptions& o) override {
    // A copy: the line names the path of the recipe the options were set with.
    have_recipe_ = o.recipe != nullptr;
    if (o.recipe) recipe_ = *o.recipe;
  }
  std::string fp8_path_name() const override {
    return gpu::scaled_path_name(ctx_, have_recipe_ ? &recipe_ : nullptr);
  }
  void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH,
                         InputAmax amax) override {
    need_same("attention_forward", {out, att, qkv});
    gpu::attention_forward(ctx_, out.dtype, out.data, att.data, qkv.data, B, T, C, NH,
                           amax_.input_word(amax, out));
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int B, int T, int C,
                          int NH) override {
    need_same("attention_backward", {dqkv, dout, qkv, att});
    gpu::attention_backward(ctx_, dout.dtype, dqkv.data, dout.data, qkv.data, att.data, B, T, C,
                            NH);
  }
  // cuda.attention (attention_choice.h, attention_paths.h).
  AttentionChoice attention_choice(int head_size, DType t) const override {
    return paths_.choice(head_size, t);
  }
  AttentionChoice settle_attention(const AttentionShape& s) override { return paths_.settle(s); }
  void settle_agreed_attention(const AttentionShape& s, const AttentionChoice& agreed) override {
    paths_.agree(s, agreed);
  }
  // The lse ops run cuDNN, the one CUDA path that keeps lse: the settled choice, cudnn.
  const AttentionChoice& need_cudnn(const char* op, const AttentionShape& s) {
    const AttentionChoice& c = paths_.settled(s);
    if (c.path != AttentionPath::Cudnn)
      throw Error(
          strf("%s: the CUDA backend keeps lse only through cuDNN, which "
               "cuda.attention=%s did not choose (%s)",
               op, enum_name(ctx_.opt.attention), c.reason.c_str()));
    return c;
  }
  // The path was settled at start-up; a cuDNN call that fails after that stops the run with
  // the reason instead of switching paths: the activations are sized for lse, and a resumed
  // run must repeat its steps bit for bit.
  template <typename F>
  void run_cudnn(const AttentionShape& s, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {  // the frontend's own errors are runtime_errors
      throw Error(
          strf("cuda.attention=%s: cuDNN attention failed mid-run at %s: %s; the run "
               "stops rather than change path (cuda.attention=cublas avoids cuDNN)",
               enum_name(ctx_.opt.attention), attention_shape_name(s).c_str(), e.what()));
    }
  }
  // Where cuDNN runs, a shape start-up did not build whose forward graph cuDNN refuses
  // (sampling's B 1 x T t can be one) runs its forward on the cuBLAS path, the probabilities
  // in the backward's dS slot: the same attention, for a forward whose lse nothing reads (lse
  // is not written, and attention_backward_lse refuses the shape). A cudnn that cannot run at
  // all (no cuDNN: a model built without settle_attention) stops at cuDNN's call instead.
  // cuDNN writes out itself and takes no amax (the linear it feeds then takes its own).
  void attention_forward_lse(Tensor out, Tensor lse, Tensor qkv, int B, int T, int C, int NH,
                             InputAmax amax) override {
    need_same("attention_forward_lse", {out, qkv});
    need_f32("attention_forward_lse", lse);
    const AttentionShape s{B, T, NH, C / NH, out.dtype};
    const bool runs = need_cudnn("attention_forward_lse", s).error.empty();
    if (runs && !paths_.forward_builds(s)) {
      void* att = ctx_.scratch(gpu::kScratchDS, size_t(B) * NH * T * T * dtype_size(s.t));
      gpu::attention_forward(ctx_, s.t, out.data, att, qkv.data, B, T, C, NH,
                             amax_.input_word(amax, out));
      return;
    }
    amax_.forget(out);
    run_cudnn(s, [&] {
      gpu::attention_forward_cudnn(ctx_, s.t, out.data, lse.as<float>(), qkv.data, B, T, C, NH);
    });
  }
  void attention_backward_lse(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int B,
                              int T, int C, int NH) override {
    need_same("attention_backward_lse", {dqkv, dout, qkv, out});
    need_f32("attention_backward_lse", lse);
    const AttentionShape s{B, T, NH, C / NH, dout.dtype};
    need_cudnn("attention_backward_lse", s);
    if (paths_.refused(s))
      throw Error(
          strf("attention_backward_lse: cuDNN refused its forward graph at %s, so the "
               "forward ran on the cuBLAS path and kept no lse to differentiate",
               attention_shape_name(s).c_str()));
    const float* l = lse.as<const float>();
    run_cudnn(s, [&] {
      gpu::attention_backward_cudnn(ctx_, s.t, dqkv.data, dout.data, qkv.data, out.data, l, B, T, C,
                                    NH);
    });
  }
  void gelu_forward(Tensor out, Tensor inp, size_t n, InputAmax amax) override {
    need_same("gelu_forward", {out, inp});
    gpu::gelu_forward(ctx_, out.dtype, out.data, inp.data, n, amax_.input_word(amax, out));
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override {
    need_same("gelu_backward", {dinp, inp, dout});
    gpu::gelu_backward(ctx_, dout.dtype, dinp.data, inp.data, dout.data, n);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override {
    need_same("residual_forward", {out, a, b});
    gpu::residual_forward(ctx_, out.dtype, out.data, a.data, b.data, n);
  }
  void classifier(Tensor logits, Tensor losses, Tensor targets, Tensor dlogits, float dloss, int N,
                  int V, int Vp) override {
    need_f32("classifier", logits);
    need_f32("classifier", losses);
    const Tensor d = dlogits ? dlogits : logits;
    const size_t ld = d.numel / size_t(N);
    if (ld < size_t(Vp))
      throw Error(strf("cuda backend: classifier: dlogits rows of %zu for Vp = %d", ld, Vp));
    gpu::classifier(ctx_, logits.as<float>(), losses.as<float>(), targets.as<int32_t>(), d.dtype,
                    d.data, ld, dloss, N, V, Vp);
  }
  double sum_squares(Tensor t) override {
    float r[2];
    norm(t, 1.f, r);
    return double(r[0]);
  }
  GradCheck unscale_check_norm(Tensor grads, double loss_scale) override {
    float r[2];
    norm(grads, float(1.0 / loss_scale), r);
    GradCheck g;
    g.norm = std::sqrt(double(r[0]));
    g.finite = r[1] == 0.f && std::isfinite(g.norm);
    return g;
  }
  const bool device_scale_;
  LossScaleDevice* ls_dev_ = nullptr;  // allocated on first use
  bool device_loss_scale() const override { return device_scale_; }
  void device_decide_step(Tensor grads, const LossScaleState& st, const LossScaleParams& p,
                          double clip) override {
    if (!ls_dev_) {
      ls_dev_ = static_cast<LossScaleDevice*>(mem_.alloc(sizeof(LossScaleDevice)));
      TG_CUDA_CHECK(cudaMemsetAsync(ls_dev_, 0, sizeof(LossScaleDevice), ctx_.stream));
    }
    // The host's state is the device's after the last report (or a resumed one): set it.
    gpu::upload(ctx_, &ls_dev_->state, &st, sizeof(st));
    // As unscale_check_norm: the squares of grads * float(1 / scale), then the decision.
    gpu::norm(ctx_, grads.dtype, grads.data, grads.numel, float(1.0 / st.scale), result_);
    gpu::loss_scale_decide(ctx_, ls_dev_, result_, p, clip);
  }
  void adamw_decided(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                     const AdamWArgs& a) override {
    if (!ls_dev_) throw Error("cuda backend: adamw_decided before device_decide_step");
    need_adamw(params, master, grads, m, v, a);
    gpu::adamw(ctx_, params.dtype, params.data, master.data, grads.data, m.data, v.data,
               params.numel, a, ls_dev_, amax_.weight_segments(params, a.weight_amax));
  }
  DeviceStepReport device_step_report() override {
    if (!ls_dev_) throw Error("cuda backend: device_step_report before device_decide_step");
    LossScaleDevice d;
    gpu::download(ctx_, &d, ls_dev_, sizeof(d));
    return {d.state, d.step};
  }
  void adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
             const AdamWArgs& a) override {
    need_adamw(params, master, grads, m, v, a);
    gpu::adamw(ctx_, params.dtype, params.data, master.data, grads.data, m.data, v.data,
               params.numel, a, nullptr, amax_.weight_segments(params, a.weight_amax));
  }
  TensorStats stats(Tensor t) override {
    // Telemetry, off the hot path: count on the host with the CPU reference.
    std::vector<char> host(t.bytes());
    download(host.data(), t);
    return cpu_->stats(Tensor{host.data(), t.dtype, t.numel});
  }
  void wire_encode(Tensor x, size_t part, WireFormat f, Tensor out) override {
    const size_t rows = x.numel / part;
    if (x.dtype != DType::F32 || rows * part != x.numel || out.bytes() < rows * wire_bytes(part, f))
      throw Error("cuda backend: wire_encode: buffers do not match their rows");
    gpu::wire_encode(ctx_, x.as<float>(), part, rows, f, out.as<uint8_t>());
  }
  void wire_sum(Tensor in, size_t part, WireFormat f, Tensor sum) override {
    if (sum.dtype != DType::F32 || sum.numel != part)
      throw Error("cuda backend: wire_sum: the sum is not fp32 of one row");
    gpu::wire_sum(ctx_, in.as<uint8_t>(), part, in.bytes() / wire_bytes(part, f), f,
                  sum.as<float>());
  }
  void wire_decode(Tensor in, size_t part, WireFormat f, Tensor out) override {
    const size_t rows = out.numel / part;
    if (out.dtype != DType::F32 || rows * part != out.numel ||
        in.bytes() < rows * wire_bytes(part, f))
      throw Error("cuda backend: wire_decode: buffers do not match their rows");
    gpu::wire_decode(ctx_, in.as<uint8_t>(), part, rows, f, out.as<float>());
  }
  void convert(Tensor dst, Tensor src, const Rounding& r) override {
    if (dst.numel != src.numel) throw Error("cuda backend: convert length mismatch");
    amax_.forget(dst);
    gpu::convert(ctx_, dst.dtype, dst.data, src.dtype, src.data, dst.numel, r);
  }
  // The probes' statistics reduced on the device (operand_stats.h): a measured step reads
  // back a few numbers per statistic, not the operands.
  std::unique_ptr<OperandView> operand_view(Tensor t, int rows, int cols) override {
    return gpu::make_operand_view(ctx_, t, rows, cols);
  }

 private:
  // fp32 view of t: its own memory when fp32, else a scratch slot (filled when `load`).
  float* wide(Tensor t, gpu::ScratchSlot s, bool load) {
    if (!t) return nullptr;
    if (t.dtype == DType::F32) return t.as<float>();
    float* p = static_cast<float*>(mem_.scratch(s, t.numel * 4));
    if (load) gpu::convert(ctx_, DType::F32, p, t.dtype, t.data, t.numel, Rounding{});
    return p;
  }
  void narrow_back(Tensor t, float* f) {
    if (t && t.dtype != DType::F32)
      gpu::convert(ctx_, t.dtype, t.data, DType::F32, f, t.numel, Rounding{});
  }
  // dinp = dout W (skipped when empty), dW += dout^T inp: one type throughout, fp32
  // accumulation; dout's rows lie ldo apart.
  void backward_gemms(Tensor dinp, Tensor dw, Tensor dout, size_t ldo, Tensor inp, Tensor w, int N,
                      int C, int OC) {
    const DType t = dout.dtype;
    if (dinp)
      gpu::gemm(ctx_, false, false, N, C, OC, t, dout.data, int(ldo), w.data, C, t, dinp.data, C,
                0.f, nullptr);
    gpu::gemm(ctx_, true, false, OC, C, N, t, dout.data, int(ldo), inp.data, C, t, dw.data, C, 1.f,
              nullptr);
  }
  // Sum of (x * inv_scale)^2 and the non-finite count, waited for.
  void norm(Tensor t, float inv_scale, float out[2]) {
    gpu::norm(ctx_, t.dtype, t.data, t.numel, inv_scale, result_);
    gpu::download(ctx_, out, result_, 2 * sizeof(float));
  }

  int device_ = 0;
  Ctx ctx_;
  gpu::DeviceMemory mem_;           // every allocation and the scratch slots
  std::vector<cudaEvent_t> marks_;  // the profile's time marks; marks_used_ of them recorded
  size_t marks_used_ = 0;
  float* result_ = nullptr;
  gpu::HostStaging staging_;  // pinned memory of upload / download (ctx_.staging)
  gpu::DeferredReads reads_;  // queue_read's pinned buffers
  std::unique_ptr<Backend> cpu_;
  std::map<void*, std::vector<int32_t>> token_shadow_;  // last upload into each I32 tensor
  QuantRecipe recipe_;  // the run's recipe (set_quant_options), for fp8_path_name
  bool have_recipe_ = false;
  gpu::AttentionPaths paths_{ctx_};  // the attention path per (head size, type)
  gpu::AmaxWords amax_{ctx_, mem_};  // the linears' amax words and what they are of
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(device, options);
}

namespace gpu {
cudaStream_t backend_stream(Backend& b) {
  auto* c = dynamic_cast<CudaBackend*>(&b);
  if (!c) throw Error(strf("NCCL needs the CUDA backend, not the %s one", b.name().c_str()));
  return c->stream();
}
}  // namespace gpu

size_t cuda_scratch_bytes(const Backend& b, int slot) {
  const auto* c = dynamic_cast<const CudaBackend*>(&b);
  return c ? c->scratch_bytes(slot) : 0;
}

}  // namespace tg
