// avx512_intrinsics.h: <immintrin.h> for the files whose AVX-512 code is compiled by target
// attribute and chosen at run time (quantize_lanes.cpp, quantize_tensor_lanes.cpp), with
// TG_QUANT_AVX512 defined where the target has it (x86-64).
#pragma once

#if defined(__x86_64__)
// GCC 12 warns on its own _mm512_undefined_* (self-initialised) in the intrinsics that use it
// (the casts and conversions between register widths).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define TG_QUANT_AVX512 1
#endif
