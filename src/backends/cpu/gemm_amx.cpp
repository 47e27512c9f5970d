// gemm_amx: the bf16 GEMMs on AMX-BF16 tiles (gemm_amx.h says what they compute).
//
// Blocking as in gemm_bf16.cpp (NC-column blocks, KC-deep slices of op(B) packed once, MC-row
// blocks of op(A)), with a 32 x 32 micro-tile: four fp32 C tiles of 16 x 16, two A tiles (16
// rows each) and two B tiles (16 columns each), K 32 (16 pairs) per instruction. Packed
// layouts, in 32-bit words holding a pair of bf16 values (k even in the low half), zero beyond
// the edges: B [16 columns][pair][column], read 16 pairs at a time (one tile);
// A [16 rows][tile][row][16 pairs], each tile 1 KiB.
// The kernels are compiled for AMX by target attributes, so the binary runs on CPUs without
// it; set_narrow_gemm selects them only where amx_tiles_granted().
#include "gemm_amx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_features.h"
#include "gemm_bf16.h"
#include "src/base/common.h"

#if defined(__x86_64__) && defined(__linux__)
// GCC 12 warns on its own _mm512_undefined_* (self-initialised) in the intrinsics that use it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <sys/syscall.h>
#include <unistd.h>
#define TG_AMX_KERNEL 1
#endif

namespace tg::cpu {

namespace {

// kKC a multiple of 32: tiles start at k0 % 32 == 0. kGroup slices of B (1 MiB) fit in L2.
constexpr int kMC = 64, kNC = 512, kKC = 256, kGroup = 4;
static_assert(kKC % 32 == 0 && kMC % 32 == 0 && kNC % 32 == 0, "blocking");

#ifdef TG_AMX_KERNEL
// d[p * 16 + i] = the 32-bit word p of row i (x + i * ld), for 16 rows and 16 words: a 16 x 16
// transpose of 32-bit lanes (pairs of bf16 stay together).
__attribute__((target("avx512f"))) void transpose16(uint32_t* d, const uint16_t* x, int ld) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(x + size_t(i) * ld);
  for (int i = 0; i < 16; i += 2) {  // 32-bit lanes of row pairs
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)  // 64-bit lanes of row quads
    for (int j = 0; j < 2; j++) {
      r[i + j] = _mm512_unpacklo_epi64(t[i + j], t[i + 2 + j]);
      r[i + 2 + j] = _mm512_unpackhi_epi64(t[i + j], t[i + 2 + j]);
    }
  for (int i = 0; i < 16; i += 8)  // 128-bit blocks of row octets
    for (int j = 0; j < 4; j++) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + 4 + j], 0x88);
      t[i + 4 + j] = _mm512_shuffle_i32x4(r[i + j], r[i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; j++) {  // 256-bit halves of the two row octets
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
  }
  // r[j] ends up holding word kWord[j] of the 16 rows, in row order.
  constexpr int kWord[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  for (int j = 0; j < 16; j++) _mm512_storeu_si512(d + size_t(kWord[j]) * 16, r[j]);
}
#endif

// Rows [r0, r0 + rows) of op(X), k in [k0, k0 + kc), as panels of 16 rows: out[panel][pair][16],
// a pair op(X)(r, 2p) | op(X)(r, 2p + 1) << 16 per word, for pairs [0, pp) (pp >= the pairs of
// kc) and `panels` panels, zero beyond the edges.
void pack16(uint32_t* out, const uint16_t* X, int ld, bool trans, int r0, int rows, int k0, int kc,
            int pp, int panels) {
  const int full = kc / 2, pairs = (kc + 1) / 2;
  for (int q = 0; q < panels; q++) {
    uint32_t* panel = out + size_t(q) * pp * 16;
    const int w = std::clamp(rows - q * 16, 0, 16), r = r0 + q * 16;
    // Zeros where no value lands: the pairs past kc, and whole rows of a partial panel.
    std::fill(panel + size_t(w < 16 ? 0 : pairs) * 16, panel + size_t(pp) * 16, 0u);
    if (w == 0) continue;
    if (!trans) {
      // Rows of X are contiguous along k: each pair is one 32-bit word, gathered from the
      // panel's 16 rows (their cache lines stay in L1) into one 64-byte row of the panel,
      // 16 pairs at a time by a transpose in registers where the panel is whole.
      const uint16_t* x = X + size_t(r) * ld + k0;
      int p0 = 0;
#ifdef TG_AMX_KERNEL
      if (w == 16 && cpu_features().avx512f)
        for (; p0 + 16 <= full; p0 += 16) transpose16(panel + size_t(p0) * 16, x + 2 * p0, ld);
#endif
      for (int p = p0; p < full; p++)
        for (int i = 0; i < w; i++)
          std::memcpy(panel + size_t(p) * 16 + i, x + size_t(i) * ld + 2 * p, 4);
      if (kc % 2)
        for (int i = 0; i < w; i++) panel[size_t(full) * 16 + i] = x[size_t(i) * ld + kc - 1];
      continue;
    }
    // X(k, r): a pair comes from two rows of X, contiguous along r.
    for (int p = 0; p < full; p++) {
      const uint16_t* lo = X + size_t(k0 + 2 * p) * ld + r;
      const uint16_t* hi = lo + ld;
      uint32_t* d = panel + size_t(p) * 16;
      for (int i = 0; i < w; i++) d[i] = lo[i] | uint32_t(hi[i]) << 16;
    }
    if (kc % 2) {
      const uint16_t* lo = X + size_t(k0 + kc - 1) * ld + r;
      for (int i = 0; i < w; i++) panel[size_t(full) * 16 + i] = lo[i];
    }
  }
}

// A's tiles from pack16's panels: each 16 x 16 block of words transposed to [row][pair].
void to_tile_rows(uint32_t* out, const uint32_t* in, int panels, int nt) {
  for (int q = 0; q < panels; q++)
    for (int t = 0; t < nt; t++) {
      const uint32_t* s = in + (size_t(q) * nt + t) * 256;
      uint32_t* d = out + (size_t(q) * nt + t) * 256;
      for (int p = 0; p < 16; p++)
        for (int i = 0; i < 16; i++) d[i * 16 + p] = s[p * 16 + i];
    }
}

// A's tiles straight from rows of A contiguous along k: each tile row is 64 bytes of a row
// (zero past kc), rows past `rows` zero.
void pack_rows_a(uint32_t* out, const uint16_t* X, int ld, int r0, int rows, int k0, int kc, int nt,
                 int panels) {
  for (int i = 0; i < panels * 16; i++) {
    const uint16_t* x = i < rows ? X + size_t(r0 + i) * ld + k0 : nullptr;
    uint32_t* d = out + size_t(i / 16) * nt * 256 + size_t(i % 16) * 16;
    for (int t = 0; t < nt; t++) {
      const int n = x ? std::clamp(kc - 32 * t, 0, 32) : 0;
      uint16_t* dt = reinterpret_cast<uint16_t*>(d + size_t(t) * 256);
      if (n > 0) std::memcpy(dt, x + 32 * t, size_t(n) * 2);
      if (n < 32) std::fill(dt + n, dt + 32, uint16_t(0));
    }
  }
}

// Pairs per packed panel: whole tiles of 16.
int padded_pairs(int kc) { return ((kc + 1) / 2 + 15) / 16 * 16; }

// Packs op(X) rows [r0, r0 + rows) x [k0, k0 + kc) as operand A (tile rows) or B, quantized
// as q says (every packed word: the zeros past the edges stay zeros).
void pack_operand(std::vector<uint32_t>& out, std::vector<uint32_t>& tmp, bool is_a,
                  const uint16_t* X, int ld, bool trans, int r0, int rows, int k0, int kc,
                  PackQuant* q) {
  const int pp = padded_pairs(kc), panels = (rows + 31) / 32 * 2;
  const size_t words = size_t(panels) * pp * 16;
  if (out.size() < words) out.resize(words);
  if (!is_a) {
    pack16(out.data(), X, ld, trans, r0, rows, k0, kc, pp, panels);
  } else if (!trans) {
    pack_rows_a(out.data(), X, ld, r0, rows, k0, kc, pp / 16, panels);
  } else {
    if (tmp.size() < words) tmp.resize(words);
    pack16(tmp.data(), X, ld, trans, r0, rows, k0, kc, pp, panels);
    to_tile_rows(out.data(), tmp.data(), panels, pp / 16);
  }
  quantize_packed(out.data(), words, q);
}

#ifdef TG_AMX_KERNEL
#define TG_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))

struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0-3: C tiles (16 x 16 fp32); tmm4-5: A tiles (16 rows x 32 bf16); tmm6-7: B tiles (16
// pairs x 16 columns).
TG_TARGET_AMX void load_tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; t++) c.colsb[t] = 64, c.rows[t] = 16;
  _tile_loadconfig(&c);
}

TG_TARGET_AMX void release_tiles() { _tile_release(); }

// c(32, 32) at ldc = (load ? c : 0) + the packed panels' products over nt tiles of K: a0, a1
// the two 16-row panels, b0, b1 the two 16-column panels (each tile 256 words).
TG_TARGET_AMX void micro_kernel(int nt, const uint32_t* a0, const uint32_t* a1, const uint32_t* b0,
                                const uint32_t* b1, float* c, int ldc, bool load) {
  const size_t ldcb = size_t(ldc) * sizeof(float);
  float* c2 = c + size_t(16) * ldc;
  if (load) {
    _tile_loadd(0, c, ldcb);
    _tile_loadd(1, c + 16, ldcb);
    _tile_loadd(2, c2, ldcb);
    _tile_loadd(3, c2 + 16, ldcb);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int t = 0; t < nt; t++) {
    _tile_loadd(4, a0 + size_t(t) * 256, 64);
    _tile_loadd(5, a1 + size_t(t) * 256, 64);
    _tile_loadd(6, b0 + size_t(t) * 256, 64);
    _tile_loadd(7, b1 + size_t(t) * 256, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldcb);
  _tile_stored(1, c + 16, ldcb);
  _tile_stored(2, c2, ldcb);
  _tile_stored(3, c2 + 16, ldcb);
}

// One packed block: every 32 x 32 micro-tile of C(mc, nc), edges through a scratch tile.
// With scales (chunks) each micro-tile's sum starts from zero in the scratch tile and is
// scaled into C: first ? P (sa sb) : fma(P, sa sb, C), as gemm_bf16.cpp's kernel does.
void block(int mc, int nc, int pp, const uint32_t* pa, const uint32_t* pb, float* C, int ldc,
           bool load, const float* sa = nullptr, const float* sb = nullptr, bool first = true) {
  const int nt = pp / 16;
  const size_t panel = size_t(pp) * 16;  // words per 16-row (16-column) panel
  alignas(64) float tile[32 * 32];
  for (int j = 0; j < nc; j += 32)
    for (int i = 0; i < mc; i += 32) {
      const uint32_t* a = pa + size_t(i / 16) * panel;
      const uint32_t* b = pb + size_t(j / 16) * panel;
      const int mr = std::min(32, mc - i), nr = std::min(32, nc - j);
      float* c = C + size_t(i) * ldc + j;
      if (!sa && mr == 32 && nr == 32) {
        micro_kernel(nt, a, a + panel, b, b + panel, c, ldc, load);
        continue;
      }
      const bool ld = load && !sa;
      for (int r = 0; r < mr && ld; r++)
        std::copy(c + size_t(r) * ldc, c + size_t(r) * ldc + nr, tile + r * 32);
      micro_kernel(nt, a, a + panel, b, b + panel, tile, 32, ld);
      for (int r = 0; r < mr; r++) {
        float* cr = c + size_t(r) * ldc;
        const float* tr = tile + r * 32;
        if (!sa) {
          std::copy(tr, tr + nr, cr);
          continue;
        }
        for (int q = 0; q < nr; q++) {
          const float f = sa[i + r] * sb[j + q];
          cr[q] = first ? tr[q] * f : std::fma(tr[q], f, cr[q]);
        }
      }
    }
}
#endif

}  // namespace

bool amx_tiles_granted() {
  static const bool granted = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_tile || !f.amx_bf16) return false;
#ifdef TG_AMX_KERNEL
    // Linux (5.16 and later) gives a process the 8 KiB tile state only on request.
    constexpr int kXtiledata = 18;  // XFEATURE_XTILEDATA
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, kXtiledata) != 0) return false;
    unsigned long long perm = 0;
    return syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &perm) == 0 &&
           ((perm >> kXtiledata) & 1);
#else
    return false;
#endif
  }();
  return granted;
}

void gemm_bf16_amx(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, bool load, float* C, int ldc, PackQuant* qa,
                   PackQuant* qb) {
#ifdef TG_AMX_KERNEL
  // The B slices of up to kGroup along K stay packed while every row block runs through them,
  // so each C block (MC x NC fp32, 128 KiB) stays in L2 from one slice to the next.
  static thread_local std::vector<uint32_t> pa, pb[kGroup], tmp;
  load_tile_config();  // per thread and call: the configuration is the thread's
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int g0 = 0; g0 < K; g0 += kGroup * kKC) {
      const int slices = std::min(kGroup, (K - g0 + kKC - 1) / kKC);
      // op(B)'s columns are the rows of B^T: transposed unless B is stored (N, K).
      for (int s = 0; s < slices; s++)
        pack_operand(pb[s], tmp, false, B, ldb, !tb, j0, nc, g0 + s * kKC,
                     std::min(kKC, K - g0 - s * kKC), qb);
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        for (int s = 0; s < slices; s++) {
          const int k0 = g0 + s * kKC, kc = std::min(kKC, K - k0);
          pack_operand(pa, tmp, true, A, lda, ta, i0, mc, k0, kc, qa);
          block(mc, nc, padded_pairs(kc), pa.data(), pb[s].data(), C + size_t(i0) * ldc + j0, ldc,
                load || k0 > 0);
        }
      }
    }
  }
  release_tiles();  // the tile state back to its initial state: cheap context switches
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
  (void)load, (void)C, (void)ldc, (void)qa, (void)qb;
  throw Error("gemm_bf16_amx: this build has no AMX kernel");
#endif
}

void gemm_bf16_amx_chunks(int M, int N, int K, int chunk, const uint16_t* A, int lda,
                          const uint16_t* B, int ldb, const float* sa, const float* sb, float* C,
                          int ldc) {
#ifdef TG_AMX_KERNEL
  static thread_local std::vector<uint32_t> pa, pb, tmp;
  static thread_local std::vector<float> sac, sbc;  // one chunk's scales
  const int nch = (K + chunk - 1) / chunk;
  sac.resize(kMC);
  sbc.resize(kNC);
  load_tile_config();
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int ch = 0; ch < nch; ch++) {
      const int k0 = ch * chunk, kc = std::min(chunk, K - k0);
      pack_operand(pb, tmp, false, B, ldb, false, j0, nc, k0, kc, nullptr);
      for (int j = 0; j < nc; j++) sbc[j] = sb[size_t(j0 + j) * nch + ch];
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        pack_operand(pa, tmp, true, A, lda, false, i0, mc, k0, kc, nullptr);
        for (int i = 0; i < mc; i++) sac[i] = sa[size_t(i0 + i) * nch + ch];
        block(mc, nc, padded_pairs(kc), pa.data(), pb.data(), C + size_t(i0) * ldc + j0, ldc, false,
              sac.data(), sbc.data(), ch == 0);
      }
    }
  }
  release_tiles();
#else
  (void)M, (void)N, (void)K, (void)chunk, (void)A, (void)lda, (void)B, (void)ldb, (void)sa;
  (void)sb, (void)C, (void)ldc;
  throw Error("gemm_bf16_amx_chunks: this build has no AMX kernel");
#endif
}

}  // namespace tg::cpu
