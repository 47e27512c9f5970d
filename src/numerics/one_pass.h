// one_pass.h: whether the CUDA quantizer of one operand reads its source once (kernels/
// quantize_tile.cuh) or twice (kernels/quantize_blocks.cuh), on the host (no CUDA types): the
// launcher (src/backends/cuda/quantize_blocks.cu) and the scratch plan (src/precision/
// scaled_scratch.cpp, the two passes' scratch is not asked for in one) decide alike.
//
// One pass needs every scale group inside the super-tile of one block of threads (nr x nc
// sub-tiles of 32 x 32, 1 or 4 each way: groups of 16, 32, 128 or one spanning up to 128), and
// no tensor-wide quantity before rounding: a given (delayed) tensor scale needs no amax at
// all; per-tensor current scaling and NVFP4's UE4M3 scales (whose tensor scale comes from
// the operand's amax) keep two passes.
#pragma once

namespace tg {

// A block's super-tile, and the groups it meets: gpr rows of groups by gpc columns.
struct OnePassPlan {
  int nr = 1, nc = 1;
  int gpr = 1, gpc = 1;
};
constexpr int kOnePassGroups = 64;  // the most groups a block keeps in shared memory

// The sub-tiles (1 or 4) a span needs along a dimension of n with groups of g (clipped to n),
// so that no group straddles two blocks; 0 if neither does. `any`: no group to keep whole.
inline int one_pass_span(int g, int n, bool any) {
  for (int k = 1; k <= 4; k *= 4)
    if (any || (32 * k) % g == 0 || (g == n && n <= 32 * k)) return k;
  return 0;
}

// Groups gr x gc (clipped, ngr x ngc of them) over (rows, cols); e4m3_scales: NVFP4's scale
// format; given: a delayed tensor scale. False where the operand needs two passes.
inline bool one_pass_plan(int rows, int cols, int gr, int gc, int ngr, int ngc, bool e4m3_scales,
                          bool given, OnePassPlan* t) {
  if (e4m3_scales) return false;
  t->nr = one_pass_span(gr, rows, given), t->nc = one_pass_span(gc, cols, given);
  if (!t->nr || !t->nc) return false;
  const int gpr = (32 * t->nr + gr - 1) / gr, gpc = (32 * t->nc + gc - 1) / gc;
  t->gpr = gpr < ngr ? gpr : ngr, t->gpc = gpc < ngc ? gpc : ngc;
  return t->gpr * t->gpc <= kOnePassGroups;
}

}  // namespace tg
