// arg_checks.h: the CUDA backend's checks of an op's tensors before anything is queued (a
// mismatch is an Error naming the op, never a kernel reading the wrong bytes).
#pragma once
#include <initializer_list>

#include "src/backends/backend.h"

namespace tg::gpu {

// The tensors (empty ones ignored) share one element type.
void need_same(const char* op, std::initializer_list<Tensor> ts);
// t (if given) is fp32.
void need_f32(const char* op, Tensor t);
// A moment tensor in its format's storage: fp32, or the format's 16-bit type.
void need_moment(const char* op, Tensor t, const MomentFormat& f);
// AdamW's tensors agree with each other and with a.master (AdamWArgs): fp32 master weights
// of the weights' length, or bf16 weights that are their own master (bf16-kahan: with a bf16
// compensation of their length).
void need_adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                const AdamWArgs& a);

}  // namespace tg::gpu
