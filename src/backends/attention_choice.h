// attention_choice.h: which attention path a run takes for cuda.attention, as a pure function
// of what the build and the machine offer (no CUDA, so the CPU tests check every rule).
//
// The paths: cublas (batched GEMMs + softmax kernels, the T x T probabilities kept), cudnn
// (cuDNN's fused flash attention: the model keeps the per-row logsumexp, lse, instead of the
// probabilities) and, on the CPU only, the lse twin of cudnn. `auto` takes cudnn where the build
// has it, libcudnn loads, cuDNN supports the compute type and head size and builds its forward and
// backward graphs at the run's shape; else cublas (the default before auto existed), and says why.
//
// The choice is settled at start-up (Backend::settle_attention), before the model sizes its
// activations for one layout or the other: a path that changed mid-run would find them sized
// for the other, and a resumed run would not repeat its steps.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/path_choices.h"

namespace tg {

// What the CUDA backend found of cuDNN (gpu::cudnn_probe): built with the frontend, the
// library loaded, and one line naming the library (version, file) or why it is missing.
struct CudnnProbe {
  bool built_in = false;
  bool loaded = false;
  std::string detail;
};

// CpuLse: the CPU backend's lse twin of cudnn (attention_forward_lse / attention_backward_lse).
enum class AttentionPath { Cublas, Cudnn, CpuLse };

// The shape a run's attention is settled for: batch, sequence, heads, head size, compute type.
struct AttentionShape {
  int B = 0, T = 0, NH = 0, head_size = 0;
  DType t = DType::F32;
};

// "B 8 x T 1024, 12 heads of 64, bf16": a shape as the messages name it.
std::string attention_shape_name(const AttentionShape& s);

struct AttentionChoice {
  AttentionPath path = AttentionPath::Cublas;
  bool lse = false;    // the model keeps lse(B,NH,T) instead of att(B,NH,T,T)
  std::string reason;  // why this path (the start-up line's parenthesis)
  std::string error;   // non-empty: the configured path cannot run
  // The error is the configuration's (no cuDNN, a type or head size it lacks: exit 2), not the
  // machine's (cuDNN refused a graph at the run's shape: exit 1).
  bool usage_error = true;
};

const char* attention_path_name(AttentionPath p);
// The cuda.attention value that asks for path p by name (the CPU's twin: cudnn).
AttentionRequest attention_request(AttentionPath p);

// cuda.attention=flash and fused named hand-written kernels that have gone, their CUDA-core
// FMAs 3.4x and 4x slower per GPT-2 124M step than the default on an H200 (cuDNN is the
// tensor-core path). An old config's or checkpoint's flash is read as cudnn (the same lse
// layout), fused as cublas (the same T x T probabilities kept, the same backward, and the
// same CPU twin: the reference its tests held it to): the request that runs, and the one-line
// notice that says so ("" for every other value).
AttentionRequest effective_attention(AttentionRequest r);
std::string attention_request_notice(AttentionRequest r);

// Whether cuDNN's SDPA takes this compute type and head size; *why says why not. bf16 and fp16
// only (cuDNN has no fp32 SDPA); head sizes multiples of 8 up to 128 (what cuDNN 9 serves on
// every architecture from sm_80).
bool cudnn_attention_supported(DType t, int head_size, std::string* why);

// cuDNN's forward and backward graphs built at the run's exact shape (the CUDA backend builds
// them on its device; the tests pass stand-ins): "" when both build, else which graph cuDNN
// refused and why. Called only when everything else allows cuDNN.
using CudnnGraphCheck = std::function<std::string()>;

// The path for cuda.attention = `requested`, a model computing in `t` with heads of
// `head_size`, on a CUDA backend whose cuDNN is `cudnn`. `graphs` empty: the shape is not known
// yet (a plan, a header line), so the graphs are not asked.
AttentionChoice choose_attention(AttentionRequest requested, const CudnnProbe& cudnn, DType t,
                                 int head_size, const CudnnGraphCheck& graphs = {});

// Throws for c.error: UsageError (exit 2) or Error (exit 1) after c.usage_error.
void require_runnable(const AttentionChoice& c);

// The ranks of a data-parallel run settle on their own GPUs, and under auto one rank's cuDNN
// can build the graphs where another's refuses: the ranks would then run different numerics
// and size different activations. The path they all take, from every rank's settled choice in
// rank order (Trainer::settle_attention gathers them): a rank's error (the configured path
// cannot run there) is every rank's, naming the rank; where the paths agree, ranks[rank];
// else cublas, which every CUDA rank runs and the refusing ranks took, its reason naming the
// first of them and why.
AttentionChoice agree_attention(const std::vector<AttentionChoice>& ranks, int rank);

}  // namespace tg
