// quantize_lanes: AVX-512 twins of quantize.cpp's inner loops (stochastic rounding into a
// narrow element format, the random Hadamard butterflies), equal to the scalar loops bit for
// bit (tests/backends/test_quantize_lanes.cpp). Chosen at run time: each entry point says whether
// the CPU has the instructions (cpu_features.h), and the callers keep their scalar loops.
#pragma once
#include <cstddef>
#include <cstdint>

#include "src/numerics/group_scale.h"
#include "src/numerics/recipe.h"

namespace tg::cpu {

// Whether this CPU runs the functions below (AVX-512 F, DQ, BW and VL, saved by the OS).
bool quantize_lanes_available();

// x[c] <- round_F(x[c] enc, bits of element idx0 + c) dec for c in [0, n16), n16 = n rounded
// down to a multiple of 16, with the bits quant_sr_bits(mixed, idx0 + c) (formats.h) and F's
// stochastic encoder followed by its decoder (E2M1, E4M3 or E5M2; saturating). idx0 must be
// even. Returns n16: the caller rounds the rest.
int sr_round_lanes(float* x, int n, float enc, float dec, uint64_t mixed, uint64_t idx0,
                   ElemFormat f);

// out[j] = max |x| over values [j gc, (j + 1) gc) of x, j < groups, as fp32 bits (|x|'s bits
// order as |x| does: inf above the finite values, NaNs above inf). gc a multiple of 16.
void group_amax_lanes(const float* x, int groups, int gc, uint32_t* out);

// The same over `groups` whole groups of gc values (gc a multiple of 16), group j at the
// multipliers sg[j], x[0] being element idx0 (even). Returns the groups done: all of them, or
// 0 (no AVX-512, odd idx0, gc not a multiple of 16) for the caller's loop.
int sr_round_groups_lanes(float* x, int groups, int gc, const GroupScale* sg, uint64_t mixed,
                          uint64_t idx0, ElemFormat f);

// The same with rounding to nearest even into E2M1 (storage.h's e2m1_round_trip, which NaN
// passes through), no random bits. Returns the groups done: all of them, or 0 (no AVX-512, gc
// not a multiple of 16).
int rne_round_groups_e2m1_lanes(float* x, int groups, int gc, const GroupScale* sg);

// quantize_tensor_lanes.cpp: codes[i] = the bf16 code of round_F(x[i] s) (storage.h's
// nearest_round_trip: nearest even, saturating) for i in [0, n32), n32 = n rounded down to a
// multiple of 32, and *amax_bits = the largest |x[i]| among them as fp32 bits (NaN and inf
// above the finite values). f is E4M3 or E5M2; x bf16 codes or fp32 values. Returns n32, or
// 0 (amax_bits 0) without AVX-512: the caller does the rest. Results for non-finite x[i] are
// unspecified (the caller turns such a tensor into NaN).
size_t fp8_codes_lanes(uint16_t* codes, const uint16_t* x, size_t n, float s, ElemFormat f,
                       uint32_t* amax_bits);
size_t fp8_codes_lanes(uint16_t* codes, const float* x, size_t n, float s, ElemFormat f,
                       uint32_t* amax_bits);

// The butterflies of hadamard_rows on `runs` consecutive runs of n values each (n a power of
// two >= 16): each run v <- H D v (inverse: D H v) with its signs (+-1, `sign` advancing with v)
// and the scale `norm`, in the scalar loop's order of operations.
void hadamard_runs_lanes(float* v, const float* sign, int n, int runs, float norm, bool inverse);

}  // namespace tg::cpu
