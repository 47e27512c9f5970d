// Standalone runner for tests/cuda/test_fp8.cu until the shared CUDA test runner (branch
// `cuda`) is merged: scripts/fp8_kernel_test.sh builds and runs it. A .cpp (plain doctest,
// g++), so that a build globbing tests/cuda/*.cu does not link a second main().
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
