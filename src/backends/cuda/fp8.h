// fp8.h: the FP8 block linears on the GPU (precision.mode = fp8): per-tensor quantization
// (fp8_cast.cu, kernels in kernels/fp8_kernels.cuh) and the FP8 GEMMs of one linear through
// the cuBLASLt wrapper (matmul_fp8.cu). kernels/README.md ("FP8 kernels") documents the
// scale conventions, the operand layouts, the memory plan and the call order.
//
// Tensors are row-major: bf16 as gpu::bf16 (16-bit codes, common.cuh's rule), FP8 as bytes
// (uint8_t; E4M3 or E5M2 by an Fp8Format). Launchers take raw device pointers and a stream and
// never synchronize, except the reports (they return host values).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "cublaslt.h"
#include "kernels/common.cuh"
#include "kernels/fp8_kernels.cuh"
#include "src/backends/backend.h"

namespace tg::gpu {

// ---- quantization (fp8_cast.cu) ----

const char* fp8_format_name(Fp8Format f);

// *amax = max |x[i]| (+inf if any x[i] is NaN or inf). Resets *amax first.
void fp8_amax(float* amax, const bf16* x, size_t n, cudaStream_t stream);
void fp8_amax(float* amax, const float* x, size_t n, cudaStream_t stream);
// `current` recipe: st->scale = fp8_scale_from_amax(st->amax, fmax(fmt), margin),
// st->descale = 1 / scale, on the device.
void fp8_compute_scale(Fp8TensorScale* st, Fp8Format fmt, int margin, cudaStream_t stream);
// `delayed` recipe (or a fixed scale, e.g. the forward's scale reused in the backward):
// st->scale = s, st->descale = 1 / s. No host synchronization (s travels as an argument).
void fp8_set_scale(Fp8TensorScale* st, float s, cudaStream_t stream);
// q = sat(x * scale) in fmt, with scale = *scale (device). Optional:
//   amax_out     also *amax_out = max |x| (reset first); may equal poison_amax only if the
//                caller does not need the poisoning (it would read a partial amax) - don't.
//   poison_amax  if non-null and *poison_amax is non-finite, every code is NaN (0x7F)
void fp8_cast(uint8_t* q, const bf16* x, size_t n, Fp8Format fmt, const float* scale,
              float* amax_out, const float* poison_amax, cudaStream_t stream);
// x (rows, cols) -> qT (cols, rows) = sat(x * scale)^T, and q (rows, cols) too when q is not
// null: one read of x for both copies. amax_out / poison_amax as in fp8_cast.
void fp8_cast_transpose(uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols, Fp8Format fmt,
                        const float* scale, float* amax_out, const float* poison_amax,
                        cudaStream_t stream);
// Quantize-dequantize bf16 -> fp8 -> bf16 (the fallback without FP8 tensor cores):
//   descale == nullptr  y = decode(sat(x * s))            (exact; descale goes into the GEMM)
//   descale != nullptr  y = bf16(decode(sat(x * s)) * d)   (bf16 of the CPU qdq value)
// amax_out / poison_amax (poisoned y = bf16 NaN 0x7FFF) as in fp8_cast. y may equal x.
void fp8_qdq_bf16(bf16* y, const bf16* x, size_t n, Fp8Format fmt, const float* scale,
                  const float* descale, float* amax_out, const float* poison_amax,
                  cudaStream_t stream);
// out[0, n) = NaN when *amax_a or *amax_b (either may be null) is non-finite, as the CPU's
// poisoned operands make every product NaN. Costs one tiny launch when finite.
void fp8_poison_if_nonfinite(bf16* out, size_t n, const float* amax_a, const float* amax_b,
                             cudaStream_t stream);
// The `current` recipe in one call: st->amax = amax(x); st->scale/descale from it; q (and qT
// when non-null, then x is (rows, cols) and q may be null) = sat(x * scale), all NaN when the
// amax is non-finite (like qdq).
void fp8_quantize_current(uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols, Fp8Format fmt,
                          int margin, Fp8TensorScale* st, cudaStream_t stream);
// The `delayed` recipe in one call: st->scale = s (from the host's history), q (and qT) =
// sat(x * s), and st->amax = amax(x) fused into the same pass, for the history. Codes of a
// non-finite x are not poisoned here (the amax is known only at the end): callers poison the
// GEMM output with fp8_poison_if_nonfinite(out, ..., &st->amax, ...), which gives the CPU's
// result (every output NaN).
void fp8_quantize_delayed(uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols, Fp8Format fmt,
                          float s, Fp8TensorScale* st, cudaStream_t stream);
// Blocks for a grid-stride loop over `work` items of the element-wise FP8 kernels (4 resident
// blocks of fp8_detail::kThreads per multiprocessor), never more than the work needs.
unsigned fp8_grid(size_t work);

// ---- GEMMs (matmul_fp8.cu) ----

enum class Fp8Path {
  kFp8,           // cuBLASLt FP8 tensor-core GEMMs (compute capability >= 8.9)
  kBf16Fallback,  // fp8 values in bf16, bf16 GEMMs with the descales as alpha
};
const char* fp8_path_name(Fp8Path p);
// The path for a device: FP8 GEMMs from compute capability 8.9 (Ada, Hopper and later).
Fp8Path fp8_path_for_device(int device);

// Everything the GEMMs need from the backend (the cuBLASLt handle, workspace and stream of
// LtContext, and the path); not an owner.
struct Fp8GemmContext : LtContext {
  Fp8Path path = Fp8Path::kFp8;
  bool fast_accum_forward = true;    // CUBLASLT_MATMUL_DESC_FAST_ACCUM in the forward GEMM
  bool fast_accum_backward = false;  // ... and in dgrad/wgrad (off: gradients keep precision)
};

struct Fp8ShapeError : Error {
  using Error::Error;
};
// Why an FP8 GEMM of this shape cannot run (empty: it can).
std::string fp8_shape_problem(int N, int C, int OC);
inline bool fp8_shape_ok(int N, int C, int OC) { return fp8_shape_problem(N, C, OC).empty(); }

// The three FP8 GEMMs (FP8 path) on quantized operands; shapes and alignments are checked
// first (Fp8ShapeError names the GEMM and the shape).
// out(N,OC) = descale_inp * descale_w * qinp(N,C) . qw(OC,C)^T + bias(OC) (bias may be null).
void fp8_gemm_forward(const Fp8GemmContext& ctx, bf16* out, const uint8_t* qinp, const uint8_t* qw,
                      const bf16* bias, int N, int C, int OC, const float* descale_inp,
                      const float* descale_w);
// dinp(N,C) = descale_dout * descale_w * qdout(N,OC) . W, with W given transposed: qwT (C,OC)
// E4M3; qdout E5M2. Written (beta = 0).
void fp8_gemm_dgrad(const Fp8GemmContext& ctx, bf16* dinp, const uint8_t* qdout, const uint8_t* qwT,
                    int N, int C, int OC, const float* descale_dout, const float* descale_w);
// dW(OC,C) (+)= descale_dout * descale_inp * qdout(N,OC)^T . qinp(N,C), both given
// transposed: qdoutT (OC,N) E5M2, qinpT (C,N) E4M3. accumulate: beta = 1.
void fp8_gemm_wgrad(const Fp8GemmContext& ctx, bf16* dw, const uint8_t* qdoutT,
                    const uint8_t* qinpT, int N, int C, int OC, const float* descale_dout,
                    const float* descale_inp, bool accumulate = true);

// ---- per-linear state and scratch (the plan; kernels/README.md, Memory) ----

// The shape of one linear: out(N,OC) = inp(N,C) W(OC,C)^T.
struct Fp8LinearShape {
  int N = 0, C = 0, OC = 0;
};
inline size_t fp8_align256(size_t b) { return (b + 255) / 256 * 256; }
// Where one linear's operands lie in the scratch (byte offsets), and its total.
struct Fp8ScratchLayout {
  size_t a = 0, b = 0, g = 0, gT = 0, total = 0;
};
Fp8ScratchLayout fp8_scratch_layout(Fp8Path path, const Fp8LinearShape& s);
// Scratch bytes for these linears (the largest backward).
size_t fp8_plan_scratch_bytes(Fp8Path path, const Fp8LinearShape* shapes, int n);
inline size_t fp8_plan_state_bytes(int n_linears) {
  return size_t(n_linears) * sizeof(Fp8LinearDevice);
}
// The initial state of a linear: zero amaxes, scale 1, descale 1, alpha 1, constants 0 and 1.
Fp8LinearDevice fp8_initial_state();

// Device buffers of the FP8 linears: per-linear state and the shared scratch.
struct Fp8Plan {
  Fp8Path path = Fp8Path::kFp8;
  int n_linears = 0;
  Fp8LinearDevice* dev = nullptr;  // n_linears entries (device)
  uint8_t* scratch = nullptr;      // scratch_bytes, 256-byte aligned
  size_t scratch_bytes = 0;
  void* owned_scratch = nullptr;  // cudaMalloc'ed here when no external scratch was given
  std::unordered_map<const void*, int> slots;  // see fp8_plan_slot
};
// The state index of the linear whose weight lives at `weight` (the Backend's FP8 calls do not
// say which layer and linear they are; each block linear has its own weight slice, so its
// device address names it). The first call for a weight takes the next free index; throws when
// more distinct weights arrive than the plan has linears.
int fp8_plan_slot(Fp8Plan& plan, const void* weight);
// Allocates the state of n_linears linears (fp8_initial_state) and, unless `external_scratch`
// is given (256-byte aligned, scratch_bytes long: e.g. the logits buffer), a scratch of
// scratch_bytes. Synchronous (setup).
Fp8Plan fp8_plan_create(Fp8Path path, int n_linears, size_t scratch_bytes,
                        void* external_scratch = nullptr);
void fp8_plan_destroy(Fp8Plan& p);

// ---- one linear, end to end (what CudaBackend's matmul_forward_fp8 / _backward_fp8 call) ----

// Forward of linear `lin`: out(N,OC) = quant(inp) . quant(W)^T + bias. quant[0] (inp) and
// quant[1] (W) are QuantState's. Afterwards plan.dev[lin].t[kFp8Inp / kFp8Weight] hold each
// operand's amax, scale and descale (fp8_forward_report). Asynchronous.
void fp8_linear_forward(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin, bf16* out,
                        const bf16* inp, const bf16* w, const bf16* bias, int N, int C, int OC,
                        const Fp8Quant quant[2]);
// Backward of linear `lin`: dinp(N,C) = quant(dout) . quant(W) (written), dw(OC,C) +=
// quant(dout)^T . quant(inp), dbias(OC) += column sums of the unquantized dout (dbias may be
// null). dout is quantized to E5M2 with gq; inp and W to E4M3 with the forward's scales.
// dinp / dw become NaN when dout's amax, or the forward's amax of W / inp, is non-finite.
// Afterwards plan.dev[lin].t[kFp8Grad] holds dout's amax, scale, descale. Asynchronous.
void fp8_linear_backward(const Fp8GemmContext& ctx, const Fp8Plan& plan, int lin, bf16* dinp,
                         bf16* dw, bf16* dbias, const bf16* dout, const bf16* inp, const bf16* w,
                         int N, int C, int OC, const Fp8Quant& gq, float inp_scale, float w_scale);
// The Fp8Report of a linear's state (forward: inp and W; backward: dout in slot 0).
Fp8Report fp8_report(const Fp8LinearDevice& h, bool backward);
// The report of the last forward / backward of linear `lin`: copies its device state to the
// host, which synchronizes `stream` (the Backend interface returns amaxes on the host).
Fp8Report fp8_forward_report(const Fp8Plan& plan, int lin, cudaStream_t stream);
Fp8Report fp8_backward_report(const Fp8Plan& plan, int lin, cudaStream_t stream);

}  // namespace tg::gpu
