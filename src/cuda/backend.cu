// backend.cu: CudaBackend, the Backend interface on one CUDA device.
//
// Memory is plain cudaMalloc (never managed memory), tracked per allocation for
// bytes_in_use / peak_bytes (rounded to 64 bytes like the CPU backend; scratch buffers and
// the cuBLASLt workspace count too). All work is queued on one stream; only the methods that
// return values to the host (download, sum_squares, unscale_check_norm, stats, the FP8
// reports) wait for it. encoder_backward groups token positions on the host from the copy
// of the last token upload (reading the tokens back, with a wait, only if there is none).
//
// Type rules are the CPU backend's: each op's tensors share an element type (fp32, bf16 or
// fp16; fp64 exists only on the CPU), statistics, logits and losses are fp32. Matmuls whose
// operands mix types (the lm_head's fp32 logits against 16-bit weights) widen every operand
// to fp32, multiply in fp32 and round each output once, exactly as the CPU backend does.
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "../cpu/cpu_backend.h"
#include "cuda_backend.h"
#include "launch.h"

namespace tg {

namespace gpu {
void cuda_fail(const char* what, const char* file, int line) {
  throw Error(strf("CUDA error at %s:%d: %s", file, line, what));
}
}  // namespace gpu

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

void need_same(const char* op, std::initializer_list<Tensor> ts) {
  DType t = DType::F32;
  bool first = true;
  for (const Tensor& x : ts) {
    if (!x) continue;
    if (!first && x.dtype != t)
      throw Error(strf("cuda backend: %s needs tensors of one type (%s and %s)", op, dtype_name(t),
                       dtype_name(x.dtype)));
    t = x.dtype;
    first = false;
  }
}
void need_f32(const char* op, Tensor t) {
  if (t && t.dtype != DType::F32)
    throw Error(strf("cuda backend: %s needs fp32 %s", op, dtype_name(t.dtype)));
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    const int n = cuda_device_count();
    if (n == 0) throw Error("cuda backend: no CUDA device found");
    if (device < 0 || device >= n)
      throw Error(strf("cuda backend: no GPU %d (this machine has %d)", device, n));
    TG_CUDA_CHECK(cudaSetDevice(device));
    TG_CUDA_CHECK(cudaGetDeviceProperties(&ctx_.prop, device));
    TG_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    TG_CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
    TG_CUBLAS_CHECK(cublasCreate(&ctx_.blas));
    TG_CUBLAS_CHECK(cublasSetStream(ctx_.blas, ctx_.stream));
    // 32 MiB of cuBLASLt workspace: what NVIDIA advises for Hopper.
    ctx_.lt_workspace_bytes = size_t(32) << 20;
    ctx_.lt_workspace = raw_alloc(ctx_.lt_workspace_bytes);
    TG_CUBLAS_CHECK(cublasSetWorkspace(ctx_.blas, ctx_.lt_workspace, ctx_.lt_workspace_bytes));
    ctx_.scratch = [this](gpu::ScratchSlot s, size_t bytes) { return scratch(s, bytes); };
    result_ = static_cast<float*>(raw_alloc(64));
    cpu_ = make_cpu_backend();
  }
  int device_index() const override { return device_; }
  ~CudaBackend() override {
    cudaStreamSynchronize(ctx_.stream);
    for (auto& kv : sizes_) cudaFree(kv.first);
    if (ctx_.blas) cublasDestroy(ctx_.blas);
    if (ctx_.lt) cublasLtDestroy(ctx_.lt);
    if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  }
  std::string name() const override { return "cuda"; }
  std::string device_model() const override { return ctx_.prop.name; }

  Tensor alloc(DType dtype, size_t numel) override {
    return Tensor{raw_alloc(numel * dtype_size(dtype)), dtype, numel};
  }
  void free(Tensor t) override {
    token_shadow_.erase(t.data);
    raw_free(t.data);
  }
  // From pageable host memory (all callers' buffers are): the copy is staged before the call
  // returns, so the caller may reuse its buffer at once, and the host does not wait for the
  // device. Token ids (I32) are also remembered on the host, so that encoder_backward can
  // group positions by token without reading them back.
  void upload(Tensor dst, const void* host) override {
    TG_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, ctx_.stream));
    if (dst.dtype == DType::I32) {
      const int32_t* h = static_cast<const int32_t*>(host);
      token_shadow_[dst.data].assign(h, h + dst.numel);
    }
  }
  void download(void* host, Tensor src) override {
    TG_CUDA_CHECK(
        cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, ctx_.stream));
    TG_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  void zero(Tensor t) override {
    TG_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), ctx_.stream));
  }
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }
  void synchronize() override { TG_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }

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
                         int N, int C) override {
    need_same("layernorm_forward", {out, inp, w, b});
    need_f32("layernorm_forward", mean);
    need_f32("layernorm_forward", rstd);
    gpu::layernorm_forward(ctx_, out.dtype, out.data, mean.as<float>(), rstd.as<float>(), inp.data,
                           w.data, b.data, N, C);
  }
  void residual_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                  Tensor b, Tensor w, Tensor bias, int N, int C) override {
    need_same("residual_layernorm_forward", {res, out, a, b, w, bias});
    need_f32("residual_layernorm_forward", mean);
    need_f32("residual_layernorm_forward", rstd);
    gpu::residual_layernorm_forward(ctx_, out.dtype, res.data, out.data, mean.as<float>(),
                                    rstd.as<float>(), a.data, b.data, w.data, bias.data, N, C);
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
    if (same && gpu::gemm_bias_gelu(ctx_, N, OC, C, out.dtype, inp.data, w.data, bias.data,
                                    pre.data, out.data))
      return;
    matmul_forward(pre, inp, w, bias, N, C, OC);
    gelu_forward(out, pre, size_t(N) * OC);
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override {
    bool same = true;
    for (const Tensor& x : {dinp, dw, dbias, inp, w})
      if (x && x.dtype != dout.dtype) same = false;
    if (same) {
      const DType t = dout.dtype;
      if (dinp)
        gpu::gemm(ctx_, false, false, N, C, OC, t, dout.data, OC, w.data, C, t, dinp.data, C, 0.f,
                  nullptr);
      gpu::gemm(ctx_, true, false, OC, C, N, t, dout.data, OC, inp.data, C, t, dw.data, C, 1.f,
                nullptr);
      if (dbias) gpu::bias_backward(ctx_, t, dbias.data, dout.data, N, OC);
      return;
    }
    float* di = wide(dinp, gpu::kScratchWideOut, false);
    float* dwf = wide(dw, gpu::kScratchWideDw, true);
    float* dbf = wide(dbias, gpu::kScratchWideDb, true);
    const float* g = wide(dout, gpu::kScratchWideC, true);
    const float* a = wide(inp, gpu::kScratchWideA, true);
    const float* b = wide(w, gpu::kScratchWideB, true);
    wide_backward(di, dwf, dbf, g, a, b, N, C, OC);
    narrow_back(dinp, di);
    narrow_back(dw, dwf);
    narrow_back(dbias, dbf);
  }

  Fp8Report matmul_forward_fp8(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC,
                               const Fp8Quant quant[2]) override {
    Fp8Report rep;
    float* a = copy_wide(inp, gpu::kScratchWideA);
    float* b = copy_wide(w, gpu::kScratchWideB);
    rep.scale[0] = qdq(a, inp.numel, quant[0], /*e4m3=*/true, &rep.amax[0]);
    rep.scale[1] = qdq(b, w.numel, quant[1], true, &rep.amax[1]);
    float* o = wide(out, gpu::kScratchWideOut, false);
    gpu::gemm(ctx_, false, true, N, OC, C, DType::F32, a, C, b, C, DType::F32, o, OC, 0.f,
              wide(bias, gpu::kScratchWideC, true));
    narrow_back(out, o);
    return rep;
  }
  Fp8Report matmul_backward_fp8(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                                Tensor w, int N, int C, int OC, const Fp8Quant& gq, float inp_scale,
                                float w_scale) override {
    Fp8Report rep;
    float* g = copy_wide(dout, gpu::kScratchWideC);
    if (dbias) {  // the bias gradient comes from the unquantized gradient
      float* dbf = wide(dbias, gpu::kScratchWideDb, true);
      gpu::bias_backward(ctx_, DType::F32, dbf, g, N, OC);
      narrow_back(dbias, dbf);
    }
    rep.scale[0] = qdq(g, dout.numel, gq, /*e4m3=*/false, &rep.amax[0]);
    float* a = copy_wide(inp, gpu::kScratchWideA);
    float* b = copy_wide(w, gpu::kScratchWideB);
    float unused;
    qdq(a, inp.numel, Fp8Quant{inp_scale, false, 0}, true, &unused);
    qdq(b, w.numel, Fp8Quant{w_scale, false, 0}, true, &unused);
    float* di = wide(dinp, gpu::kScratchWideOut, false);
    float* dwf = wide(dw, gpu::kScratchWideDw, true);
    wide_backward(di, dwf, nullptr, g, a, b, N, C, OC);
    narrow_back(dinp, di);
    narrow_back(dw, dwf);
    return rep;
  }

  void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH) override {
    need_same("attention_forward", {out, att, qkv});
    gpu::attention_forward(ctx_, out.dtype, out.data, att.data, qkv.data, B, T, C, NH);
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int B, int T, int C,
                          int NH) override {
    need_same("attention_backward", {dqkv, dout, qkv, att});
    gpu::attention_backward(ctx_, dout.dtype, dqkv.data, dout.data, qkv.data, att.data, B, T, C,
                            NH);
  }
  void gelu_forward(Tensor out, Tensor inp, size_t n) override {
    need_same("gelu_forward", {out, inp});
    gpu::gelu_forward(ctx_, out.dtype, out.data, inp.data, n);
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override {
    need_same("gelu_backward", {dinp, inp, dout});
    gpu::gelu_backward(ctx_, dout.dtype, dinp.data, inp.data, dout.data, n);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override {
    need_same("residual_forward", {out, a, b});
    gpu::residual_forward(ctx_, out.dtype, out.data, a.data, b.data, n);
  }
  void classifier(Tensor logits, Tensor losses, Tensor targets, float dloss, int N, int V,
                  int Vp) override {
    need_f32("classifier", logits);
    need_f32("classifier", losses);
    gpu::classifier(ctx_, logits.as<float>(), losses.as<float>(), targets.as<int32_t>(), dloss, N,
                    V, Vp);
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
  void adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
             const AdamWArgs& a) override {
    need_same("adamw", {params, grads});
    need_f32("adamw master", master);
    need_f32("adamw m", m);
    need_f32("adamw v", v);
    gpu::adamw(ctx_, params.dtype, params.data, master.as<float>(), grads.data, m.as<float>(),
               v.as<float>(), master.numel, a);
  }
  TensorStats stats(Tensor t) override {
    // Telemetry, off the hot path: count on the host with the CPU reference.
    std::vector<char> host(t.bytes());
    download(host.data(), t);
    return cpu_->stats(Tensor{host.data(), t.dtype, t.numel});
  }
  void convert(Tensor dst, Tensor src, const Rounding& r) override {
    if (dst.numel != src.numel) throw Error("cuda backend: convert length mismatch");
    gpu::convert(ctx_, dst.dtype, dst.data, src.dtype, src.data, dst.numel, r);
  }

 private:
  void* raw_alloc(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, rounded ? rounded : 64);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error(strf("out of GPU memory allocating %zu bytes (%zu in use): %s", bytes, in_use_,
                       cudaGetErrorString(e)));
    }
    sizes_[p] = rounded;
    in_use_ += rounded;
    if (in_use_ > peak_) peak_ = in_use_;
    return p;
  }
  void raw_free(void* p) {
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    // cudaFree waits for the device, so queued work that still reads p finishes first.
    TG_CUDA_CHECK(cudaFree(p));
    in_use_ -= it->second;
    sizes_.erase(it);
  }
  void* scratch(gpu::ScratchSlot s, size_t bytes) {
    auto& buf = scratch_[s];
    if (buf.second < bytes) {
      if (buf.first) raw_free(buf.first);
      buf.first = nullptr;
      buf.second = 0;
      buf.first = raw_alloc(bytes);
      buf.second = bytes;
    }
    return buf.first;
  }
  // fp32 view of t: its own memory when fp32, else a scratch slot (filled when `load`).
  float* wide(Tensor t, gpu::ScratchSlot s, bool load) {
    if (!t) return nullptr;
    if (t.dtype == DType::F32) return t.as<float>();
    float* p = static_cast<float*>(scratch(s, t.numel * 4));
    if (load) gpu::convert(ctx_, DType::F32, p, t.dtype, t.data, t.numel, Rounding{});
    return p;
  }
  // A private fp32 copy of t (to quantize in place).
  float* copy_wide(Tensor t, gpu::ScratchSlot s) {
    float* p = static_cast<float*>(scratch(s, t.numel * 4));
    gpu::convert(ctx_, DType::F32, p, t.dtype, t.data, t.numel, Rounding{});
    return p;
  }
  void narrow_back(Tensor t, float* f) {
    if (t && t.dtype != DType::F32)
      gpu::convert(ctx_, t.dtype, t.data, DType::F32, f, t.numel, Rounding{});
  }
  void wide_backward(float* di, float* dwf, float* dbf, const float* g, const float* a,
                     const float* b, int N, int C, int OC) {
    if (di)
      gpu::gemm(ctx_, false, false, N, C, OC, DType::F32, g, OC, b, C, DType::F32, di, C, 0.f,
                nullptr);
    gpu::gemm(ctx_, true, false, OC, C, N, DType::F32, g, OC, a, C, DType::F32, dwf, C, 1.f,
              nullptr);
    if (dbf) gpu::bias_backward(ctx_, DType::F32, dbf, g, N, OC);
  }
  // Sum of (x * inv_scale)^2 and the non-finite count, waited for.
  void norm(Tensor t, float inv_scale, float out[2]) {
    gpu::norm(ctx_, t.dtype, t.data, t.numel, inv_scale, result_);
    TG_CUDA_CHECK(
        cudaMemcpyAsync(out, result_, 2 * sizeof(float), cudaMemcpyDeviceToHost, ctx_.stream));
    TG_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  // As the CPU backend's qdq: amax (waited for), the scale, then quantize-dequantize.
  float qdq(float* x, size_t n, const Fp8Quant& q, bool e4m3, float* amax) {
    gpu::amax(ctx_, x, n, result_);
    float m = 0;
    TG_CUDA_CHECK(cudaMemcpyAsync(&m, result_, sizeof m, cudaMemcpyDeviceToHost, ctx_.stream));
    TG_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    const bool finite = std::isfinite(m);
    *amax = m;
    const float fmax = e4m3 ? E4M3_MAX : E5M2_MAX;
    const float s = q.current ? fp8_scale_from_amax(*amax, fmax, q.margin) : q.scale;
    gpu::qdq(ctx_, x, n, s, e4m3, finite);
    return s;
  }

  int device_ = 0;
  Ctx ctx_;
  std::map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
  std::pair<void*, size_t> scratch_[gpu::kNumScratch] = {};
  float* result_ = nullptr;
  std::unique_ptr<Backend> cpu_;
  std::map<void*, std::vector<int32_t>> token_shadow_;  // last upload into each I32 tensor
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace tg
