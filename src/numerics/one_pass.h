// one_pass.h: whether the CUDA quantizer of one operand reads its source once (kernels/
// quantize_tile.cuh) or twice (kernels/quantize_blocks.cuh), on the host (no CUDA types): the
// launcher (src/backends/cuda/quantize_blocks.cu) and the scratch plan (src/precision/
// scaled_scratch.cpp, the two passes' scratch is not asked for in one) decide alike.
//
// One pass needs every scale group inside the super-tile of one block of threads (nr x nc
// sub-tiles of 32 x 32, 1 or 4 each way: groups of 16, 32, 128 or one spanning up to 128), and
// no tensor-wide quantity before rounding: a given (delayed) tensor scale needs no amax at
// all, nor does per-tensor current scaling where the operand's amax was taken before (a device
// word the scale is drawn from), nor NVFP4's UE4M3 group scales where it was (their tensor
// scale S comes from that amax, each group's scale from its own); without one, per-tensor
// current scaling and NVFP4 keep two passes.
//
// Only the 8-bit round-to-nearest operands take 4 x 4 super-tiles (fp8-block's 1 x 128 and
// 128 x 128 groups, fp8-rowwise's rows of up to 128): the others' groups (mxfp8's, mxfp4's 1 x
// 32, 16 x 16 tiles, a given tensor scale) fit one sub-tile, and their kernels are compiled for
// one (quantize_tile.cuh's N), a sixteenth of the unrolled code, which is where nvcc's time goes.
#pragma once

namespace tg {

// A block's super-tile, and the groups it meets: gpr rows of groups by gpc columns.
struct OnePassPlan {
  int nr = 1, nc = 1;
  int gpr = 1, gpc = 1;
};
constexpr int kOnePassGroups = 64;  // the most groups a block keeps in shared memory

// The most sub-tiles a super-tile spans each way for an operand of elem_bits-bit codes, rounded
// stochastically or not (see above).
constexpr int one_pass_max_span(int elem_bits, bool stochastic) {
  return elem_bits == 8 && !stochastic ? 4 : 1;
}

// The sub-tiles (1, or 4 up to max_span) a span needs along a dimension of n with groups of g
// (clipped to n), so that no group straddles two blocks; 0 if none does. `any`: no group to
// keep whole.
inline int one_pass_span(int g, int n, bool any, int max_span) {
  for (int k = 1; k <= max_span; k *= 4)
    if (any || (32 * k) % g == 0 || (g == n && n <= 32 * k)) return k;
  return 0;
}

// Groups gr x gc (clipped, ngr x ngc of them) over (rows, cols); e4m3_scales: NVFP4's scale
// format; scale_given: a delayed tensor scale; amax_given: the operand's amax taken before
// (per-tensor current scaling draws its one scale from it, NVFP4 its tensor scale);
// max_span: one_pass_max_span's. False where the operand needs two passes.
inline bool one_pass_plan(int rows, int cols, int gr, int gc, int ngr, int ngc, bool e4m3_scales,
                          bool scale_given, bool amax_given, int max_span, OnePassPlan* t) {
  if (e4m3_scales && !amax_given) return false;
  // no group's amax to take: a given scale, or one group whose amax is given
  const bool any = scale_given || (amax_given && !e4m3_scales);
  t->nr = one_pass_span(gr, rows, any, max_span);
  t->nc = one_pass_span(gc, cols, any, max_span);
  if (!t->nr || !t->nc) return false;
  const int gpr = (32 * t->nr + gr - 1) / gr, gpc = (32 * t->nc + gc - 1) / gc;
  t->gpr = gpr < ngr ? gpr : ngr, t->gpc = gpc < ngc ? gpc : ngc;
  return t->gpr * t->gpc <= kOnePassGroups;
}

}  // namespace tg
