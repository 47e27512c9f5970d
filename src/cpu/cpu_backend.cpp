#include "cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <map>

#include "ops.h"

namespace tg {

namespace {

[[noreturn]] void unsupported(const char* op, DType t) {
  throw Error(strf("cpu backend: %s does not support %s tensors", op, dtype_name(t)));
}

// Calls f with a typed null pointer selecting float or double from the tensor's dtype.
template <typename F>
void dispatch(const char* op, const Tensor& t, F&& f) {
  switch (t.dtype) {
    case DType::F32: f(static_cast<float*>(nullptr)); break;
    case DType::F64: f(static_cast<double*>(nullptr)); break;
    default: unsupported(op, t.dtype);
  }
}

template <typename T>
T* P(const Tensor& t) {
  return static_cast<T*>(t.data);
}

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    for (auto& kv : sizes_) std::free(kv.first);
  }
  std::string name() const override { return "cpu"; }

  Tensor alloc(DType dtype, size_t numel) override {
    size_t bytes = numel * dtype_size(dtype);
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw Error(strf("out of host memory allocating %zu bytes", bytes));
    sizes_[p] = rounded;
    in_use_ += rounded;
    if (in_use_ > peak_) peak_ = in_use_;
    return Tensor{p, dtype, numel};
  }
  void free(Tensor t) override {
    auto it = sizes_.find(t.data);
    if (it == sizes_.end()) return;
    in_use_ -= it->second;
    std::free(it->first);
    sizes_.erase(it);
  }
  void upload(Tensor dst, const void* host) override { memcpy(dst.data, host, dst.bytes()); }
  void download(void* host, Tensor src) override { memcpy(host, src.data, src.bytes()); }
  void zero(Tensor t) override { memset(t.data, 0, t.bytes()); }
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }

  void encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                       int C) override {
    dispatch("encoder_forward", out, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::encoder_forward(P<E>(out), P<int32_t>(tokens), P<E>(wte), P<E>(wpe), B, T, C);
    });
  }
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                        int C) override {
    dispatch("encoder_backward", dout, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::encoder_backward(P<E>(dwte), P<E>(dwpe), P<E>(dout), P<int32_t>(tokens), B, T, C);
    });
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b,
                         int N, int C) override {
    dispatch("layernorm_forward", out, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_forward(P<E>(out), P<E>(mean), P<E>(rstd), P<E>(inp), P<E>(w), P<E>(b), N, C);
    });
  }
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd, int N, int C) override {
    dispatch("layernorm_backward", dout, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_backward(P<E>(dinp), P<E>(dw), P<E>(db), P<E>(dout), P<E>(inp), P<E>(w),
                              P<E>(mean), P<E>(rstd), N, C);
    });
  }
  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                      int OC) override {
    dispatch("matmul_forward", out, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_forward(P<E>(out), P<E>(inp), P<E>(w), P<E>(bias), N, C, OC);
    });
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override {
    dispatch("matmul_backward", dout, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_backward(P<E>(dinp), P<E>(dw), P<E>(dbias), P<E>(dout), P<E>(inp), P<E>(w), N, C,
                           OC);
    });
  }
  void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH) override {
    dispatch("attention_forward", out, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_forward(P<E>(out), P<E>(att), P<E>(qkv), B, T, C, NH);
    });
  }
  void attention_backward(Tensor dqkv, Tensor scratch, Tensor dout, Tensor qkv, Tensor att, int B,
                          int T, int C, int NH) override {
    dispatch("attention_backward", dout, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_backward(P<E>(dqkv), P<E>(scratch), P<E>(dout), P<E>(qkv), P<E>(att), B, T, C,
                              NH);
    });
  }
  void gelu_forward(Tensor out, Tensor inp, size_t n) override {
    dispatch("gelu_forward", out, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_forward(P<E>(out), P<E>(inp), n);
    });
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override {
    dispatch("gelu_backward", dout, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_backward(P<E>(dinp), P<E>(inp), P<E>(dout), n);
    });
  }
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override {
    dispatch("residual_forward", out, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::residual_forward(P<E>(out), P<E>(a), P<E>(b), n);
    });
  }
  void classifier(Tensor logits, Tensor losses, Tensor targets, float dloss, int N, int V,
                  int Vp) override {
    dispatch("classifier", logits, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::classifier(P<E>(logits), P<E>(losses), P<int32_t>(targets), dloss, N, V, Vp);
    });
  }
  double sum_squares(Tensor t) override {
    double s = 0;
    dispatch("sum_squares", t, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      s = cpu::sum_squares(P<E>(t), t.numel);
    });
    return s;
  }
  void adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
             const AdamWArgs& a) override {
    dispatch("adamw", master, [&](auto* tag) {
      using E = std::remove_pointer_t<decltype(tag)>;
      cpu::adamw(P<E>(params), P<E>(master), P<E>(grads), P<E>(m), P<E>(v), master.numel, a.lr,
                 a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale, a.step);
    });
  }

 private:
  std::map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tg
