// encoder.cu: launchers of kernels/encoder.cuh (token + position embedding; the backward groups
// positions by token on the host, then a deterministic scatter-add).
#include <map>
#include <vector>

#include "kernels/encoder.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

void encoder_forward(Ctx& c, DType t, void* out, const int32_t* tokens, const void* wte,
                     const void* wpe, int B, int T, int C) {
  dispatch("encoder_forward", t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int kN = Pack16<E>::N;
    // 16-byte packs: every row of out, wte and wpe starts aligned.
    if (can_pack16<E>(size_t(C), {out, wte, wpe})) {
      const size_t n = size_t(T) * C / kN;
      launch(encoder_forward_kernel<E, kN>, c.grid(n, kThreads), kThreads, 0, c.stream,
             static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe),
             B, T, C);
    } else {
      const size_t n = size_t(T) * C;
      launch(encoder_forward_kernel<E, 1>, c.grid(n, kThreads), kThreads, 0, c.stream,
             static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe),
             B, T, C);
    }
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
    download(c, tok.data(), tokens, size_t(BT) * 4);
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
  // Through pinned staging: `host` may go away when upload returns.
  upload(c, dev, host.data(), host.size() * 4);
  dispatch("encoder_backward", t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int kN = Pack16<E>::N, kWarps = kThreads / 32;  // a warp per bucket
    const unsigned blocks = unsigned((nb + kWarps - 1) / kWarps);
    auto wte_kernel = can_pack16<E>(size_t(C), {dwte, dout}) ? encoder_backward_wte_kernel<E, kN>
                                                             : encoder_backward_wte_kernel<E, 1>;
    launch(wte_kernel, blocks, kThreads, 0, c.stream, static_cast<E*>(dwte),
           static_cast<const E*>(dout), dev, dev + nb, dev + 2 * nb + 1, nb, C);
    TG_LAUNCH_CHECK();
    const size_t n = size_t(T) * C;
    launch(encoder_backward_wpe_kernel<E>, unsigned((n + kThreads - 1) / kThreads), kThreads, 0,
           c.stream, static_cast<E*>(dwpe), static_cast<const E*>(dout), B, T, C);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
