// profiling_backend.cpp: each op's record (profiling_backend.h). FLOPs are the arithmetic the op
// must do (a GEMM's 2 N C OC; causal attention's pairs j <= i only; elementwise ops a few per
// element, which never decide their floor); bytes are its tensors' sizes as the interface
// defines them (each input read once, each output written once, an accumulated output read and
// written), so a kernel that re-reads a tensor, or a path that stores more than the interface
// asks, shows as time above the floor rather than as bytes.
#include "profiling_backend.h"

#include <algorithm>

namespace tg {

namespace {

double sz(Tensor t) { return t ? double(t.bytes()) : 0.0; }

std::string linear_shape(int N, int C, int OC) { return strf("N=%d C=%d OC=%d", N, C, OC); }
std::string attention_shape(int B, int T, int C, int NH) {
  return strf("B=%d T=%d C=%d NH=%d", B, T, C, NH);
}
std::string elems(size_t n) { return strf("n=%zu", n); }

// out(N,OC) = inp W^T + bias; its backward does twice the products (dinp and dW).
double linear_flops(int N, int C, int OC) { return 2.0 * N * C * OC; }
double linear_forward_bytes(Tensor out, Tensor inp, Tensor w, Tensor bias) {
  return sz(inp) + sz(w) + sz(bias) + sz(out);
}
double linear_backward_bytes(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                             Tensor w) {
  return sz(dout) + sz(inp) + sz(w) + sz(dinp) + 2 * sz(dw) + 2 * sz(dbias);
}
// Causal attention: T (T + 1) / 2 query-key pairs per head, each a head_size dot product for
// the scores and another for the output: 2 B C T (T + 1) FLOPs forward, twice that backward
// (the probabilities' and the values' gradients, then the queries' and the keys').
double attention_flops(int B, int T, int C) { return 2.0 * B * C * double(T) * (T + 1); }

// AdamW's bytes: gradients read, moments (and their block scales) read and written, the
// compute weights written, and the master read and written where it is a tensor of its own
// (the bf16 masters keep theirs in params, which are then read and written).
double adamw_bytes(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                   const AdamWArgs& a) {
  double b = sz(grads) + 2 * (sz(m) + sz(v) + sz(a.m_meta) + sz(a.v_meta)) + sz(params);
  const bool own_master = a.master != MasterFormat::BF16SR && master && master.data != params.data;
  if (own_master)
    b += 2 * sz(master);
  else
    b += sz(params);
  return b;
}

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Gemm: return "gemm";
    case OpKind::Attention: return "attention";
    case OpKind::Transfer: return "transfer";
    case OpKind::Memory: break;
  }
  return "memory";
}

long ProfilingBackend::begin(const char* op, OpKind kind, std::string shape, double flops,
                             double bytes) {
  in_.take_gemm_log();  // what ran before this op is not its own
  if (!recording_) return -1;
  OpRecord r;
  r.op = op;
  r.shape = std::move(shape);
  r.layer = layer_;
  r.phase = phase_;
  r.kind = kind;
  r.flops = flops;
  r.bytes = bytes;
  r.mark_begin = in_.record_mark();
  r.mark_end = SIZE_MAX;  // an op that throws keeps this, and take_records drops it
  records_.push_back(std::move(r));
  return long(records_.size()) - 1;
}

void ProfilingBackend::end(long rec) {
  if (rec < 0) return;
  OpRecord& r = records_[size_t(rec)];
  r.mark_end = in_.record_mark();
  r.gemm = in_.take_gemm_log();
}

std::vector<OpRecord> ProfilingBackend::take_records(std::vector<double>* mark_ms) {
  const std::vector<double> t = in_.mark_times_ms();
  std::vector<OpRecord> out;
  for (OpRecord& r : records_) {
    if (r.mark_end >= t.size() || r.mark_begin >= t.size()) continue;
    r.ms = std::max(0.0, t[r.mark_end] - t[r.mark_begin]);
    out.push_back(std::move(r));
  }
  records_.clear();
  in_.clear_marks();
  if (mark_ms) *mark_ms = t;
  return out;
}

void ProfilingBackend::set_scope(int layer, StepPhase phase) {
  layer_ = layer;
  phase_ = phase;
  in_.set_scope(layer, phase);
}

void ProfilingBackend::upload(Tensor dst, const void* host) {
  const long r = begin("upload", OpKind::Transfer, elems(dst.numel), 0, sz(dst));
  in_.upload(dst, host);
  end(r);
}

void ProfilingBackend::download(void* host, Tensor src) {
  const long r = begin("download", OpKind::Transfer, elems(src.numel), 0, sz(src));
  in_.download(host, src);
  end(r);
}

void ProfilingBackend::zero(Tensor t) {
  const long r = begin("zero", OpKind::Memory, elems(t.numel), 0, sz(t));
  in_.zero(t);
  end(r);
}

void ProfilingBackend::encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B,
                                       int T, int C) {
  // One row of wte per token and T rows of wpe are read.
  const double rows =
      double(B) * T * C * dtype_size(wte.dtype) + double(T) * C * dtype_size(wpe.dtype);
  const long r = begin("encoder_forward", OpKind::Memory, strf("B=%d T=%d C=%d", B, T, C),
                       double(B) * T * C, sz(out) + sz(tokens) + rows);
  in_.encoder_forward(out, tokens, wte, wpe, B, T, C);
  end(r);
}

void ProfilingBackend::encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B,
                                        int T, int C) {
  // The touched rows of dwte (at most one per token) and T rows of dwpe, read and written.
  const double vocab_rows = C > 0 ? double(dwte.numel / size_t(C)) : 0;
  const double rows = std::min(double(B) * T, vocab_rows) * C * dtype_size(dwte.dtype);
  const double pos = double(T) * C * dtype_size(dwpe.dtype);
  const long r = begin("encoder_backward", OpKind::Memory, strf("B=%d T=%d C=%d", B, T, C),
                       2.0 * B * T * C, sz(dout) + sz(tokens) + 2 * (rows + pos));
  in_.encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  end(r);
}

void ProfilingBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w,
                                         Tensor b, int N, int C, InputAmax amax) {
  const long r = begin("layernorm_forward", OpKind::Memory, strf("N=%d C=%d", N, C), 8.0 * N * C,
                       sz(inp) + sz(w) + sz(b) + sz(out) + sz(mean) + sz(rstd));
  in_.layernorm_forward(out, mean, rstd, inp, w, b, N, C, amax);
  end(r);
}

void ProfilingBackend::layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                                          Tensor inp, Tensor w, Tensor mean, Tensor rstd, int N,
                                          int C) {
  const double bytes =
      sz(dout) + sz(inp) + sz(w) + sz(mean) + sz(rstd) + 2 * (sz(dinp) + sz(dw) + sz(db));
  const long r =
      begin("layernorm_backward", OpKind::Memory, strf("N=%d C=%d", N, C), 12.0 * N * C, bytes);
  in_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  end(r);
}

void ProfilingBackend::matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                                      int OC) {
  const long r = begin("matmul_forward", OpKind::Gemm, linear_shape(N, C, OC),
                       linear_flops(N, C, OC), linear_forward_bytes(out, inp, w, bias));
  in_.matmul_forward(out, inp, w, bias, N, C, OC);
  end(r);
}

void ProfilingBackend::matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout,
                                       Tensor inp, Tensor w, int N, int C, int OC) {
  const long r =
      begin("matmul_backward", OpKind::Gemm, linear_shape(N, C, OC), 2 * linear_flops(N, C, OC),
            linear_backward_bytes(dinp, dw, dbias, dout, inp, w));
  in_.matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
  end(r);
}

void ProfilingBackend::lm_head_backward(Tensor dinp, Tensor dw, Tensor dlogits, Tensor inp,
                                        Tensor w, int N, int C, int Vp) {
  // dlogits is a view with rows further apart than Vp: only N x Vp of it is read.
  const double grad = double(N) * Vp * dtype_size(dlogits.dtype);
  const long r =
      begin("lm_head_backward", OpKind::Gemm, linear_shape(N, C, Vp), 2 * linear_flops(N, C, Vp),
            grad + linear_backward_bytes(dinp, dw, Tensor{}, Tensor{}, inp, w));
  in_.lm_head_backward(dinp, dw, dlogits, inp, w, N, C, Vp);
  end(r);
}

void ProfilingBackend::matmul_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor w,
                                           Tensor bias, int N, int C, int OC) {
  const long r = begin("matmul_gelu_forward", OpKind::Gemm, linear_shape(N, C, OC),
                       linear_flops(N, C, OC), linear_forward_bytes(out, inp, w, bias) + sz(pre));
  in_.matmul_gelu_forward(pre, out, inp, w, bias, N, C, OC);
  end(r);
}

void ProfilingBackend::matmul_forward_scaled(Tensor out, Tensor inp, Tensor w, Tensor bias, int N,
                                             int C, int OC, const ScaledLinear& q) {
  const long r = begin("matmul_forward_scaled", OpKind::Gemm, linear_shape(N, C, OC),
                       linear_flops(N, C, OC), linear_forward_bytes(out, inp, w, bias));
  in_.matmul_forward_scaled(out, inp, w, bias, N, C, OC, q);
  end(r);
}

void ProfilingBackend::matmul_backward_scaled(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout,
                                              Tensor inp, Tensor w, int N, int C, int OC,
                                              const ScaledLinear& q) {
  const long r =
      begin("matmul_backward_scaled", OpKind::Gemm, linear_shape(N, C, OC),
            2 * linear_flops(N, C, OC), linear_backward_bytes(dinp, dw, dbias, dout, inp, w));
  in_.matmul_backward_scaled(dinp, dw, dbias, dout, inp, w, N, C, OC, q);
  end(r);
}

void ProfilingBackend::attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C,
                                         int NH, InputAmax amax) {
  const long r = begin("attention_forward", OpKind::Attention, attention_shape(B, T, C, NH),
                       attention_flops(B, T, C), sz(qkv) + sz(out) + sz(att));
  in_.attention_forward(out, att, qkv, B, T, C, NH, amax);
  end(r);
}

void ProfilingBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int B,
                                          int T, int C, int NH) {
  const long r = begin("attention_backward", OpKind::Attention, attention_shape(B, T, C, NH),
                       2 * attention_flops(B, T, C), sz(dout) + sz(qkv) + sz(att) + sz(dqkv));
  in_.attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  end(r);
}

void ProfilingBackend::attention_forward_lse(Tensor out, Tensor lse, Tensor qkv, int B, int T,
                                             int C, int NH, InputAmax amax) {
  const long r = begin("attention_forward_lse", OpKind::Attention, attention_shape(B, T, C, NH),
                       attention_flops(B, T, C), sz(qkv) + sz(out) + sz(lse));
  in_.attention_forward_lse(out, lse, qkv, B, T, C, NH, amax);
  end(r);
}

void ProfilingBackend::attention_backward_lse(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                              Tensor lse, int B, int T, int C, int NH) {
  const long r =
      begin("attention_backward_lse", OpKind::Attention, attention_shape(B, T, C, NH),
            2 * attention_flops(B, T, C), sz(dout) + sz(qkv) + sz(out) + sz(lse) + sz(dqkv));
  in_.attention_backward_lse(dqkv, dout, qkv, out, lse, B, T, C, NH);
  end(r);
}

void ProfilingBackend::gelu_forward(Tensor out, Tensor inp, size_t n, InputAmax amax) {
  const long r = begin("gelu_forward", OpKind::Memory, elems(n), 8.0 * n, sz(inp) + sz(out));
  in_.gelu_forward(out, inp, n, amax);
  end(r);
}

void ProfilingBackend::gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) {
  const long r =
      begin("gelu_backward", OpKind::Memory, elems(n), 16.0 * n, sz(inp) + sz(dout) + sz(dinp));
  in_.gelu_backward(dinp, inp, dout, n);
  end(r);
}

void ProfilingBackend::residual_forward(Tensor out, Tensor a, Tensor b, size_t n) {
  const long r =
      begin("residual_forward", OpKind::Memory, elems(n), double(n), sz(a) + sz(b) + sz(out));
  in_.residual_forward(out, a, b, n);
  end(r);
}

void ProfilingBackend::residual_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd,
                                                  Tensor a, Tensor b, Tensor w, Tensor bias, int N,
                                                  int C, InputAmax amax) {
  const double bytes = sz(a) + sz(b) + sz(w) + sz(bias) + sz(res) + sz(out) + sz(mean) + sz(rstd);
  const long r = begin("residual_layernorm_forward", OpKind::Memory, strf("N=%d C=%d", N, C),
                       9.0 * N * C, bytes);
  in_.residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, C, amax);
  end(r);
}

void ProfilingBackend::classifier(Tensor logits, Tensor losses, Tensor targets, Tensor dlogits,
                                  float dloss, int N, int V, int Vp) {
  // The logits are read once; the gradient (N x Vp in its type) is written when asked.
  const double grad = dloss != 0 ? double(N) * Vp * dtype_size(dlogits.dtype) : 0.0;
  const long r = begin("classifier", OpKind::Memory, strf("N=%d V=%d Vp=%d", N, V, Vp), 5.0 * N * V,
                       sz(logits) + sz(targets) + sz(losses) + grad);
  in_.classifier(logits, losses, targets, dlogits, dloss, N, V, Vp);
  end(r);
}

double ProfilingBackend::sum_squares(Tensor t) {
  const long r = begin("sum_squares", OpKind::Memory, elems(t.numel), 2.0 * t.numel, sz(t));
  const double s = in_.sum_squares(t);
  end(r);
  return s;
}

GradCheck ProfilingBackend::unscale_check_norm(Tensor grads, double loss_scale) {
  const long r =
      begin("unscale_check_norm", OpKind::Memory, elems(grads.numel), 3.0 * grads.numel, sz(grads));
  const GradCheck g = in_.unscale_check_norm(grads, loss_scale);
  end(r);
  return g;
}

void ProfilingBackend::device_decide_step(Tensor grads, const LossScaleState& s,
                                          const LossScaleParams& p, double clip) {
  const long r =
      begin("device_decide_step", OpKind::Memory, elems(grads.numel), 3.0 * grads.numel, sz(grads));
  in_.device_decide_step(grads, s, p, clip);
  end(r);
}

void ProfilingBackend::adamw_decided(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                                     const AdamWArgs& a) {
  const long r = begin("adamw_decided", OpKind::Memory, elems(params.numel), 12.0 * params.numel,
                       adamw_bytes(params, master, grads, m, v, a));
  in_.adamw_decided(params, master, grads, m, v, a);
  end(r);
}

void ProfilingBackend::adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                             const AdamWArgs& a) {
  const long r = begin("adamw", OpKind::Memory, elems(params.numel), 12.0 * params.numel,
                       adamw_bytes(params, master, grads, m, v, a));
  in_.adamw(params, master, grads, m, v, a);
  end(r);
}

TensorStats ProfilingBackend::stats(Tensor t) {
  const long r = begin("stats", OpKind::Memory, elems(t.numel), 2.0 * t.numel, sz(t));
  const TensorStats s = in_.stats(t);
  end(r);
  return s;
}

void ProfilingBackend::convert(Tensor dst, Tensor src, const Rounding& rounding) {
  const long r =
      begin("convert", OpKind::Memory, elems(dst.numel), double(dst.numel), sz(src) + sz(dst));
  in_.convert(dst, src, rounding);
  end(r);
}

void ProfilingBackend::wire_encode(Tensor x, size_t part, WireFormat f, Tensor out) {
  const double rows = part ? double(x.numel / part) : 0;
  const long r = begin("wire_encode", OpKind::Memory, elems(x.numel), 2.0 * x.numel,
                       sz(x) + rows * double(wire_bytes(part, f)));
  in_.wire_encode(x, part, f, out);
  end(r);
}

void ProfilingBackend::wire_sum(Tensor in, size_t part, WireFormat f, Tensor sum) {
  const long r =
      begin("wire_sum", OpKind::Memory, elems(in.numel), 2.0 * in.numel, sz(in) + sz(sum));
  in_.wire_sum(in, part, f, sum);
  end(r);
}

void ProfilingBackend::wire_decode(Tensor in, size_t part, WireFormat f, Tensor out) {
  const double rows = part ? double(out.numel / part) : 0;
  const long r = begin("wire_decode", OpKind::Memory, elems(out.numel), 2.0 * out.numel,
                       rows * double(wire_bytes(part, f)) + sz(out));
  in_.wire_decode(in, part, f, out);
  end(r);
}

}  // namespace tg
