#!/usr/bin/env bash
# Builds and runs the FP8 kernel tests on their own, until the CUDA backend's Makefile rules
# and test runner (branch `cuda`) take them over:
#   1. tests/cuda/fp8_kernels_emulated.cpp: the kernels of kernels/fp8_kernels.cuh compiled by
#      g++ and run on the CPU with CUDA's threads emulated (no GPU needed);
#   2. tests/cuda/test_fp8.cu: everything on the GPU against the CPU reference. Without a GPU
#      its GPU cases print "CUDA tests skipped: no GPU" and pass; the host-only cases run.
# Extra arguments go to the second doctest binary (e.g. -tc="fp8 GEMMs*" -s).
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
OUT=build/fp8_test
mkdir -p "$OUT"
CUDA_INC=$(dirname "$NVCC")/../include
${CXX:-g++} -std=c++20 -O2 -pthread -Wall -Wextra -Werror -Wno-unknown-pragmas -I. -I"$CUDA_INC" \
  tests/cuda/fp8_kernels_emulated.cpp -o "$OUT/fp8_kernels_emulated"
"$OUT/fp8_kernels_emulated"
FLAGS=(-std=c++17 -O3 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
       -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -I.)
"$NVCC" "${FLAGS[@]}" -c tests/cuda/test_fp8.cu -o "$OUT/test_fp8.o"
${CXX:-g++} -std=c++17 -O2 -c tests/cuda/fp8_test_main.cpp -o "$OUT/fp8_test_main.o"
"$NVCC" -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  "$OUT/test_fp8.o" "$OUT/fp8_test_main.o" -o "$OUT/fp8_test" -lcublasLt -lcublas
"$OUT/fp8_test" "$@"
