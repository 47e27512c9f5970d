#include "cpu_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>
#include <vector>

#include "gemm_bf16.h"
#include "host_operand_view.h"
#include "ops.h"
#include "tensor_access.h"
#include "tensor_scaled_linears.h"
#include "src/base/host_memory.h"
#include "src/base/test_hooks.h"
#include "src/numerics/moment_block.h"

namespace tg {

namespace {

using cpu::all_wide_and_same;
using cpu::bf16;
using cpu::copy_wide;
using cpu::dispatch;
using cpu::dispatch_wide;
using cpu::f16;
using cpu::hardware_bf16;
using cpu::narrow_back;
using cpu::P;
using cpu::unsupported;
using cpu::wide;

// A moment tensor stored as its format says: the master's own type for plain formats, the
// format's 16-bit type (fp32 masters only) otherwise.
// A moment tensor fits its format and the update's type (fp32, or fp64 in fp64 models):
// plain moments are of that type, 16-bit codes need an fp32 update.
bool moment_matches(const Tensor& t, DType update, const MomentFormat& f) {
  if (moment_is_plain(f)) return t.dtype == update;
  return t.dtype == f.dtype && update == DType::F32;
}

// Calls f with m and v as typed pointers: the update's type M itself, or 16-bit codes (fp32
// updates only).
template <typename M, typename F>
void with_moments(Tensor m, Tensor v, F&& f) {
  auto as = [](Tensor t, auto&& g) {
    if constexpr (std::is_same_v<M, float>)
      if (t.dtype != DType::F32) return g(P<uint16_t>(t));
    g(P<M>(t));
  };
  as(m, [&](auto* pm) { as(v, [&](auto* pv) { f(pm, pv); }); });
}

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    for (auto& kv : sizes_) std::free(kv.first);
  }
  // cuda.attention=cudnn's twin keeps lse as cuDNN does (and so does an old config's flash,
  // read as cudnn); auto keeps the reference (the CPU has no cuDNN, and a CPU run's numbers
  // must not move with a GPU key).
  explicit CpuBackend(const BackendOptions& o)
      : lse_(effective_attention(o.attention) == AttentionRequest::Cudnn),
        attention_(o.attention) {}
  std::string name() const override { return "cpu"; }
  const bool lse_;
  const AttentionRequest attention_;  // cuda.attention, named on the start-up line

  Tensor alloc(DType dtype, size_t numel) override {
    size_t bytes = numel * dtype_size(dtype);
    size_t rounded = (bytes + 63) / 64 * 64;
    const size_t limit = test_hooks::host_alloc_limit();
    void* p = limit && in_use_ + rounded > limit ? nullptr
                                                 : std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw OutOfMemory(bytes, AllocPurpose::current());
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
    dispatch("encoder_forward", out.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::encoder_forward(P<E>(out), P<int32_t>(tokens), P<E>(wte), P<E>(wpe), B, T, C);
    });
  }
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                        int C) override {
    dispatch("encoder_backward", dout.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::encoder_backward(P<E>(dwte), P<E>(dwpe), P<E>(dout), P<int32_t>(tokens), B, T, C);
    });
  }
  // (InputAmax: the CPU's quantizer takes its own amax, Backend's InputAmax.)
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b,
                         int N, int C, InputAmax) override {
    dispatch("layernorm_forward", out.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      using A = cpu::acc_t<E>;
      cpu::layernorm_forward(P<E>(out), P<A>(mean), P<A>(rstd), P<E>(inp), P<E>(w), P<E>(b), N, C);
    });
  }
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd, int N, int C) override {
    dispatch("layernorm_backward", dout.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      using A = cpu::acc_t<E>;
      cpu::layernorm_backward(P<E>(dinp), P<E>(dw), P<E>(db), P<E>(dout), P<E>(inp), P<E>(w),
                              P<A>(mean), P<A>(rstd), N, C);
    });
  }

  // Matmuls with 16-bit operands widen them to fp32, multiply with sgemm (fp32 accumulate),
  // and round each output once. bf16 operands go to the bf16 GEMM instead while
  // cpu.narrow_gemm selects the hardware path (exact products, fp32 sums in another order).
  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                      int OC) override {
    if (all_wide_and_same({out, inp, w, bias})) {
      dispatch_wide("matmul_forward", out.dtype, [&](auto* tag) {
        using E = TG_ELEM(tag);
        cpu::matmul_forward(P<E>(out), P<E>(inp), P<E>(w), P<E>(bias), N, C, OC);
      });
      return;
    }
    float* o = wide(out, s_.out, false);
    if (hardware_bf16({inp, w})) {
      cpu::matmul_forward_bf16(o, P<bf16>(inp), P<bf16>(w), wide(bias, s_.c, true), 1.0f, N, C, OC);
      narrow_back(out, o);
      return;
    }
    cpu::matmul_forward(o, wide(inp, s_.a, true), wide(w, s_.b, true), wide(bias, s_.c, true), N, C,
                        OC);
    narrow_back(out, o);
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override {
    if (all_wide_and_same({dinp, dw, dbias, dout, inp, w})) {
      dispatch_wide("matmul_backward", dout.dtype, [&](auto* tag) {
        using E = TG_ELEM(tag);
        cpu::matmul_backward(P<E>(dinp), P<E>(dw), P<E>(dbias), P<E>(dout), P<E>(inp), P<E>(w), N,
                             C, OC);
      });
      return;
    }
    float* di = wide(dinp, s_.out, false);
    float* dwf = wide(dw, s_.dw, true);
    float* dbf = wide(dbias, s_.db, true);
    if (hardware_bf16({dout, inp, w})) {
      cpu::matmul_backward_bf16(di, dwf, P<bf16>(dout), P<bf16>(inp), P<bf16>(w), N, C, OC);
      if (dbf) cpu::bias_backward(dbf, P<bf16>(dout), N, OC);
    } else {
      cpu::matmul_backward(di, dwf, dbf, wide(dout, s_.a, true), wide(inp, s_.b, true),
                           wide(w, s_.c, true), N, C, OC);
    }
    narrow_back(dinp, di);
    narrow_back(dw, dwf);
    narrow_back(dbias, dbf);
  }

  // The lm_head from the classifier's dlogits (backend.h's dlogits_view): in the logits' own
  // rows they are any matmul_backward's dout; 16-bit rows 2 Vp apart go to the bf16 GEMM as
  // they lie, or are widened a block at a time (exact path), never as a whole fp32 copy.
  void lm_head_backward(Tensor dinp, Tensor dw, Tensor dlogits, Tensor inp, Tensor w, int N, int C,
                        int Vp) override {
    const size_t ld = dlogits.numel / size_t(N);
    if (ld == size_t(Vp))
      return matmul_backward(dinp, dw, Tensor{}, dlogits.slice(0, size_t(N) * Vp), inp, w, N, C,
                             Vp);
    for (const Tensor& t : {dinp, dw, inp, w})
      if (t.dtype != dlogits.dtype)
        throw Error(strf("cpu backend: lm_head_backward of %s dlogits with %s operands",
                         dtype_name(dlogits.dtype), dtype_name(t.dtype)));
    float* di = wide(dinp, s_.out, false);
    float* dwf = wide(dw, s_.dw, true);
    if (hardware_bf16({dlogits, inp, w})) {
      cpu::matmul_backward_bf16(di, dwf, P<bf16>(dlogits), P<bf16>(inp), P<bf16>(w), N, C, Vp, 1.0f,
                                1.0f, ld);
    } else if (dlogits.dtype == DType::BF16 || dlogits.dtype == DType::F16) {
      const float* a = wide(inp, s_.b, true);
      const float* b = wide(w, s_.c, true);
      if (dlogits.dtype == DType::BF16)
        cpu::matmul_backward_narrow_dout(di, dwf, P<bf16>(dlogits), ld, a, b, N, C, Vp);
      else
        cpu::matmul_backward_narrow_dout(di, dwf, P<f16>(dlogits), ld, a, b, N, C, Vp);
    } else {
      unsupported("lm_head_backward with strided dlogits", dlogits.dtype);
    }
    narrow_back(dinp, di);
    narrow_back(dw, dwf);
  }

  // QuantOptions are ignored: the CPU accumulates every FP8 product exactly in fp32 (fp32
  // GEMMs of the dequantized operands), which is what precision.fp8.fast_accum=false asks
  // of a GPU; its fast-accumulation forward is approximated by this within the tests'
  // tolerances.
  void set_quant_options(const QuantOptions&) override {}
  // The start-up line's path: the formats are emulated bit for bit; the GEMMs take the bf16
  // kernel (AMX or AVX512-BF16, cpu.narrow_gemm) where the dequantized operands are exact in
  // bf16.
  std::string fp8_path_name() const override {
    return std::string(
               "CPU emulation, bit-faithful (operands rounded to the recipe's formats and "
               "scales); GEMMs: ") +
           (cpu::narrow_gemm_hardware()
                ? std::string("bf16 products with fp32 sums (") +
                      cpu::narrow_gemm_name(cpu::narrow_gemm()) +
                      ") where the dequantized operands are exact in bf16, else fp32"
                : "fp32 GEMMs of the dequantized operands");
  }
  bool has_block_scaled_linears() const override { return true; }
  void matmul_forward_scaled(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC,
                             const ScaledLinear& q) override {
    if (per_tensor_scaled(q)) return fp8_.forward(s_, out, inp, w, bias, N, C, OC, q);
    float* a = copy_wide(inp, s_.a);
    float* b = copy_wide(w, s_.b);
    float* o = wide(out, s_.out, false);
    cpu::matmul_forward_scaled(o, a, b, wide(bias, s_.c, true), N, C, OC, *q.recipe, q.seed);
    narrow_back(out, o);
  }
  void matmul_backward_scaled(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor w, int N, int C, int OC, const ScaledLinear& q) override {
    if (per_tensor_scaled(q) && cpu::narrow_gemm_hardware())
      return fp8_.backward_codes(s_, dinp, dw, dbias, dout, inp, w, N, C, OC, q);
    float* g = copy_wide(dout, s_.g);
    if (dbias) {  // the bias gradient comes from the unquantized gradient
      float* dbf = wide(dbias, s_.db, true);
      cpu::bias_backward(dbf, g, N, OC);
      narrow_back(dbias, dbf);
    }
    if (per_tensor_scaled(q)) return fp8_.backward(s_, dinp, dw, g, inp, w, N, C, OC, q);
    float* di = wide(dinp, s_.out, false);
    float* dwf = wide(dw, s_.dw, true);
    if (inp.dtype == DType::BF16 && w.dtype == DType::BF16) {  // widened as they are transposed
      cpu::matmul_backward_scaled(di, dwf, g, P<bf16>(inp), P<bf16>(w), N, C, OC, *q.recipe, q.seed,
                                  scaled_);
    } else {
      cpu::matmul_backward_scaled(di, dwf, g, wide(inp, s_.a, true), wide(w, s_.b, true), N, C, OC,
                                  *q.recipe, q.seed, scaled_);
    }
    narrow_back(dinp, di);
    narrow_back(dw, dwf);
  }
  std::vector<float> take_amaxes(int n_slots) override { return fp8_.take_amaxes(n_slots); }

  void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH,
                         InputAmax) override {
    dispatch("attention_forward", out.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::attention_forward(P<E>(out), P<E>(att), P<E>(qkv), B, T, C, NH);
    });
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int B, int T, int C,
                          int NH) override {
    dispatch("attention_backward", dout.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::attention_backward(P<E>(dqkv), P<E>(dout), P<E>(qkv), P<E>(att), B, T, C, NH);
    });
  }
  // The CPU keeps the att path (the reference) unless cuda.attention=cudnn (or flash, read as
  // cudnn): then it runs the lse twin, so that a GPU run with cuDNN attention has a CPU run to
  // compare with.
  AttentionChoice attention_choice(int, DType) const override {
    AttentionChoice c;
    if (!lse_) return c;
    c.path = AttentionPath::CpuLse;
    c.lse = true;
    c.reason = std::string("the CPU's lse twin of cuda.attention=") + enum_name(attention_) +
               (attention_ == AttentionRequest::Flash ? " (read as cudnn)" : "") +
               ": per-row logsumexp kept, no T x T probabilities";
    return c;
  }
  void attention_forward_lse(Tensor out, Tensor lse, Tensor qkv, int B, int T, int C, int NH,
                             InputAmax) override {
    dispatch("attention_forward_lse", out.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      using A = cpu::acc_t<E>;
      cpu::attention_forward_lse(P<E>(out), P<A>(lse), P<E>(qkv), B, T, C, NH);
    });
  }
  void attention_backward_lse(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int B,
                              int T, int C, int NH) override {
    dispatch("attention_backward_lse", dout.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      using A = cpu::acc_t<E>;
      cpu::attention_backward_lse(P<E>(dqkv), P<E>(dout), P<E>(qkv), P<E>(out), P<A>(lse), B, T, C,
                                  NH);
    });
  }
  void gelu_forward(Tensor out, Tensor inp, size_t n, InputAmax) override {
    dispatch("gelu_forward", out.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::gelu_forward(P<E>(out), P<E>(inp), n);
    });
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override {
    dispatch("gelu_backward", dout.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::gelu_backward(P<E>(dinp), P<E>(inp), P<E>(dout), n);
    });
  }
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override {
    dispatch("residual_forward", out.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::residual_forward(P<E>(out), P<E>(a), P<E>(b), n);
    });
  }
  void classifier(Tensor logits, Tensor losses, Tensor targets, Tensor dlogits, float dloss, int N,
                  int V, int Vp) override {
    const Tensor d = dlogits ? dlogits : logits;
    const size_t ld = d.numel / size_t(N);
    auto refuse = [&] {
      throw Error(strf("cpu backend: classifier: no %s gradient of %s logits in rows of %zu",
                       dtype_name(d.dtype), dtype_name(logits.dtype), ld));
    };
    if (ld < size_t(Vp)) refuse();
    dispatch_wide("classifier", logits.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      dispatch("classifier gradient", d.dtype, [&](auto* gtag) {
        using G = TG_ELEM(gtag);
        if constexpr (std::is_same_v<G, E> || (std::is_same_v<E, float> && sizeof(G) == 2))
          cpu::classifier(P<E>(logits), P<E>(losses), P<int32_t>(targets), P<G>(d), ld, dloss, N, V,
                          Vp);
        else
          refuse();
      });
    });
  }
  double sum_squares(Tensor t) override {
    double s = 0;
    dispatch("sum_squares", t.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      s = cpu::sum_squares(P<E>(t), t.numel);
    });
    return s;
  }
  void adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
             const AdamWArgs& a) override {
    if (moment_is_blocked(a.m_format) || moment_is_blocked(a.v_format))
      return adamw_blocked(params, master, grads, m, v, a);
    if (master_in_weights(a.master)) return adamw_bf16_master(params, master, grads, m, v, a);
    if (grads.dtype != params.dtype || !moment_matches(m, master.dtype, a.m_format) ||
        !moment_matches(v, master.dtype, a.v_format))
      throw Error("cpu backend: adamw tensor types do not match");
    dispatch("adamw", params.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      using M = cpu::acc_t<E>;
      if (master.dtype != (std::is_same_v<M, double> ? DType::F64 : DType::F32))
        unsupported("adamw master", master.dtype);
      with_moments<M>(m, v, [&](auto* pm, auto* pv) {
        cpu::adamw(P<E>(params), P<M>(master), P<E>(grads), pm, pv, master.numel, a);
      });
    });
  }
  // Either moment in FP8 blocks: their meta arrives in a.m_meta / a.v_meta.
  void adamw_blocked(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                     const AdamWArgs& a) {
    const size_t n = params.numel;
    auto span = [&](Tensor t, Tensor meta, const MomentFormat& f, uint64_t seed, const char* what) {
      const bool ok = moment_matches(t, DType::F32, f) && t.numel == n &&
                      (!moment_is_blocked(f) ||
                       meta.numel == moment_blocks(n, f.block) * size_t(moment_meta_words(f)));
      if (!ok) throw Error(strf("cpu backend: adamw: %s does not match its format", what));
      return cpu::MomentSpan{t.data, moment_is_blocked(f) ? P<float>(meta) : nullptr, f, seed};
    };
    const cpu::MomentSpan sm = span(m, a.m_meta, a.m_format, a.m_seed, "Adam's m"),
                          sv = span(v, a.v_meta, a.v_format, a.v_seed, "Adam's v");
    if (grads.dtype != params.dtype) throw Error("cpu backend: adamw tensor types do not match");
    if (master_in_weights(a.master)) {
      const bool kahan = a.master == MasterFormat::BF16Kahan;
      if (params.dtype != DType::BF16 || (kahan && comp_mismatch(master, n)))
        throw Error("cpu backend: adamw with bf16 master weights: tensor types do not match");
      return cpu::adamw_bf16_master_blocked(P<bf16>(params), kahan ? P<bf16>(master) : nullptr,
                                            P<bf16>(grads), sm, sv, n, a);
    }
    if (master.dtype != DType::F32 || master.numel != n)
      throw Error("cpu backend: adamw with fp8 moments keeps an fp32 master");
    dispatch("adamw", params.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      if constexpr (std::is_same_v<E, double>)
        unsupported("adamw with fp8 moments", params.dtype);
      else
        cpu::adamw_blocked(P<E>(params), P<float>(master), P<E>(grads), sm, sv, n, a);
    });
  }
  static bool comp_mismatch(Tensor comp, size_t n) {
    return comp.dtype != DType::BF16 || comp.numel != n;
  }
  // precision.state.master=bf16-sr (master unused: the weights are it) or bf16-kahan (master
  // is the bf16 compensation buffer).
  void adamw_bf16_master(Tensor params, Tensor comp, Tensor grads, Tensor m, Tensor v,
                         const AdamWArgs& a) {
    const bool kahan = a.master == MasterFormat::BF16Kahan;
    if (params.dtype != DType::BF16 || grads.dtype != DType::BF16 ||
        (kahan && comp_mismatch(comp, params.numel)) ||
        !moment_matches(m, DType::F32, a.m_format) || !moment_matches(v, DType::F32, a.v_format))
      throw Error(strf("cpu backend: adamw with %s master weights: tensor types do not match",
                       master_format_name(a.master)));
    with_moments<float>(m, v, [&](auto* pm, auto* pv) {
      cpu::adamw_bf16_master(P<bf16>(params), kahan ? P<bf16>(comp) : nullptr, P<bf16>(grads), pm,
                             pv, params.numel, a);
    });
  }
  TensorStats stats(Tensor t) override {
    TensorStats s;
    dispatch("stats", t.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      s = cpu::tensor_stats(P<E>(t), t.numel);
    });
    return s;
  }
  // The probes measure fp32 tensors in place, the others in an fp32 copy (exact for the
  // 16-bit types; fp64, the gradient checks', rounds to nearest).
  std::unique_ptr<OperandView> operand_view(Tensor t, int rows, int cols) override {
    if (t.numel != size_t(rows) * size_t(cols))
      throw Error(
          strf("cpu backend: an operand view of %d x %d over %zu values", rows, cols, t.numel));
    if (t.dtype == DType::F32) return std::make_unique<HostOperandView>(P<float>(t), rows, cols);
    std::vector<float> x(t.numel);
    dispatch("operand_view", t.dtype, [&](auto* tag) {
      using E = TG_ELEM(tag);
      cpu::convert(x.data(), P<E>(t), t.numel, Rounding{});
    });
    return std::make_unique<HostOperandView>(std::move(x), rows, cols);
  }
  // Gradients on the wire: the host encoding itself, in place (the rows are host memory).
  void wire_encode(Tensor x, size_t part, WireFormat f, Tensor out) override {
    const size_t rows = x.numel / part, row_bytes = wire_bytes(part, f);
    for (size_t r = 0; r < rows; r++)
      tg::wire_encode(x.as<float>() + r * part, part, f, out.as<uint8_t>() + r * row_bytes);
  }
  void wire_sum(Tensor in, size_t part, WireFormat f, Tensor sum) override {
    const size_t row_bytes = wire_bytes(part, f), rows = in.bytes() / row_bytes;
    float* acc = sum.as<float>();
    std::fill(acc, acc + part, -0.f);
    for (size_t r = 0; r < rows; r++)
      tg::wire_decode_add(in.as<uint8_t>() + r * row_bytes, part, f, acc);
  }
  void wire_decode(Tensor in, size_t part, WireFormat f, Tensor out) override {
    const size_t rows = out.numel / part, row_bytes = wire_bytes(part, f);
    for (size_t r = 0; r < rows; r++)
      tg::wire_decode(in.as<uint8_t>() + r * row_bytes, part, f, out.as<float>() + r * part);
  }
  void convert(Tensor dst, Tensor src, const Rounding& r) override {
    cpu::convert_tensor(dst, src, r);
  }

 private:
  cpu::ScaledScratch scaled_;
  std::map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
  cpu::MatmulScratch s_;             // widened matmul operands, kept between calls
  cpu::TensorScaledLinears fp8_;     // the per-tensor-scaled linears (the fp8 mode)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace tg
