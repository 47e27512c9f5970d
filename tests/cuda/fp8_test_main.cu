// Standalone runner for tests/cuda/test_fp8.cu until the shared CUDA test runner (branch
// `cuda`) is merged: scripts/fp8_kernel_test.sh builds and runs it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
