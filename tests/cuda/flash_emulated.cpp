// flash_emulated.cpp: the flash attention launchers (src/backends/cuda/attention.cu,
// attention_forward_lse / attention_backward_lse) and kernels (kernels/flash_attention.cuh)
// on the CPU, CUDA threads emulated (tests/cuda/cuda_emulation.h, dynamic shared memory
// included), against the CPU backend's attention (src/backends/cpu/attention.cpp: the att reference
// and its lse twin) in fp32, bf16 and fp16, head sizes 32..128, odd T (partial tiles), and a
// rerun for identical bits. It executes the kernels' tiling, masking, online softmax and index
// math as written; it says nothing about nvcc, the memory model or performance
// (tests/cuda/test_kernels.cu on a GPU does).
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <cstring>

using namespace emu_test;

namespace {

template <typename T>
double rel_err(const std::vector<T>& a, const std::vector<T>& b) {
  return emu_test::rel_err(a.data(), b.data(), a.size());
}

template <typename T>
void run_flash(std::vector<T>& out, std::vector<float>& lse, std::vector<T>& dqkv,
               const std::vector<T>& qkv, const std::vector<T>& dout, int B, int T_, int NH,
               int hs) {
  gpu::Ctx& c = emu_ctx();
  REQUIRE(gpu::flash_attention_supported(hs));
  gpu::attention_forward_lse(c, dtype_of<T>(), out.data(), lse.data(), qkv.data(), B, T_, NH * hs,
                             NH);
  gpu::attention_backward_lse(c, dtype_of<T>(), dqkv.data(), dout.data(), qkv.data(), out.data(),
                              lse.data(), B, T_, NH * hs, NH);
  check_emu();
}

void check(bool ok, const char* what, double v, double tol) {
  CAPTURE(what);
  CAPTURE(v);
  CAPTURE(tol);
  CHECK(ok);
}

template <typename T>
void test_case(int B, int T_, int NH, int hs, double tol, uint32_t seed) {
  CAPTURE(tname<T>());
  CAPTURE(B);
  CAPTURE(T_);
  CAPTURE(NH);
  CAPTURE(hs);
  const int Cn = NH * hs;
  const size_t btc = size_t(B) * T_ * Cn, bht = size_t(B) * NH * T_;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<T> qkv(3 * btc), dout(btc);
  // q and k larger than unit so the softmax is far from uniform
  for (auto& x : qkv) x = e<T>(2.f * U(rng));
  for (auto& x : dout) x = e<T>(U(rng));
  const T poison = e<T>(std::nanf(""));
  // the reference: the att path (and its lse twin for lse)
  std::vector<T> out_ref(btc, poison), att(bht * T_, poison), dqkv_ref(3 * btc, poison);
  std::vector<T> out_twin(btc, poison);
  std::vector<float> lse_ref(bht, std::nanf(""));
  cpu::attention_forward(C(out_ref.data()), C(att.data()), C(qkv.data()), B, T_, Cn, NH);
  cpu::attention_backward(C(dqkv_ref.data()), C(dout.data()), C(qkv.data()), C(att.data()), B, T_,
                          Cn, NH);
  cpu::attention_forward_lse(C(out_twin.data()), lse_ref.data(), C(qkv.data()), B, T_, Cn, NH);
  std::vector<T> dqkv_twin(3 * btc, poison);
  cpu::attention_backward_lse(C(dqkv_twin.data()), C(dout.data()), C(qkv.data()),
                              C(out_twin.data()), lse_ref.data(), B, T_, Cn, NH);

  std::vector<T> out(btc, poison), dqkv(3 * btc, poison);
  std::vector<float> lse(bht, std::nanf(""));
  run_flash<T>(out, lse, dqkv, qkv, dout, B, T_, NH, hs);

  check(rel_err(out_twin, out_ref) < tol, "cpu twin out vs att path", rel_err(out_twin, out_ref),
        tol);
  check(rel_err(dqkv_twin, dqkv_ref) < tol, "cpu twin dqkv vs att path",
        rel_err(dqkv_twin, dqkv_ref), tol);
  check(rel_err(out, out_ref) < tol, "flash out", rel_err(out, out_ref), tol);
  const double le = rel_err(lse, lse_ref);
  check(le < 1e-5, "flash lse vs cpu twin", le, 1e-5);
  // dq, dk, dv separately
  for (int part = 0; part < 3; part++) {
    std::vector<T> a, r;
    for (size_t row = 0; row < size_t(B) * T_; row++)
      for (int i = 0; i < Cn; i++) {
        a.push_back(dqkv[row * 3 * Cn + part * Cn + i]);
        r.push_back(dqkv_ref[row * 3 * Cn + part * Cn + i]);
      }
    const char* names[3] = {"flash dq", "flash dk", "flash dv"};
    const double err = rel_err(a, r);
    check(err < tol, names[part], err, tol);
  }
  // deterministic: a second run gives the same bits
  std::vector<T> out2(btc, poison), dqkv2(3 * btc, poison);
  std::vector<float> lse2(bht, std::nanf(""));
  run_flash<T>(out2, lse2, dqkv2, qkv, dout, B, T_, NH, hs);
  const bool same = std::memcmp(out2.data(), out.data(), btc * sizeof(T)) == 0 &&
                    std::memcmp(dqkv2.data(), dqkv.data(), 3 * btc * sizeof(T)) == 0;
  check(same, "second run bit-identical", same ? 0 : 1, 1);
}

}  // namespace

TEST_CASE("flash attention (emulated): out, lse, dq/dk/dv vs the CPU, odd T, reruns identical") {
  test_case<float>(1, 45, 2, 64, 1e-5, 1);
  test_case<bf16>(2, 33, 2, 32, 1e-2, 2);
  test_case<f16>(1, 40, 1, 64, 1e-2, 3);
  test_case<float>(1, 1, 1, 32, 1e-5, 4);
  test_case<float>(1, 40, 1, 96, 1e-5, 5);
  test_case<bf16>(1, 65, 2, 128, 1e-2, 6);
  test_case<float>(2, 96, 1, 128, 1e-5, 7);
}
