// elementwise.cu: launchers of the memory-bound ops: encoder, residual, GELU, AdamW,
// conversions, norms, FP8 quantize-dequantize and the fused classifier.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/loss_scale.cuh"
#include "kernels/residual.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

void encoder_forward(Ctx& c, DType t, void* out, const int32_t* tokens, const void* wte,
                     const void* wpe, int B, int T, int C) {
  dispatch("encoder_forward", t, [&](auto tag) {
    using E = decltype(tag);
    const size_t n = size_t(B) * T * C;
    encoder_forward_kernel<E><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(
        static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe), B * T,
        T, C);
    TG_LAUNCH_CHECK();
  });
}

void encoder_backward(Ctx& c, DType t, void* dwte, void* dwpe, const void* dout,
                      const int32_t* tokens, const int32_t* host_tokens, int B, int T, int C) {
  const int BT = B * T;
  // Group the positions by token on the host (ascending within a token).
  std::vector<int32_t> tok;
  if (!host_tokens) {
    tok.resize(BT);
    TG_CUDA_CHECK(
        cudaMemcpyAsync(tok.data(), tokens, size_t(BT) * 4, cudaMemcpyDeviceToHost, c.stream));
    TG_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    host_tokens = tok.data();
  }
  std::map<int32_t, std::vector<int32_t>> groups;
  for (int i = 0; i < BT; i++) groups[host_tokens[i]].push_back(i);
  const int nb = int(groups.size());
  // layout: bucket_tok[nb] | bucket_start[nb + 1] | bucket_pos[BT]
  std::vector<int32_t> host(size_t(nb) + nb + 1 + BT);
  int32_t* btok = host.data();
  int32_t* bstart = btok + nb;
  int32_t* bpos = bstart + nb + 1;
  int k = 0, pos = 0;
  for (const auto& [token, list] : groups) {
    btok[k] = token;
    bstart[k] = pos;
    for (int32_t p : list) bpos[pos++] = p;
    k++;
  }
  bstart[nb] = pos;
  int32_t* dev = static_cast<int32_t*>(c.scratch(kScratchBuckets, host.size() * 4));
  // From pageable memory: staged before the call returns, so `host` may go away after it.
  TG_CUDA_CHECK(
      cudaMemcpyAsync(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice, c.stream));
  dispatch("encoder_backward", t, [&](auto tag) {
    using E = decltype(tag);
    dim3 grid(unsigned(nb), unsigned((C + kThreads - 1) / kThreads));
    encoder_backward_wte_kernel<E><<<grid, kThreads, 0, c.stream>>>(
        static_cast<E*>(dwte), static_cast<const E*>(dout), dev, dev + nb, dev + 2 * nb + 1, C);
    TG_LAUNCH_CHECK();
    const size_t n = size_t(T) * C;
    encoder_backward_wpe_kernel<E>
        <<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, c.stream>>>(
            static_cast<E*>(dwpe), static_cast<const E*>(dout), B, T, C);
    TG_LAUNCH_CHECK();
  });
}

void residual_forward(Ctx& c, DType t, void* out, const void* a, const void* b, size_t n) {
  dispatch("residual_forward", t, [&](auto tag) {
    using E = decltype(tag);
    E* o = static_cast<E*>(out);
    const E* pa = static_cast<const E*>(a);
    const E* pb = static_cast<const E*>(b);
    if (can_pack16<E>(n, {o, pa, pb})) {
      const size_t n16 = n / Pack16<E>::N;
      residual_forward_pack_kernel<E>
          <<<c.grid(n16, kThreads), kThreads, 0, c.stream>>>(o, pa, pb, n16);
    } else {
      residual_forward_kernel<E><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(o, pa, pb, n);
    }
    TG_LAUNCH_CHECK();
  });
}

void gelu_forward(Ctx& c, DType t, void* out, const void* inp, size_t n) {
  dispatch("gelu_forward", t, [&](auto tag) {
    using E = decltype(tag);
    E* o = static_cast<E*>(out);
    const E* x = static_cast<const E*>(inp);
    if (can_pack16<E>(n, {o, x})) {
      const size_t n16 = n / Pack16<E>::N;
      gelu_forward_pack_kernel<E><<<c.grid(n16, kThreads), kThreads, 0, c.stream>>>(o, x, n16);
    } else {
      gelu_forward_kernel<E><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(o, x, n);
    }
    TG_LAUNCH_CHECK();
  });
}

void gelu_backward(Ctx& c, DType t, void* dinp, const void* inp, const void* dout, size_t n) {
  dispatch("gelu_backward", t, [&](auto tag) {
    using E = decltype(tag);
    E* di = static_cast<E*>(dinp);
    const E* x = static_cast<const E*>(inp);
    const E* d = static_cast<const E*>(dout);
    if (can_pack16<E>(n, {di, x, d})) {
      const size_t n16 = n / Pack16<E>::N;
      gelu_backward_pack_kernel<E><<<c.grid(n16, kThreads), kThreads, 0, c.stream>>>(di, x, d, n16);
    } else {
      gelu_backward_kernel<E><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(di, x, d, n);
    }
    TG_LAUNCH_CHECK();
  });
}

void loss_scale_decide(Ctx& c, LossScaleDevice* d, const float* check, const LossScaleParams& p,
                       double clip) {
  loss_scale_step_kernel<<<1, 32, 0, c.stream>>>(d, check, p, clip);
  TG_LAUNCH_CHECK();
}

void adamw(Ctx& c, DType pt, void* params, float* master, const void* grads, float* m, float* v,
           size_t n, const AdamWArgs& a, const LossScaleDevice* d) {
  AdamWParams p;
  p.lr = a.lr;
  p.beta1 = a.beta1;
  p.beta2 = a.beta2;
  p.eps = a.eps;
  p.weight_decay = a.weight_decay;
  p.grad_scale = a.grad_scale;
  // As src/cpu/adamw.cpp computes them (float pow on the host).
  p.c1 = 1.0f - std::pow(a.beta1, float(a.step));
  p.c2 = 1.0f - std::pow(a.beta2, float(a.step));
  p.stochastic = a.rounding.stochastic;
  p.seed = a.rounding.seed;
  p.offset = a.rounding.offset;
  dispatch("adamw", pt, [&](auto tag) {
    using E = decltype(tag);
    if (d)
      adamw_device_kernel<E><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(
          static_cast<E*>(params), master, static_cast<const E*>(grads), m, v, n, p, d);
    else
      adamw_kernel<E><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(
          static_cast<E*>(params), master, static_cast<const E*>(grads), m, v, n, p);
    TG_LAUNCH_CHECK();
  });
}

void convert(Ctx& c, DType dt, void* dst, DType stype, const void* src, size_t n,
             const Rounding& r) {
  dispatch("convert", dt, [&](auto dtag) {
    dispatch("convert", stype, [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      convert_kernel<D, S><<<c.grid(n, kThreads), kThreads, 0, c.stream>>>(
          static_cast<D*>(dst), static_cast<const S*>(src), n, r.stochastic, r.seed, r.offset);
      TG_LAUNCH_CHECK();
    });
  });
}

void norm(Ctx& c, DType t, const void* x, size_t n, float inv_scale, float* out) {
  float* ps = static_cast<float*>(c.scratch(kScratchPartialA, kNormBlocks * sizeof(float)));
  float* pb = static_cast<float*>(c.scratch(kScratchPartialB, kNormBlocks * sizeof(float)));
  dispatch("norm", t, [&](auto tag) {
    using E = decltype(tag);
    norm_partial_kernel<E><<<kNormBlocks, kNormThreads, 0, c.stream>>>(
        ps, pb, static_cast<const E*>(x), n, inv_scale);
    TG_LAUNCH_CHECK();
  });
  norm_final_kernel<<<1, kNormThreads, 0, c.stream>>>(out, ps, pb, kNormBlocks);
  TG_LAUNCH_CHECK();
}

void classifier(Ctx& c, float* logits, float* losses, const int32_t* targets, float dloss, int N,
                int V, int Vp) {
  classifier_kernel<<<unsigned(N), 512, 0, c.stream>>>(logits, losses, targets, dloss, V, Vp);
  TG_LAUNCH_CHECK();
}

}  // namespace tg::gpu
