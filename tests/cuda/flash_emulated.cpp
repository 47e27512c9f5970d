// flash_emulated.cpp: runs the flash attention kernels of kernels/flash_attention.cuh on the
// CPU, CUDA threads emulated (as tests/cuda/fp8_kernels_emulated.cpp does): each block runs as
// blockDim.x std::threads, __syncthreads is a std::barrier over the block, the warp shuffles
// exchange through a per-warp array between two barriers over the warp's 32 threads, dynamic
// shared memory is one host buffer (one block at a time). It executes the kernels' tiling,
// masking, online softmax and index math as written and compares them with the CPU backend's
// attention (src/cpu/attention.cpp: the att reference and its lse twin); it says nothing about
// nvcc, the memory model or performance (tests/cuda/test_kernels.cu on a GPU does).
// Built by the Makefile (g++ -std=c++20) and run by `make test` before the main suite.
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define TG_FLASH_EMULATED

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "src/cpu/ops.h"  // the reference (linked from src/cpu/attention.cpp)
#include "src/formats.h"

struct uint3e {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3e {
  unsigned x = 1, y = 1, z = 1;
};
namespace emu {
thread_local uint3e thread_idx, block_idx;
dim3e block_dim, grid_dim;
std::barrier<>* block_barrier = nullptr;
std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
float warp_vals[32][32];
std::vector<float> dyn_smem;
}  // namespace emu

#define threadIdx emu::thread_idx
#define blockIdx emu::block_idx
#define blockDim emu::block_dim
#define gridDim emu::grid_dim
#define TG_FLASH_SMEM(name) float* name = emu::dyn_smem.data()

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
inline float shfl(float v, unsigned src_of_lane_xor, bool is_xor) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  emu::warp_vals[w][l] = v;
  emu::warp_barriers[w]->arrive_and_wait();
  const float r = emu::warp_vals[w][is_xor ? (l ^ src_of_lane_xor) : src_of_lane_xor];
  emu::warp_barriers[w]->arrive_and_wait();
  return r;
}
inline float __shfl_sync(unsigned, float v, int src) { return shfl(v, unsigned(src), false); }
inline float __shfl_xor_sync(unsigned, float v, int m) { return shfl(v, unsigned(m), true); }
using std::min;

// What common.cuh gives the kernels (the element types and their rounding, as
// src/cpu/storage.h and kernels/common.cuh both do through src/formats.h).
namespace tg::gpu {
using tg::cpu::bf16;
using tg::cpu::f16;
using tg::cpu::ld;
using tg::cpu::st;
inline float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
inline float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = std::fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
}  // namespace tg::gpu

#include "kernels/flash_attention.cuh"

namespace {

using namespace tg;

template <typename... P, typename... A>
void launch(dim3e grid, unsigned block, size_t smem_bytes, void (*kernel)(P...), A... args) {
  emu::block_dim = dim3e{block, 1, 1};
  emu::grid_dim = grid;
  emu::dyn_smem.assign(smem_bytes / sizeof(float) + 1, std::nanf(""));  // poisoned
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        std::fill(emu::dyn_smem.begin(), emu::dyn_smem.end(), std::nanf(""));
        std::barrier<> bar(block);
        emu::block_barrier = &bar;
        emu::warp_barriers.clear();
        for (unsigned w = 0; w < (block + 31) / 32; w++)
          emu::warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; t++)
          th.emplace_back([=] {
            emu::thread_idx = uint3e{t, 0, 0};
            emu::block_idx = uint3e{bx, by, bz};
            kernel(args...);
          });
        for (auto& x : th) x.join();
      }
}

template <typename T>
double to_d(T x) {
  return double(tg::cpu::ld(x));
}

// ||a - b|| / ||b||
template <typename T>
double rel_err(const std::vector<T>& a, const std::vector<T>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    const double x = to_d(a[i]), y = to_d(b[i]);
    if (!std::isfinite(x)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);  // all-zero reference: absolute
}

template <typename T, int KJ>
void run_flash(std::vector<T>& out, std::vector<float>& lse, std::vector<T>& dqkv,
               const std::vector<T>& qkv, const std::vector<T>& dout, int B, int T_, int NH) {
  namespace fl = gpu::flash;
  const int hs = 32 * KJ;
  const float scale = 1.f / std::sqrt(float(hs));
  const dim3e grid{unsigned((T_ + fl::kTile - 1) / fl::kTile), unsigned(NH), unsigned(B)};
  launch(grid, fl::kThreads, fl::forward_smem(hs), &fl::forward_kernel<T, KJ>, out.data(),
         lse.data(), qkv.data(), T_, NH, scale);
  std::vector<float> D(size_t(B) * NH * T_, std::nanf(""));
  const int rows = B * NH * T_;
  launch(dim3e{unsigned((rows + 3) / 4), 1, 1}, 128, 0, &fl::delta_kernel<T>, D.data(),
         static_cast<const T*>(out.data()), dout.data(), B, T_, NH, hs);
  launch(grid, fl::kThreads, fl::dkv_smem(hs), &fl::backward_dkv_kernel<T, KJ>, dqkv.data(),
         dout.data(), qkv.data(), static_cast<const float*>(lse.data()),
         static_cast<const float*>(D.data()), T_, NH, scale);
  launch(grid, fl::kThreads, fl::dq_smem(hs), &fl::backward_dq_kernel<T, KJ>, dqkv.data(),
         dout.data(), qkv.data(), static_cast<const float*>(lse.data()),
         static_cast<const float*>(D.data()), T_, NH, scale);
}

int failures = 0, checks = 0;
void check(bool ok, const char* what, double v, double tol, const char* ty, int B, int T_, int NH,
           int hs) {
  checks++;
  if (!ok) failures++;
  std::printf("%s %-5s B=%d T=%-3d NH=%d hs=%-3d %-26s %.3g (< %.0e)\n", ok ? "ok  " : "FAIL", ty,
              B, T_, NH, hs, what, v, tol);
}

template <typename T, int KJ>
void test_case(const char* ty, int B, int T_, int NH, double tol, uint32_t seed) {
  const int hs = 32 * KJ, C = NH * hs;
  const size_t btc = size_t(B) * T_ * C, bht = size_t(B) * NH * T_;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<T> qkv(3 * btc), dout(btc);
  // q and k larger than unit so the softmax is far from uniform
  for (auto& x : qkv) x = tg::cpu::st<T>(2.f * U(rng));
  for (auto& x : dout) x = tg::cpu::st<T>(U(rng));
  const T poison = tg::cpu::st<T>(std::nanf(""));
  // the reference: the att path (and its lse twin for lse)
  std::vector<T> out_ref(btc, poison), att(bht * T_, poison), dqkv_ref(3 * btc, poison);
  std::vector<T> out_twin(btc, poison);
  std::vector<float> lse_ref(bht, std::nanf(""));
  tg::cpu::attention_forward(out_ref.data(), att.data(), qkv.data(), B, T_, C, NH);
  tg::cpu::attention_backward(dqkv_ref.data(), dout.data(), qkv.data(), att.data(), B, T_, C, NH);
  tg::cpu::attention_forward_lse(out_twin.data(), lse_ref.data(), qkv.data(), B, T_, C, NH);
  std::vector<T> dqkv_twin(3 * btc, poison);
  tg::cpu::attention_backward_lse(dqkv_twin.data(), dout.data(), qkv.data(), out_twin.data(),
                                  lse_ref.data(), B, T_, C, NH);

  std::vector<T> out(btc, poison), dqkv(3 * btc, poison);
  std::vector<float> lse(bht, std::nanf(""));
  run_flash<T, KJ>(out, lse, dqkv, qkv, dout, B, T_, NH);

  check(rel_err(out_twin, out_ref) < tol, "cpu twin out vs att path", rel_err(out_twin, out_ref),
        tol, ty, B, T_, NH, hs);
  check(rel_err(dqkv_twin, dqkv_ref) < tol, "cpu twin dqkv vs att path",
        rel_err(dqkv_twin, dqkv_ref), tol, ty, B, T_, NH, hs);
  check(rel_err(out, out_ref) < tol, "flash out", rel_err(out, out_ref), tol, ty, B, T_, NH, hs);
  const double le = rel_err(lse, lse_ref);
  check(le < 1e-5, "flash lse vs cpu twin", le, 1e-5, ty, B, T_, NH, hs);
  // dq, dk, dv separately
  for (int part = 0; part < 3; part++) {
    std::vector<T> a, r;
    for (size_t row = 0; row < size_t(B) * T_; row++)
      for (int i = 0; i < C; i++) {
        a.push_back(dqkv[row * 3 * C + part * C + i]);
        r.push_back(dqkv_ref[row * 3 * C + part * C + i]);
      }
    const char* names[3] = {"flash dq", "flash dk", "flash dv"};
    const double e = rel_err(a, r);
    check(e < tol, names[part], e, tol, ty, B, T_, NH, hs);
  }
  // deterministic: a second run gives the same bits
  std::vector<T> out2(btc, poison), dqkv2(3 * btc, poison);
  std::vector<float> lse2(bht, std::nanf(""));
  run_flash<T, KJ>(out2, lse2, dqkv2, qkv, dout, B, T_, NH);
  const bool same = std::memcmp(out2.data(), out.data(), btc * sizeof(T)) == 0 &&
                    std::memcmp(dqkv2.data(), dqkv.data(), 3 * btc * sizeof(T)) == 0;
  check(same, "second run bit-identical", same ? 0 : 1, 1, ty, B, T_, NH, hs);
}

}  // namespace

int main(int argc, char** argv) {
  const bool minimal = argc > 1 && std::string(argv[1]) == "--minimal";
  const auto t0 = std::chrono::steady_clock::now();
  using tg::cpu::bf16;
  using tg::cpu::f16;
  // odd T (partial tiles), several heads and batches; hs 32 and 64 always, 96/128 in full runs
  test_case<float, 2>("fp32", 1, 45, 2, 1e-5, 1);
  test_case<bf16, 1>("bf16", 2, 33, 2, 1e-2, 2);
  test_case<f16, 2>("fp16", 1, 40, 1, 1e-2, 3);
  test_case<float, 1>("fp32", 1, 1, 1, 1e-5, 4);
  if (!minimal) {
    test_case<float, 3>("fp32", 1, 40, 1, 1e-5, 5);
    test_case<bf16, 4>("bf16", 1, 65, 2, 1e-2, 6);
    test_case<float, 4>("fp32", 2, 96, 1, 1e-5, 7);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("flash attention emulated: %d checks, %d failed (%.1f s)\n", checks, failures, s);
  return failures ? 1 : 0;
}
