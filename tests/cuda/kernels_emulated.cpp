// kernels_emulated.cpp: runs the CUDA backend's launchers (src/backends/cuda/*.cu, compiled by g++)
// and their kernels (kernels/*.cuh) on the CPU, with the CUDA threads emulated by
// tests/cuda/cuda_emulation.h, and compares them with the CPU backend's ops (src/backends/cpu/, the
// reference). No GPU needed: it checks the launch configurations, the kernels' index math,
// grid-stride loops, tails, 16-byte packs, warp and block reductions, early exits and
// rounding points exactly as written; not nvcc, the memory model, device libm or cuBLAS
// (tests/cuda/test_kernels.cu on a GPU does that). The GEMMs are fp32 loops, cuBLAS's and
// cuBLASLt's (tests/cuda/cuda_emulation.cpp, cublaslt_emulation.cpp: the real wrapper
// src/backends/cuda/cublaslt.cu runs), so both GEMM paths are tested. The same binary holds
// tensor_scaled_emulated.cpp and the GPU tests tests/cuda/test_*.cu, compiled
// against the same stand-ins.
//
// Tolerances: fp32 ||out-ref||/||ref|| <= 1e-5, 16-bit <= 1e-2; bit-exact where the op is
// pure data movement or a single rounding of the same fp32 value (encoder, residual,
// conversions, permutes), and AdamW (its arithmetic is one shared function with every FMA
// spelled out: master weights, the moments in every state format, the compute copy).
#define DOCTEST_CONFIG_IMPLEMENT  // this file holds the binary's main
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <cstdlib>
#include <map>
#include <random>
#include <type_traits>

#include "kernels/attention.cuh"
#include "kernels/encoder.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "src/numerics/master_format.h"
#include "src/numerics/moment_block.h"
#include "src/numerics/state_format.h"
#include "src/numerics/wire_format.h"

using namespace emu_test;

namespace {

// After each test case: what the emulation recorded that no check_emu() of the case reported
// (a backend test that calls none, a rule broken in a destructor) and work the case queued but
// never waited for (dropped: its buffers are gone). Each is printed with the case's name, and
// the binary then fails.
bool g_unreported = false;
struct EmuErrorListener : doctest::IReporter {
  explicit EmuErrorListener(const doctest::ContextOptions&) {}
  std::string name;
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override { name = tc.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    std::vector<std::string> all = emu::errors();
    for (const std::string& w : emu::drop_queued())
      all.push_back(w + ": queued and never waited for");
    for (const std::string& e : all)
      fprintf(stderr, "%s: emulation: %s\n", name.c_str(), e.c_str());
    g_unreported |= !all.empty();
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

// ---- the real launchers, typed for the tests ----
// Each waits for the emulated device after the launcher has queued its work (the tests read
// the results at once).

constexpr int kThreads = 256;  // the launchers' block size for element-wise kernels

gpu::Ctx make_ctx() { return emu_ctx(); }

template <typename E>
void encoder_backward(E* dwte, E* dwpe, const E* dout, const int32_t* tokens, int B, int T, int C) {
  gpu::encoder_backward(emu_ctx(), dtype_of<E>(), dwte, dwpe, dout, tokens, nullptr, B, T, C);
  wait_device();
}
template <typename E>
void residual_forward(const gpu::Ctx&, E* o, const E* a, const E* b, size_t n) {
  gpu::residual_forward(emu_ctx(), dtype_of<E>(), o, a, b, n);
  wait_device();
}
template <typename E>
void gelu_forward(const gpu::Ctx&, E* o, const E* x, size_t n, unsigned* amax = nullptr) {
  gpu::gelu_forward(emu_ctx(), dtype_of<E>(), o, x, n, amax);
  wait_device();
}
template <typename E>
void gelu_backward(const gpu::Ctx&, E* di, const E* x, const E* d, size_t n) {
  gpu::gelu_backward(emu_ctx(), dtype_of<E>(), di, x, d, n);
  wait_device();
}
template <typename E>
void adamw(const gpu::Ctx&, E* params, float* master, const E* grads, void* m, void* v, size_t n,
           const AdamWArgs& a, const gpu::SegmentAmax& amax = {}) {
  gpu::adamw(emu_ctx(), dtype_of<E>(), params, master, grads, m, v, n, a, nullptr, amax);
  wait_device();
}
template <typename D, typename S>
void convert(const gpu::Ctx&, D* dst, const S* src, size_t n, const Rounding& r) {
  gpu::convert(emu_ctx(), dtype_of<D>(), dst, dtype_of<S>(), src, n, r);
  wait_device();
}
template <typename E>
void norm(const E* x, size_t n, float inv_scale, float* out) {
  gpu::norm(emu_ctx(), dtype_of<E>(), x, n, inv_scale, out);
  wait_device();
}
template <typename G>
void classifier(const float* logits, float* losses, const int32_t* targets, G* dlogits, size_t ld,
                float dloss, int N, int V, int Vp) {
  gpu::classifier(emu_ctx(), logits, losses, targets, dtype_of<G>(), dlogits, ld, dloss, N, V, Vp);
  wait_device();
}
template <typename E>
void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* w, const E* b,
                       int N, int Cn) {
  gpu::layernorm_forward(emu_ctx(), dtype_of<E>(), out, mean, rstd, inp, w, b, N, Cn);
  wait_device();
}
template <typename E>
void residual_layernorm_forward(E* res, E* out, float* mean, float* rstd, const E* a, const E* bb,
                                const E* w, const E* b, int N, int Cn) {
  gpu::residual_layernorm_forward(emu_ctx(), dtype_of<E>(), res, out, mean, rstd, a, bb, w, b, N,
                                  Cn);
  wait_device();
}
template <typename E>
void layernorm_backward(E* dinp, E* dw, E* db, const E* dout, const E* inp, const E* w,
                        const float* mean, const float* rstd, int N, int Cn) {
  gpu::layernorm_backward(emu_ctx(), dtype_of<E>(), dinp, dw, db, dout, inp, w, mean, rstd, N, Cn);
  wait_device();
}
template <typename E>
void bias_backward(E* dbias, const E* dout, int N, int OC) {
  gpu::bias_backward(emu_ctx(), dtype_of<E>(), dbias, dout, N, OC);
  wait_device();
}
// The context with cuda.gemm = fallback (cuBLAS, then matmul.cu's epilogue kernel) or lt (the
// cuBLASLt wrapper, emulated by tests/cuda/cublaslt_emulation.cpp).
gpu::Ctx gemm_ctx(bool fallback) {
  gpu::Ctx c = emu_ctx();
  c.opt.gemm_fallback = fallback;
  return c;
}
// matmul.cu's gemm() on either path.
template <typename E>
void gemm(bool fallback, bool ta, bool tb, int M, int N, int K, const E* A, int lda, const E* B,
          int ldb, E* D, float beta, const E* bias) {
  gpu::Ctx c = gemm_ctx(fallback);
  gpu::gemm(c, ta, tb, M, N, K, dtype_of<E>(), A, lda, B, ldb, dtype_of<E>(), D, N, beta, bias);
  wait_device();
}
template <typename E>
void attention_forward(bool fallback, E* out, E* att, const E* qkv, int B, int T, int Cn, int NH) {
  gpu::Ctx c = gemm_ctx(fallback);
  gpu::attention_forward(c, dtype_of<E>(), out, att, qkv, B, T, Cn, NH);
  wait_device();
}
template <typename E>
void attention_backward(bool fallback, E* dqkv, const E* dout, const E* qkv, const E* att, int B,
                        int T, int Cn, int NH) {
  gpu::Ctx c = gemm_ctx(fallback);
  gpu::attention_backward(c, dtype_of<E>(), dqkv, dout, qkv, att, B, T, Cn, NH);
  wait_device();
}
// attention.cu's att and dqkv on a device whose blocks have `smem` bytes of shared memory
// (sharedMemPerBlock, without opting in): it sets how many rows a softmax block stages, or none.
template <typename E>
void attention_at_smem(size_t smem, E* att, E* dqkv, const E* qkv, const E* dout, int B, int T,
                       int Cn, int NH) {
  gpu::Ctx c = emu_ctx();
  c.prop.sharedMemPerBlock = smem;
  Buf<E> out(size_t(B) * T * Cn);
  gpu::attention_forward(c, dtype_of<E>(), out.p, att, qkv, B, T, Cn, NH);
  gpu::attention_backward(c, dtype_of<E>(), dqkv, dout, qkv, att, B, T, Cn, NH);
  wait_device();
}
}  // namespace

TEST_CASE("emulation: shuffles, block reductions, early exits") {
  // warp_sum / block_reduce on integers (exact in any order), 2 blocks of 96 threads.
  Buf<float> out(6);
  struct K {
    static void kernel(float* o) {
      __shared__ float sh[32];
      const float x = float(threadIdx.x + 1);
      const float ws = tg::gpu::warp_sum(x);
      const float bs = tg::gpu::block_reduce<false>(x, sh);
      const float bm = tg::gpu::block_reduce<true>(x, sh);
      const unsigned rm = __reduce_max_sync(0xffffffffu, (threadIdx.x * 7919u) % 101u);
      if (threadIdx.x == 33) o[blockIdx.x * 2] = ws;
      if (threadIdx.x == 40) o[4 + blockIdx.x] = float(rm);
      if (threadIdx.x == 95) o[blockIdx.x * 2 + 1] = bs + bm;
    }
  };
  emu::launch(dim3(2), 96, &K::kernel, out.p);
  check_emu();
  CHECK(out[0] == float((33 + 64) * 32 / 2));  // lanes 33..64
  CHECK(out[1] == float(96 * 97 / 2 + 96));
  CHECK(out[2] == out[0]);
  CHECK(out[3] == out[1]);
  unsigned want = 0;  // max over lanes 32..63 of (t * 7919) % 101
  for (unsigned t = 32; t < 64; t++) want = std::max(want, (t * 7919u) % 101u);
  CHECK(out[4] == float(want));
  // A shuffle reading an exited lane is reported.
  struct Bad {
    static void kernel(float* o) {
      if (threadIdx.x % 32 == 5) return;
      o[0] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
    }
  };
  emu::launch(dim3(1), 32, &Bad::kernel, out.p);
  wait_device();  // (a launch is queued: its errors exist once it has run)
  CHECK(!emu::errors().empty());
  // So is a __syncthreads after part of the block has returned.
  struct BadSync {
    static void kernel(float* o) {
      if (threadIdx.x >= 40) return;
      __syncthreads();
      o[threadIdx.x] = 1.f;
    }
  };
  Buf<float> many(64);
  emu::launch(dim3(1), 64, &BadSync::kernel, many.p);
  wait_device();
  CHECK(!emu::errors().empty());
}

namespace {
struct StreamKernels {
  static void set(float* p, float v) {
    if (threadIdx.x == 0) *p = v;
  }
  static void copy(float* dst, const float* src) {
    if (threadIdx.x == 0) *dst = *src;
  }
};
void set_on(cudaStream_t s, float* p, float v) {
  emu::launch(dim3(1), dim3(32), 0, s, &StreamKernels::set, p, v);
}
void copy_on(cudaStream_t s, float* dst, const float* src) {
  emu::launch(dim3(1), dim3(32), 0, s, &StreamKernels::copy, dst, src);
}
bool has_error(const char* part) {
  bool found = false;
  for (const std::string& e : emu::errors()) found |= e.find(part) != std::string::npos;
  return found;
}
}  // namespace

TEST_CASE("emulation: streams run queued work only when waited for, in CUDA's order") {
  Buf<float> x(4, 0);
  cudaStream_t nb, bl;
  REQUIRE(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&bl, cudaStreamDefault) == cudaSuccess);
  // Queued, not run; a query runs it and answers "not ready" once.
  set_on(nb, &x[0], 1.f);
  CHECK(x[0] == 0.f);
  CHECK(cudaStreamQuery(nb) == cudaErrorNotReady);
  CHECK(x[0] == 1.f);
  CHECK(cudaStreamQuery(nb) == cudaSuccess);
  // A stream waiting on an event runs the other stream up to it, not beyond.
  cudaEvent_t e;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  set_on(nb, &x[1], 2.f);
  REQUIRE(cudaEventRecord(e, nb) == cudaSuccess);
  set_on(nb, &x[2], 5.f);
  REQUIRE(cudaStreamWaitEvent(bl, e, 0) == cudaSuccess);
  copy_on(bl, &x[3], &x[1]);
  REQUIRE(cudaStreamSynchronize(bl) == cudaSuccess);
  CHECK(x[3] == 2.f);
  CHECK(x[2] == 0.f);  // after the event: still queued
  // Without the wait, the other stream's work has not run: a missing dependency shows.
  set_on(nb, &x[1], 6.f);
  copy_on(bl, &x[3], &x[1]);
  REQUIRE(cudaStreamSynchronize(bl) == cudaSuccess);
  CHECK(x[3] == 2.f);
  REQUIRE(cudaStreamSynchronize(nb) == cudaSuccess);
  CHECK(x[1] == 6.f);
  // The legacy stream waits for a blocking stream's earlier work, not a non-blocking one's.
  set_on(bl, &x[0], 7.f);
  set_on(nb, &x[2], 9.f);
  copy_on(nullptr, &x[3], &x[0]);
  copy_on(nullptr, &x[1], &x[2]);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(x[3] == 7.f);
  CHECK(x[1] == 5.f);  // the value before nb's queued x[2] = 9
  wait_device();
  CHECK(x[2] == 9.f);
  cudaEventDestroy(e);
  cudaStreamDestroy(nb);
  cudaStreamDestroy(bl);
  check_emu();
}

TEST_CASE("emulation: async copies use pinned memory when they run; frees wait for the work") {
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, 4 * sizeof(float)) == cudaSuccess);
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  // Pinned memory is read and written when the copy runs, not when it is queued.
  float* pin = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pin), 2 * sizeof(float)) == cudaSuccess);
  pin[0] = 3.f;
  REQUIRE(cudaMemcpyAsync(d, pin, sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
  pin[0] = 4.f;  // before the copy runs: the device gets 4
  pin[1] = -1.f;
  REQUIRE(cudaMemcpyAsync(pin + 1, d, sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(pin[1] == -1.f);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pin[1] == 4.f);
  CHECK(emu::errors().empty());
  // Pageable memory in an async copy breaks the project's rule (the copy still happens).
  float v = 8.f;
  REQUIRE(cudaMemcpyAsync(d, &v, sizeof v, cudaMemcpyHostToDevice, s) == cudaSuccess);
  CHECK(has_error("pageable"));
  REQUIRE(cudaMemcpyAsync(&v, d + 1, sizeof v, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(has_error("pageable"));
  // A free of memory that queued work still uses is reported; the work runs first.
  set_on(s, d + 2, 1.f);
  REQUIRE(cudaFreeHost(pin) == cudaSuccess);  // no queued work uses it: fine
  CHECK(emu::errors().empty());
  REQUIRE(cudaFree(d) == cudaSuccess);
  CHECK(has_error("still uses it"));
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  cudaStreamDestroy(s);
  check_emu();
}

namespace {
struct SmemKernels {
  static void fill(float* out, int n) {
    float* s = gpu::dynamic_smem<float>();
    for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) s[i] = float(i);
    __syncthreads();
    if (threadIdx.x == 0) *out = s[n - 1];
  }
  static void other(float* out, int n) {
    fill(out, n);
    if (threadIdx.x == 0) *out += 1;
  }
};
}  // namespace

// As on the GPU: a launch past the default 48 KiB of dynamic shared memory runs only once its
// kernel has opted into that much, and no kernel opts into more than the device's 227 KiB.
TEST_CASE("emulation: dynamic shared memory past 48 KiB needs the kernel's opt-in") {
  Buf<float> out(1, 0);
  const size_t big = 100 * 1024;
  const int n = int(big / 4);
  emu::launch(dim3(1), dim3(64), emu::kDefaultDynamicSmem, nullptr, &SmemKernels::fill, out.p,
              int(emu::kDefaultDynamicSmem / 4));
  wait_device();
  CHECK(emu::errors().empty());
  emu::launch(dim3(1), dim3(64), big, nullptr, &SmemKernels::fill, out.p, n);
  wait_device();
  CHECK(has_error("opted into"));
  CHECK(out[0] == float(emu::kDefaultDynamicSmem / 4 - 1));  // the launch did not run
  const void* k = reinterpret_cast<const void*>(&SmemKernels::fill);
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(emu::kOptinDynamicSmem + 4)) == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)) ==
          cudaSuccess);
  emu::launch(dim3(1), dim3(64), big, nullptr, &SmemKernels::fill, out.p, n);
  wait_device();
  CHECK(emu::errors().empty());
  CHECK(out[0] == float(n - 1));
  // The opt-in is the kernel's own, and only as large as asked.
  emu::launch(dim3(1), dim3(64), big, nullptr, &SmemKernels::other, out.p, n);
  wait_device();
  CHECK(has_error("opted into"));
  emu::launch(dim3(1), dim3(64), big + 16, nullptr, &SmemKernels::fill, out.p, n);
  wait_device();
  CHECK(has_error("opted into"));
  check_emu();
}

TEST_CASE("the kernels' ld/st: bit-exact with src/numerics/formats.h and the CPU's storage.h") {
  // Every 16-bit code widened; fp32 values narrowed on a stride through all bit patterns.
  // (On the host, cuda_fp16.h's __half2float/__float2half_rn; the device's _rn conversions
  // are specified to round the same way.)
  size_t bad = 0, nan_bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const float a = gpu::ld(bf16{uint16_t(h)}), b = gpu::ld(f16{uint16_t(h)});
    const float ca = cpu::ld(cpu::bf16{uint16_t(h)}), cb = cpu::ld(cpu::f16{uint16_t(h)});
    if (std::isnan(cb)) {
      nan_bad += !std::isnan(b) + !std::isnan(a) * std::isnan(ca);
      continue;
    }
    bad += (bits(a) != bits(ca)) + (bits(b) != bits(cb)) + (bits(b) != bits(f16_to_f32(h)));
  }
  CHECK(bad == 0);
  CHECK(nan_bad == 0);
  bad = 0;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) {
    const float v = bits_f32(uint32_t(u));
    bad += gpu::st<bf16>(v).bits != cpu::st<cpu::bf16>(v).bits;
    bad += gpu::st<f16>(v).bits != cpu::st<cpu::f16>(v).bits;
    bad += gpu::st<f16>(v).bits != f32_to_f16(v);
  }
  CHECK(bad == 0);
}

TEST_CASE("encoder forward and backward: bit-exact with the CPU (fp32, bf16, fp16)") {
  std::mt19937 rng(1);
  // B, T, C, V; the last two: buckets of over 32 positions (the wte kernel's chunks of
  // positions), a block's over the 256 it stages in shared memory
  const int shapes[][4] = {
      {2, 5, 37, 9}, {3, 7, 300, 4}, {1, 64, 40, 100}, {4, 32, 40, 3}, {8, 64, 24, 5}};
  for (const auto& sh : shapes) {
    const int B = sh[0], T = sh[1], Cn = sh[2], V = sh[3];
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(Cn);
    std::uniform_int_distribution<int> tok(0, V - 1);
    std::vector<int32_t> tokens(size_t(B) * T);
    for (auto& t : tokens) t = tok(rng);
    tokens[0] = tokens.back();  // a repeated token for sure
    FOR_TYPES({
      CAPTURE(tname<E>());
      const size_t nout = size_t(B) * T * Cn;
      Buf<E> wte(size_t(V) * Cn), wpe(size_t(T) * Cn), out(nout), ref(nout), dout(nout);
      fill(wte.p, wte.n, rng);
      fill(wpe.p, wpe.n, rng);
      fill(dout.p, nout, rng);
      gpu::encoder_forward(emu_ctx(), dtype_of<E>(), out.p, tokens.data(), wte.p, wpe.p, B, T, Cn);
      wait_device();
      cpu::encoder_forward(C(ref.p), tokens.data(), C(wte.p), C(wpe.p), B, T, Cn);
      CHECK(bit_diffs(out.p, ref.p, nout) == 0);
      CHECK(all_poison(out.p + nout, 1));
      // backward into random (non-zero) gradients
      Buf<E> dwte(wte.n), dwpe(wpe.n), rdwte(wte.n), rdwpe(wpe.n);
      fill(dwte.p, dwte.n, rng);
      fill(dwpe.p, dwpe.n, rng);
      copy(rdwte.p, dwte.p, dwte.n);
      copy(rdwpe.p, dwpe.p, dwpe.n);
      encoder_backward<E>(dwte.p, dwpe.p, dout.p, tokens.data(), B, T, Cn);
      cpu::encoder_backward(C(rdwte.p), C(rdwpe.p), C(dout.p), tokens.data(), B, T, Cn);
      CHECK(bit_diffs(dwte.p, rdwte.p, dwte.n) == 0);
      CHECK(bit_diffs(dwpe.p, rdwpe.p, dwpe.n) == 0);
      CHECK(all_poison(dwte.p + dwte.n, 1));
      CHECK(all_poison(dwpe.p + dwpe.n, 1));
      check_emu();
    })
  }
}

TEST_CASE("residual forward: bit-exact, pack and scalar paths, tails") {
  std::mt19937 rng(2);
  const gpu::Ctx c = make_ctx();
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(1000), size_t(1003), size_t(20000)})
    for (int off : {0, 1}) {
      CAPTURE(n);
      CAPTURE(off);
      FOR_TYPES({
        CAPTURE(tname<E>());
        Buf<E> a(n + 1), b(n + 1), out(n + 2), ref(n + 1);
        fill(a.p, n + 1, rng);
        fill(b.p, n + 1, rng);
        residual_forward<E>(c, out.p + off, a.p + off, b.p + off, n);
        cpu::residual_forward(C(ref.p), C(a.p + off), C(b.p + off), n);
        CHECK(bit_diffs(out.p + off, ref.p, n) == 0);
        CHECK(all_poison(out.p + off + n, 1));
        if (off) CHECK(all_poison(out.p, 1));
        check_emu();
      })
    }
}

TEST_CASE("gelu forward and backward vs the CPU, pack and scalar paths, tails") {
  std::mt19937 rng(3);
  const gpu::Ctx c = make_ctx();
  for (size_t n : {size_t(5), size_t(16), size_t(999), size_t(1024), size_t(12347)})
    for (int off : {0, 1}) {
      CAPTURE(n);
      CAPTURE(off);
      FOR_TYPES({
        CAPTURE(tname<E>());
        Buf<E> x(n + 1), d(n + 1), out(n + 2), ref(n + 1), dx(n + 2), rdx(n + 1);
        fill(x.p, n + 1, rng, 2.f);
        fill(d.p, n + 1, rng);
        gelu_forward<E>(c, out.p + off, x.p + off, n);
        cpu::gelu_forward(C(ref.p), C(x.p + off), n);
        CHECK(rel_err(out.p + off, ref.p, n) <= tol<E>());
        CHECK(all_poison(out.p + off + n, 1));
        // taking the output's amax (a linear's input, Backend's InputAmax): the same values
        Buf<E> out2(n + 2);
        Buf<unsigned> amax(1, 0);
        gelu_forward<E>(c, out2.p + off, x.p + off, n, amax.p);
        CHECK(bit_diffs(out.p + off, out2.p + off, n) == 0);
        CHECK(amax[0] == amax_bits(out.p + off, n));
        gelu_backward<E>(c, dx.p + off, x.p + off, d.p + off, n);
        cpu::gelu_backward(C(rdx.p), C(x.p + off), C(d.p + off), n);
        CHECK(rel_err(dx.p + off, rdx.p, n) <= tol<E>());
        CHECK(all_poison(dx.p + off + n, 1));
        check_emu();
      })
    }
}

TEST_CASE("layernorm forward, fused residual + layernorm, backward vs the CPU") {
  std::mt19937 rng(4);
  // 8200 columns: too wide to stage a block's rows in shared memory (the plain kernels); 2000:
  // the fused backward with fewer warps per block than 8 (1 in fp32, 3 in bf16).
  const int shapes[][2] = {{1, 5}, {21, 77}, {9, 300}, {150, 40}, {20, 2000}, {3, 8200}};
  for (const auto& sh : shapes) {
    const int N = sh[0], Cn = sh[1];
    CAPTURE(N);
    CAPTURE(Cn);
    FOR_TYPES({
      CAPTURE(tname<E>());
      const size_t n = size_t(N) * Cn;
      Buf<E> x(n), w(Cn), b(Cn), out(n + 1), ref(n);
      Buf<float> mean(N + 1), rstd(N + 1), rmean(N), rrstd(N);
      fill(x.p, n, rng, 2.f);
      for (size_t i = 0; i < n; i++) x[i] = e<E>(f(x[i]) + 0.7f);  // a non-zero mean
      fill(w.p, Cn, rng);
      fill(b.p, Cn, rng);
      layernorm_forward<E>(out.p, mean.p, rstd.p, x.p, w.p, b.p, N, Cn);
      cpu::layernorm_forward(C(ref.p), rmean.p, rrstd.p, C(x.p), C(w.p), C(b.p), N, Cn);
      CHECK(rel_err(out.p, ref.p, n) <= tol<E>());
      CHECK(rel_err(mean.p, rmean.p, N) <= 1e-5);
      CHECK(rel_err(rstd.p, rrstd.p, N) <= 1e-5);
      CHECK(all_poison(out.p + n, 1));
      CHECK(all_poison(mean.p + N, 1));
      CHECK(all_poison(rstd.p + N, 1));
      check_emu();

      // fused: res = a + bb (bit-exact), out = layernorm(res)
      Buf<E> a(n), bb(n), res(n + 1), rres(n), out2(n + 1), ref2(n);
      fill(a.p, n, rng);
      fill(bb.p, n, rng);
      residual_layernorm_forward<E>(res.p, out2.p, mean.p, rstd.p, a.p, bb.p, w.p, b.p, N, Cn);
      cpu::residual_forward(C(rres.p), C(a.p), C(bb.p), n);
      cpu::layernorm_forward(C(ref2.p), rmean.p, rrstd.p, C(rres.p), C(w.p), C(b.p), N, Cn);
      CHECK(bit_diffs(res.p, rres.p, n) == 0);
      CHECK(rel_err(out2.p, ref2.p, n) <= tol<E>());
      CHECK(rel_err(mean.p, rmean.p, N) <= 1e-5);
      CHECK(rel_err(rstd.p, rrstd.p, N) <= 1e-5);
      CHECK(all_poison(res.p + n, 1));
      CHECK(all_poison(out2.p + n, 1));
      check_emu();

      // backward, accumulating into random gradients; the CPU's mean/rstd for both
      Buf<E> dout(n), dinp(n + 1), dw(Cn + 1), db(Cn + 1), rdinp(n), rdw(Cn), rdb(Cn);
      fill(dout.p, n, rng);
      fill(dinp.p, n, rng);
      fill(dw.p, Cn, rng);
      fill(db.p, Cn, rng);
      copy(rdinp.p, dinp.p, n);
      copy(rdw.p, dw.p, Cn);
      copy(rdb.p, db.p, Cn);
      cpu::layernorm_forward(C(ref.p), rmean.p, rrstd.p, C(x.p), C(w.p), C(b.p), N, Cn);
      layernorm_backward<E>(dinp.p, dw.p, db.p, dout.p, x.p, w.p, rmean.p, rrstd.p, N, Cn);
      cpu::layernorm_backward(C(rdinp.p), C(rdw.p), C(rdb.p), C(dout.p), C(x.p), C(w.p), rmean.p,
                              rrstd.p, N, Cn);
      CHECK(rel_err(dinp.p, rdinp.p, n) <= tol<E>());
      CHECK(rel_err(dw.p, rdw.p, Cn) <= tol<E>());
      CHECK(rel_err(db.p, rdb.p, Cn) <= tol<E>());
      CHECK(all_poison(dinp.p + n, 1));
      CHECK(all_poison(dw.p + Cn, 1));
      CHECK(all_poison(db.p + Cn, 1));
      check_emu();
    })
  }
}

// The staged (shared-memory) layernorm kernels and the plain ones the launcher takes for rows
// too wide to stage compute the same bits, with one element per lane step (V 1) and with 16-byte
// runs (V a pack); the two orders of the sums agree within rounding.
template <typename E, int V>
void layernorm_kernels(int N, int Cn, const Buf<E>& x, const Buf<E>& a, const Buf<E>& w,
                       const Buf<E>& b, const Buf<E>& dout, Buf<E>* out, Buf<E>* dinp) {
  const size_t n = size_t(N) * Cn, smem = 128 + size_t(2 + 4) * Cn * sizeof(E);
  Buf<E> out2(n), res(n), res2(n), dinp2(n);
  Buf<float> mean(N), rstd(N), mean2(N), rstd2(N), pdw(Cn), pdb(Cn);
  const unsigned blocks = unsigned((N + 3) / 4);
  // the staged kernels take out's amax (Backend's InputAmax), the plain ones none: the same out
  Buf<unsigned> amax(2, 0);
  emu::launch(dim3(blocks), dim3(128), smem, nullptr, &gpu::layernorm_forward_smem_kernel<E, V>,
              out->p, mean.p, rstd.p, static_cast<const E*>(x.p), static_cast<const E*>(w.p),
              static_cast<const E*>(b.p), N, Cn, amax.p);
  emu::launch(dim3(blocks), 128, &gpu::layernorm_forward_kernel<E, V>, out2.p, mean2.p, rstd2.p,
              static_cast<const E*>(x.p), static_cast<const E*>(w.p), static_cast<const E*>(b.p), N,
              Cn, static_cast<unsigned*>(nullptr));
  wait_device();
  CHECK(bit_diffs(out->p, out2.p, n) == 0);
  CHECK(amax[0] == amax_bits(out->p, n));
  CHECK(bit_diffs(mean.p, mean2.p, N) == 0);
  CHECK(bit_diffs(rstd.p, rstd2.p, N) == 0);
  emu::launch(dim3(blocks), dim3(128), smem, nullptr,
              &gpu::residual_layernorm_forward_smem_kernel<E, V>, res.p, out->p, mean.p, rstd.p,
              static_cast<const E*>(x.p), static_cast<const E*>(a.p), static_cast<const E*>(w.p),
              static_cast<const E*>(b.p), N, Cn, static_cast<unsigned*>(nullptr));
  emu::launch(dim3(blocks), 128, &gpu::residual_layernorm_forward_kernel<E, V>, res2.p, out2.p,
              mean2.p, rstd2.p, static_cast<const E*>(x.p), static_cast<const E*>(a.p),
              static_cast<const E*>(w.p), static_cast<const E*>(b.p), N, Cn, amax.p + 1);
  wait_device();
  CHECK(bit_diffs(res.p, res2.p, n) == 0);
  CHECK(bit_diffs(out->p, out2.p, n) == 0);
  CHECK(amax[1] == amax_bits(out2.p, n));
  CHECK(bit_diffs(mean.p, mean2.p, N) == 0);
  // the backward: the fused kernel (4 warps, one chunk) and the dinp kernel, from zero
  for (size_t i = 0; i < n; i++) dinp->p[i] = dinp2.p[i] = E{};
  const size_t bsmem = size_t(Cn) * (8 + sizeof(E)) + 4 * (16 + 2 * size_t(Cn) * sizeof(E));
  emu::launch(dim3(1), dim3(128), bsmem, nullptr, &gpu::layernorm_backward_fused_kernel<E, V>,
              dinp->p, pdw.p, pdb.p, static_cast<const E*>(dout.p), static_cast<const E*>(x.p),
              static_cast<const E*>(w.p), static_cast<const float*>(mean2.p),
              static_cast<const float*>(rstd2.p), N, Cn, N);
  emu::launch(dim3(blocks), 128, &gpu::layernorm_backward_dinp_kernel<E, V>, dinp2.p,
              static_cast<const E*>(dout.p), static_cast<const E*>(x.p), static_cast<const E*>(w.p),
              static_cast<const float*>(mean2.p), static_cast<const float*>(rstd2.p), N, Cn);
  wait_device();
  CHECK(bit_diffs(dinp->p, dinp2.p, n) == 0);
  check_emu();
}

TEST_CASE("layernorm: staged and plain kernels bit for bit, 16-byte runs and single elements") {
  std::mt19937 rng(41);
  for (const auto& sh : {std::pair{6, 256}, std::pair{9, 40}, std::pair{5, 1040}}) {
    const int N = sh.first, Cn = sh.second;
    CAPTURE(N);
    CAPTURE(Cn);
    FOR_TYPES({
      CAPTURE(tname<E>());
      const size_t n = size_t(N) * Cn;
      Buf<E> x(n), a(n), w(Cn), b(Cn), dout(n), out1(n), outv(n), dinp1(n), dinpv(n);
      fill(x.p, n, rng, 2.f);
      fill(a.p, n, rng);
      fill(w.p, Cn, rng);
      fill(b.p, Cn, rng);
      fill(dout.p, n, rng);
      layernorm_kernels<E, 1>(N, Cn, x, a, w, b, dout, &out1, &dinp1);
      layernorm_kernels<E, gpu::Pack16<E>::N>(N, Cn, x, a, w, b, dout, &outv, &dinpv);
      CHECK(rel_err(outv.p, out1.p, n) <= tol<E>());
      CHECK(rel_err(dinpv.p, dinp1.p, n) <= tol<E>());
    })
  }
}

TEST_CASE("bias backward's partial sums: a 16-byte run of columns a thread, the same bits") {
  std::mt19937 rng(42);
  const int N = 150, rows = 64, chunks = 3;
  for (const int OC : {40, 2080}) {  // 2080: more than one block of columns
    CAPTURE(OC);
    FOR_TYPES({
      CAPTURE(tname<E>());
      constexpr int V = gpu::Pack16<E>::N, kT = gpu::kBiasThreads;
      Buf<E> dout(size_t(N) * OC);
      Buf<float> p1(size_t(chunks) * OC), pv(size_t(chunks) * OC);
      fill(dout.p, dout.n, rng);
      Buf<unsigned> a1(1, 0), av(1, 0);  // dout's amax bits, taken as the sums read it
      emu::launch(dim3(unsigned((OC + kT - 1) / kT), chunks), kT,
                  &gpu::bias_backward_partial_kernel<E, 1>, p1.p, static_cast<const E*>(dout.p), N,
                  OC, rows, a1.p);
      emu::launch(dim3(unsigned((OC / V + kT - 1) / kT), chunks), kT,
                  &gpu::bias_backward_partial_kernel<E, V>, pv.p, static_cast<const E*>(dout.p), N,
                  OC, rows, av.p);
      wait_device();
      CHECK(bit_diffs(p1.p, pv.p, p1.n) == 0);
      unsigned amax = 0;
      for (size_t i = 0; i < dout.n; i++) amax = std::max(amax, bits(f(dout[i])) & 0x7fffffffu);
      CHECK(a1[0] == amax);
      CHECK(av[0] == amax);
      check_emu();
    })
  }
}

TEST_CASE("bias backward, and the GEMMs (cuBLASLt wrapper and fallback) vs the CPU matmul") {
  std::mt19937 rng(5);
  const int shapes[][3] = {{1, 3, 5}, {13, 20, 37}, {150, 9, 300}};  // N, C, OC
  for (const bool fallback : {false, true})
    for (const auto& sh : shapes) {
      CAPTURE(fallback);
      const int lt_calls = emu_lt_matmul_calls();
      const int N = sh[0], Cn = sh[1], OC = sh[2];
      CAPTURE(N);
      CAPTURE(Cn);
      CAPTURE(OC);
      FOR_TYPES({
        CAPTURE(tname<E>());
        // dbias += column sums of dout; reference: the CPU's fp32 bias_backward on widened
        // values, rounded once (what the CPU backend does for 16-bit tensors)
        Buf<E> dout(size_t(N) * OC), db(OC + 1), rdb(OC);
        fill(dout.p, dout.n, rng);
        fill(db.p, OC, rng);
        std::vector<float> wd(dout.n), wdb(OC);
        for (size_t i = 0; i < dout.n; i++) wd[i] = f(dout[i]);
        for (int j = 0; j < OC; j++) wdb[j] = f(db[j]);
        cpu::bias_backward(wdb.data(), wd.data(), N, OC);
        for (int j = 0; j < OC; j++) rdb[j] = e<E>(wdb[j]);
        bias_backward<E>(db.p, dout.p, N, OC);
        CHECK(rel_err(db.p, rdb.p, OC) <= tol<E>());
        CHECK(all_poison(db.p + OC, 1));

        // out = inp W^T + bias (beta 0), then out = dout' W + 1 * out (beta 1, no bias)
        Buf<E> inp(size_t(N) * Cn), W(size_t(OC) * Cn), bias(OC), out(size_t(N) * OC + 1),
            ref(size_t(N) * OC);
        fill(inp.p, inp.n, rng);
        fill(W.p, W.n, rng);
        fill(bias.p, OC, rng);
        gemm<E>(fallback, false, true, N, OC, Cn, inp.p, Cn, W.p, Cn, out.p, 0.f, bias.p);
        std::vector<float> wi(inp.n), ww(W.n), wb(OC), wo(size_t(N) * OC);
        for (size_t i = 0; i < inp.n; i++) wi[i] = f(inp[i]);
        for (size_t i = 0; i < W.n; i++) ww[i] = f(W[i]);
        for (int j = 0; j < OC; j++) wb[j] = f(bias[j]);
        cpu::matmul_forward(wo.data(), wi.data(), ww.data(), wb.data(), N, Cn, OC);
        for (size_t i = 0; i < wo.size(); i++) ref[i] = e<E>(wo[i]);
        CHECK(rel_err(out.p, ref.p, wo.size()) <= tol<E>());
        CHECK(all_poison(out.p + wo.size(), 1));
        // beta = 1, no bias: out += inp2 (N, C) W2^T with W2 (OC, C) (i.e. the dW-style
        // accumulation); reference: widened old out + products, one rounding
        Buf<E> inp2(size_t(N) * Cn), W2(size_t(OC) * Cn);
        fill(inp2.p, inp2.n, rng);
        fill(W2.p, W2.n, rng);
        std::vector<float> wo2(wo.size()), wi2(inp2.n), ww2(W2.n);
        for (size_t i = 0; i < inp2.n; i++) wi2[i] = f(inp2[i]);
        for (size_t i = 0; i < W2.n; i++) ww2[i] = f(W2[i]);
        cpu::matmul_forward(wo2.data(), wi2.data(), ww2.data(), static_cast<const float*>(nullptr),
                            N, Cn, OC);
        for (size_t i = 0; i < wo2.size(); i++) ref[i] = e<E>(wo2[i] + f(out[i]));
        gemm<E>(fallback, false, true, N, OC, Cn, inp2.p, Cn, W2.p, Cn, out.p, 1.f,
                static_cast<const E*>(nullptr));
        CHECK(rel_err(out.p, ref.p, wo.size()) <= tol<E>());
        check_emu();
      })
      // The Lt path went through cuBLASLt (2 GEMMs per type; odd biases may fall back), the
      // fallback never did.
      if (fallback)
        CHECK(emu_lt_matmul_calls() == lt_calls);
      else
        CHECK(emu_lt_matmul_calls() > lt_calls);
    }
}

TEST_CASE("GEMM + bias + GELU in cuBLASLt's epilogue vs the CPU matmul and gelu") {
  std::mt19937 rng(15);
  const int shapes[][3] = {{1, 3, 8}, {13, 20, 40}, {70, 9, 264}};  // N, C, OC (OC % 8 == 0)
  for (const auto& sh : shapes) {
    const int N = sh[0], Cn = sh[1], OC = sh[2];
    CAPTURE(N);
    CAPTURE(Cn);
    CAPTURE(OC);
    FOR_TYPES({
      CAPTURE(tname<E>());
      Buf<E> inp(size_t(N) * Cn), W(size_t(OC) * Cn), bias(OC), pre(size_t(N) * OC + 1),
          out(size_t(N) * OC + 1), rpre(size_t(N) * OC), rout(size_t(N) * OC);
      fill(inp.p, inp.n, rng);
      fill(W.p, W.n, rng);
      fill(bias.p, OC, rng);
      gpu::Ctx c = gemm_ctx(false);
      c.opt.gelu_epilogue = true;  // cuda.gelu_epilogue
      const int lt_calls = emu_lt_matmul_calls();
      REQUIRE(gpu::gemm_bias_gelu(c, N, OC, Cn, dtype_of<E>(), inp.p, W.p, bias.p, pre.p, out.p));
      wait_device();
      CHECK(emu_lt_matmul_calls() == lt_calls + 1);
      // reference: fp32 pre-activation, rounded once; gelu of the fp32 value, rounded once
      std::vector<float> wi(inp.n), ww(W.n), wb(OC), wp(size_t(N) * OC), wg(wp.size());
      for (size_t i = 0; i < inp.n; i++) wi[i] = f(inp[i]);
      for (size_t i = 0; i < W.n; i++) ww[i] = f(W[i]);
      for (int j = 0; j < OC; j++) wb[j] = f(bias[j]);
      cpu::matmul_forward(wp.data(), wi.data(), ww.data(), wb.data(), N, Cn, OC);
      cpu::gelu_forward(wg.data(), wp.data(), wp.size());
      for (size_t i = 0; i < wp.size(); i++) {
        rpre[i] = e<E>(wp[i]);
        rout[i] = e<E>(wg[i]);
      }
      CHECK(rel_err(pre.p, rpre.p, wp.size()) <= tol<E>());
      CHECK(rel_err(out.p, rout.p, wp.size()) <= tol<E>());
      CHECK(all_poison(pre.p + wp.size(), 1));
      CHECK(all_poison(out.p + wp.size(), 1));
      // cuda.gemm=fallback turns the fused epilogue down (the model runs GEMM, then GELU)
      gpu::Ctx fb = gemm_ctx(true);
      fb.opt.gelu_epilogue = true;
      CHECK_FALSE(
          gpu::gemm_bias_gelu(fb, N, OC, Cn, dtype_of<E>(), inp.p, W.p, bias.p, pre.p, out.p));
      check_emu();
    })
  }
}

TEST_CASE("column sums with more than 64 * 4096 rows (chunks of more than 64 rows)") {
  // bias_backward and layernorm's dw/db partial + final kernels and its fused kernel, fp32 and
  // bf16, 3 columns
  std::mt19937 rng(15);
  const int N = 64 * 4096 + 77, OC = 3;
  CHECK(gpu::bias_rows_per_chunk(N) > 64);
  CHECK(gpu::rows_per_chunk(N) > 64);
  std::vector<float> wd(size_t(N) * OC), wdb(OC);
  {
    using E = float;
    Buf<E> dout(size_t(N) * OC), db(OC + 1);
    fill(dout.p, dout.n, rng);
    fill(db.p, OC, rng);
    for (int j = 0; j < OC; j++) wdb[j] = db[j];
    cpu::bias_backward(wdb.data(), dout.p, N, OC);
    bias_backward<E>(db.p, dout.p, N, OC);
    CHECK(rel_err(db.p, wdb.data(), OC) <= 1e-5);
    CHECK(all_poison(db.p + OC, 1));
    check_emu();
  }
  {
    using E = bf16;
    // layernorm dw/db: mean 0, rstd 1 makes norm = x, so dw = sum dout * x, db = sum dout
    Buf<E> dout(size_t(N) * OC), x(size_t(N) * OC), dw(OC + 1), db(OC + 1);
    fill(dout.p, dout.n, rng);
    fill(x.p, x.n, rng);
    fill(dw.p, OC, rng);
    fill(db.p, OC, rng);
    // the launcher's fused kernel (3 columns stage in shared memory), from the same dw and db
    Buf<E> fdw(OC), fdb(OC), w(OC), dinp(size_t(N) * OC);
    fill(w.p, OC, rng);
    fill(dinp.p, dinp.n, rng);
    for (int j = 0; j < OC; j++) {
      fdw[j] = dw[j];
      fdb[j] = db[j];
    }
    std::vector<float> mean(N, 0.f), rstd(N, 1.f);
    std::vector<double> rw(OC), rb(OC);
    for (int j = 0; j < OC; j++) {
      rw[j] = f(dw[j]);
      rb[j] = f(db[j]);
    }
    for (int r = 0; r < N; r++)
      for (int j = 0; j < OC; j++) {
        const size_t i = size_t(r) * OC + j;
        rw[j] += double(f(dout[i])) * f(x[i]);
        rb[j] += f(dout[i]);
      }
    const int rows = gpu::rows_per_chunk(N), chunks = (N + rows - 1) / rows;
    Buf<float> pdw(size_t(chunks) * OC), pdb(size_t(chunks) * OC);
    emu::launch(dim3(unsigned((OC + 255) / 256), unsigned(chunks)), 256,
                &gpu::layernorm_backward_partial_kernel<E>, pdw.p, pdb.p,
                static_cast<const E*>(dout.p), static_cast<const E*>(x.p),
                static_cast<const float*>(mean.data()), static_cast<const float*>(rstd.data()), N,
                OC, rows);
    emu::launch(dim3(unsigned((OC + 255) / 256)), 256, &gpu::layernorm_backward_final_kernel<E>,
                dw.p, db.p, static_cast<const float*>(pdw.p), static_cast<const float*>(pdb.p),
                chunks, OC);
    wait_device();
    for (int j = 0; j < OC; j++) {
      CHECK(std::fabs(f(dw[j]) - rw[j]) <= 1e-2 * std::max(1.0, std::fabs(rw[j])));
      CHECK(std::fabs(f(db[j]) - rb[j]) <= 1e-2 * std::max(1.0, std::fabs(rb[j])));
    }
    CHECK(all_poison(dw.p + OC, 1));
    gpu::layernorm_backward(emu_ctx(), DType::BF16, dinp.p, fdw.p, fdb.p, dout.p, x.p, w.p,
                            mean.data(), rstd.data(), N, OC);
    wait_device();
    for (int j = 0; j < OC; j++) {  // the same sums in the same order as the partial kernel's
      CHECK(f(fdw[j]) == f(dw[j]));
      CHECK(f(fdb[j]) == f(db[j]));
    }
    check_emu();
  }
}

TEST_CASE("attention forward and backward (batched GEMMs: cuBLASLt and cuBLAS) vs the CPU") {
  std::mt19937 rng(6);
  // B, T, C, NH; T 72: the softmax kernels' 16-byte runs
  const int shapes[][4] = {{1, 5, 8, 2}, {2, 37, 24, 3}, {1, 70, 64, 2}, {1, 72, 64, 2}};
  for (const bool fallback : {false, true})
    for (const auto& sh : shapes) {
      CAPTURE(fallback);
      const int B = sh[0], T = sh[1], Cn = sh[2], NH = sh[3];
      CAPTURE(B);
      CAPTURE(T);
      CAPTURE(Cn);
      CAPTURE(NH);
      FOR_TYPES({
        CAPTURE(tname<E>());
        const size_t btc = size_t(B) * T * Cn, natt = size_t(B) * NH * T * T;
        Buf<E> qkv(3 * btc), out(btc + 1), att(natt + 1), rout(btc), ratt(natt);
        fill(qkv.p, qkv.n, rng);
        attention_forward<E>(fallback, out.p, att.p, qkv.p, B, T, Cn, NH);
        cpu::attention_forward(C(rout.p), C(ratt.p), C(qkv.p), B, T, Cn, NH);
        CHECK(rel_err(out.p, rout.p, btc) <= tol<E>());
        CHECK(rel_err(att.p, ratt.p, natt) <= tol<E>());
        size_t upper = 0;  // exact zeros above the diagonal
        for (size_t r = 0; r < size_t(B) * NH * T; r++)
          for (int u = int(r % T) + 1; u < T; u++) upper += bits(att[r * T + u]) != 0;
        CHECK(upper == 0);
        CHECK(all_poison(out.p + btc, 1));
        CHECK(all_poison(att.p + natt, 1));
        check_emu();

        Buf<E> dout(btc), dqkv(3 * btc + 1), rdqkv(3 * btc);
        fill(dout.p, btc, rng);
        attention_backward<E>(fallback, dqkv.p, dout.p, qkv.p, ratt.p, B, T, Cn, NH);
        cpu::attention_backward(C(rdqkv.p), C(dout.p), C(qkv.p), C(ratt.p), B, T, Cn, NH);
        CHECK(rel_err(dqkv.p, rdqkv.p, 3 * btc) <= (std::is_same_v<E, float> ? 1e-5 : 2e-2));
        CHECK(all_poison(dqkv.p + 3 * btc, 1));
        check_emu();
      })
    }
}

// The softmax kernels that stage each row in shared memory (8 rows a block, or fewer where the
// block's shared memory holds fewer: a partial last block) compute the values of the kernels
// that read the row from global memory again (a device with no shared memory to spare here;
// rows past T 12288 forward and backward in bf16), in the same order: the same bits.
TEST_CASE("attention softmax: rows staged in shared memory or not, bit-identical") {
  std::mt19937 rng(8);
  // T 70: 280 rows, up to 3 scores a lane; 72: 16-byte runs (V 4 in fp32, 8 in bf16 and fp16)
  for (const int T : {70, 72}) {
    CAPTURE(T);
    const int B = 2, Cn = 64, NH = 2;
    FOR_TYPES({
      CAPTURE(tname<E>());
      const size_t btc = size_t(B) * T * Cn, natt = size_t(B) * NH * T * T;
      Buf<E> qkv(3 * btc), dout(btc), att(natt), dqkv(3 * btc), att1(natt), dqkv1(3 * btc);
      fill(qkv.p, qkv.n, rng);
      fill(dout.p, dout.n, rng);
      attention_at_smem<E>(emu::kDefaultDynamicSmem, att.p, dqkv.p, qkv.p, dout.p, B, T, Cn, NH);
      // 3 rows a block backward (3 or 6 forward), then none
      for (const size_t smem : {size_t(3) * T * 2 * sizeof(E), size_t(0)}) {
        CAPTURE(smem);
        attention_at_smem<E>(smem, att1.p, dqkv1.p, qkv.p, dout.p, B, T, Cn, NH);
        CHECK(bit_diffs(att.p, att1.p, natt) == 0);
        CHECK(bit_diffs(dqkv.p, dqkv1.p, 3 * btc) == 0);
      }
      check_emu();
    })
  }
}

// The permutes with runs of V elements a thread (kernels/attention.cuh): q, k, v from qkv
// checked element by element, then the round trips back, bit for bit.
template <typename E, int V>
void permute_round_trips(std::mt19937& rng, int hs) {
  const gpu::Ctx c = make_ctx();
  const int B = 2, T = 11, NH = 3, Cn = NH * hs;
  const size_t btc = size_t(B) * T * Cn;
  const unsigned grid = c.grid(btc / V, kThreads);
  Buf<E> qkv(3 * btc), q(btc + 1), k(btc + 1), v(btc + 1), back(3 * btc + 1), y(btc + 1),
      o(btc + 1);
  fill(qkv.p, qkv.n, rng);
  emu::launch(dim3(grid), kThreads, &gpu::attention_permute_kernel<E, V>, q.p, k.p, v.p,
              static_cast<const E*>(qkv.p), B, T, NH, hs);
  wait_device();
  size_t bad = 0;  // q[b,h,t,d] = qkv[b,t,0,h,d], likewise k, v
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int d = 0; d < hs; d++) {
          const size_t i = ((size_t(b) * NH + h) * T + t) * hs + d;
          const size_t s = (size_t(b) * T + t) * 3 * Cn + size_t(h) * hs + d;
          bad += (bits(q[i]) != bits(qkv[s])) + (bits(k[i]) != bits(qkv[s + Cn])) +
                 (bits(v[i]) != bits(qkv[s + 2 * Cn]));
        }
  CHECK(bad == 0);
  emu::launch(dim3(grid), kThreads, &gpu::attention_unpermute_qkv_kernel<E, V>, back.p,
              static_cast<const E*>(q.p), static_cast<const E*>(k.p), static_cast<const E*>(v.p), B,
              T, NH, hs);
  wait_device();
  CHECK(bit_diffs(back.p, qkv.p, 3 * btc) == 0);
  emu::launch(dim3(grid), kThreads, &gpu::attention_permute_one_kernel<E, V>, y.p,
              static_cast<const E*>(qkv.p), B, T, NH, hs);  // first btc elements as (B,T,C)
  Buf<unsigned> amax(1, 0);  // out's, for the attention projection (Backend's InputAmax)
  emu::launch(dim3(grid), kThreads, &gpu::attention_unpermute_kernel<E, V>, o.p,
              static_cast<const E*>(y.p), B, T, NH, hs, amax.p);
  wait_device();
  CHECK(bit_diffs(o.p, qkv.p, btc) == 0);
  CHECK(amax[0] == amax_bits(o.p, btc));
  CHECK(all_poison(q.p + btc, 1));
  CHECK(all_poison(o.p + btc, 1));
  CHECK(all_poison(back.p + 3 * btc, 1));
  check_emu();
}

TEST_CASE("attention permutes: bit-exact round trips, an element or a 16-byte run a thread") {
  std::mt19937 rng(7);
  FOR_TYPES({
    CAPTURE(tname<E>());
    permute_round_trips<E, 1>(rng, 5);
    permute_round_trips<E, 1>(rng, 16);
    permute_round_trips<E, gpu::Pack16<E>::N>(rng, 16);
  })
}

// The gradient in E over the logits' own rows (backend.h's dlogits_view): fp32 in place, or
// 16-bit values in the first half of each fp32 row, rows 2 Vp apart. Rows whose V fp32 logits
// fit a block's shared memory are staged there (V 50257 past the default 48 KiB); wider ones
// (V 60000) take the unstaged kernel's barrier per chunk: without it, the emulation's schedule
// (each thread up to its next barrier) lets a thread's second chunk overwrite logits another
// has yet to read.
template <typename E>
void classifier_case(std::mt19937& rng, int N, int V, int Vp, float dloss) {
  CAPTURE(tname<E>());
  const size_t ld = sizeof(E) == 4 ? size_t(Vp) : 2 * size_t(Vp);
  Buf<float> z(size_t(N) * Vp), rz(size_t(N) * Vp), orig(size_t(N) * Vp), loss(N + 1), rloss(N);
  fill(z.p, z.n, rng, 3.f);
  copy(rz.p, z.p, z.n);
  copy(orig.p, z.p, z.n);
  std::vector<int32_t> tg(N);
  std::uniform_int_distribution<int> d(0, V - 1);
  for (auto& t : tg) t = d(rng);
  tg[0] = V - 1;
  E* g = reinterpret_cast<E*>(z.p);
  classifier(z.p, loss.p, tg.data(), g, ld, dloss, N, V, Vp);
  cpu::classifier(rz.p, rloss.p, tg.data(), C(reinterpret_cast<E*>(rz.p)), ld, dloss, N, V, Vp);
  CHECK(rel_err(loss.p, rloss.p, N) <= 1e-5);
  CHECK(all_poison(loss.p + N, 1));
  check_emu();
  if (dloss == 0.f) {
    CHECK(bit_diffs(z.p, orig.p, z.n) == 0);  // the logits stay as they were
    return;
  }
  // The rows' gradients side by side, and the CPU's.
  std::vector<E> out(size_t(N) * Vp), ref(size_t(N) * Vp);
  const E* rg = reinterpret_cast<const E*>(rz.p);
  for (int n = 0; n < N; n++) {
    copy(out.data() + size_t(n) * Vp, g + size_t(n) * ld, size_t(Vp));
    copy(ref.data() + size_t(n) * Vp, rg + size_t(n) * ld, size_t(Vp));
  }
  // fp32: the sums of exponentials differ in order (1e-5); 16-bit: those fp32 values rounded
  // once, so an entry differs only where the two straddle a rounding boundary (a chance of
  // about 1e-5 / 2^-8 each), then by one ulp (at most 2^-7 of it in bf16).
  CHECK(rel_err(out.data(), ref.data(), out.size()) <= (sizeof(E) == 4 ? 1e-5 : 1e-3));
  size_t pad = 0;
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++) pad += bits(out[size_t(n) * Vp + i]) != 0;
  CHECK(pad == 0);
}

TEST_CASE("classifier: losses and the gradient (fp32 in place, 16-bit over the rows) vs the CPU") {
  std::mt19937 rng(9);
  const int shapes[][3] = {{3, 1000, 1024}, {5, 50, 64},       {2, 777, 777},
                           {2, 1500, 1536}, {2, 50257, 50304}, {2, 60000, 60032}};
  for (const auto& sh : shapes) {
    const int N = sh[0], V = sh[1], Vp = sh[2];
    CAPTURE(N);
    CAPTURE(V);
    CAPTURE(Vp);
    for (float dloss : {0.f, 0.37f}) {
      CAPTURE(dloss);
      FOR_TYPES(classifier_case<E>(rng, N, V, Vp, dloss);)
    }
  }
}

// Moments x stored in format f at dst: fp32 values, or 16-bit codes rounded to nearest.
void store_moments(const MomentFormat& f, const std::vector<float>& x, unsigned char* dst) {
  MomentFormat nearest = f;
  nearest.stochastic = false;
  for (size_t i = 0; i < x.size(); i++) {
    if (moment_is_plain(f)) {
      std::memcpy(dst + 4 * i, &x[i], 4);
    } else {
      const uint16_t code = moment_encode16(x[i], nearest, 0);
      std::memcpy(dst + 2 * i, &code, 2);
    }
  }
}

// One Adam moment in format f as the kernel (dev) and the CPU (ref) hold it: fp32 values or
// 16-bit codes, the same initial state in both, one poisoned element past the end.
struct MomentBufs {
  MomentFormat f;
  size_t n, width;
  Buf<unsigned char> dev, ref;
  MomentBufs(const MomentFormat& fmt, const std::vector<float>& x)
      : f(fmt),
        n(x.size()),
        width(moment_is_plain(fmt) ? 4 : 2),
        dev((n + 1) * width),
        ref(n * width) {
    store_moments(f, x, dev.p);
    std::memcpy(ref.p, dev.p, n * width);
  }
  // Calls fn with ref's typed pointer (float, or uint16_t codes).
  template <typename F>
  void typed_ref(F&& fn) {
    if (width == 4)
      fn(reinterpret_cast<float*>(ref.p));
    else
      fn(reinterpret_cast<uint16_t*>(ref.p));
  }
};

// One AdamW step's arguments: the weights' rounding (stochastic or not, its seed and element
// offset) and the moments' formats; the rest fixed.
AdamWArgs emu_adamw_args(bool sr, uint64_t seed, uint64_t offset, StateFormat fm, StateFormat fv) {
  AdamWArgs a{};
  a.lr = 3e-3f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  a.step = 7;
  a.rounding.stochastic = sr;
  a.rounding.seed = seed;
  a.rounding.offset = offset;
  a.m_format = moment_format(fm, false);
  a.v_format = moment_format(fv, true);
  a.m_seed = 5678;
  a.v_seed = 91011;
  return a;
}

// The linears' weights of an AdamW call whose amaxes it takes (Backend's WeightAmax, as the
// CUDA backend hands it on: kernels/amax.cuh's SegmentAmax), in calls of 64 elements or more:
// three segments from element 3 or 4 (`packs`: every segment on a group of four, which the
// packed kernels need; else segments ending inside groups and inside a warp's span) and two
// from n / 2, elements between and after them in none.
struct WeightWords {
  gpu::SegmentAmax s;
  Buf<unsigned> words{8, 0};
  WeightWords(size_t n, bool packs) {
    if (n < 64) return;
    auto fit = [&](size_t x) { return packs ? x / 4 * 4 : x; };
    const size_t lo[2] = {packs ? 4u : 3u, fit(n / 2)}, len[2] = {fit(n / 8 + 1), fit(n / 6)};
    const int segs[2] = {3, 2};
    for (int r = 0; r < 2; r++) {
      s.lo[r] = lo[r], s.seg_len[r] = len[r], s.hi[r] = lo[r] + segs[r] * len[r];
      s.words[r] = words.p + 3 * r;
    }
    s.n = 2;
  }
  // Each word the max of its segment's |x| bits, as stored after the call; none other touched.
  template <typename E>
  void check(const E* params) {
    for (int r = 0; r < s.n; r++)
      for (uint64_t at = s.lo[r], k = 0; at < s.hi[r]; at += s.seg_len[r], k++)
        CHECK(s.words[r][k] == amax_bits(params + at, s.seg_len[r]));
    for (size_t k = s.n ? 5 : 0; k < words.n; k++) CHECK(words[k] == 0);
  }
};

template <typename E>
void adamw_case(const gpu::Ctx& c, std::mt19937& rng, size_t n, bool sr, StateFormat fm,
                StateFormat fv) {
  CAPTURE(tname<E>());
  CAPTURE(state_format_name(fm));
  CAPTURE(state_format_name(fv));
  const AdamWArgs a = emu_adamw_args(sr, 1234, 77, fm, fv);
  Buf<E> p(n + 1), g(n), rp(n);
  Buf<float> master(n + 1), rmaster(n);
  fill(g.p, n, rng);
  fill(master.p, n, rng);
  std::vector<float> m0(n), v0(n);
  fill(m0.data(), n, rng, 0.1f);
  for (size_t i = 0; i < n; i++) v0[i] = std::fabs(f(g[i])) * 0.01f + 1e-4f;
  MomentBufs m(a.m_format, m0), v(a.v_format, v0);
  copy(rmaster.p, master.p, n);
  E* params = p.p;
  if constexpr (std::is_same_v<E, float>) params = master.p;  // fp32: params alias the master
  WeightWords ww(n, sr);
  adamw<E>(c, params, master.p, g.p, m.dev.p, v.dev.p, n, a, ww.s);
  ww.check(params);
  m.typed_ref([&](auto* rm) {
    v.typed_ref([&](auto* rv) {
      if constexpr (std::is_same_v<E, float>)
        cpu::adamw(rp.p, rmaster.p, C(g.p), rm, rv, n, a);
      else
        cpu::adamw(C(rp.p), rmaster.p, C(g.p), rm, rv, n, a);
    });
  });
  // The arithmetic is src/numerics/adamw_math.h on both sides, every FMA spelled out, and
  // the moments go through the same encoder: master weights and moments bit for bit.
  CHECK(bit_diffs(master.p, rmaster.p, n) == 0);
  CHECK(std::memcmp(m.dev.p, m.ref.p, n * m.width) == 0);
  CHECK(std::memcmp(v.dev.p, v.ref.p, n * v.width) == 0);
  // the compute copy: exactly the rounding of the kernel's own master weight
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    E want;
    if constexpr (std::is_same_v<E, bf16>)
      want = sr ? bf16{f32_to_bf16_sr(master[i], sr_hash(1234, 77 + i))}
                : bf16{f32_to_bf16(master[i])};
    else if constexpr (std::is_same_v<E, f16>)
      want = sr ? f16{f32_to_f16_sr(master[i], sr_hash(1234, 77 + i))} : f16{f32_to_f16(master[i])};
    else
      want = master[i];
    bad += bits(params[i]) != bits(want);
  }
  CHECK(bad == 0);
  if constexpr (!std::is_same_v<E, float>) {
    CHECK(bit_diffs(p.p, rp.p, n) == 0);
    CHECK(all_poison(p.p + n, 1));
  }
  CHECK(all_poison(master.p + n, 1));
  CHECK(all_poison(m.dev.p + n * m.width, m.width));
  CHECK(all_poison(v.dev.p + n * v.width, v.width));
  check_emu();
}

TEST_CASE("AdamW: master, moments (every state format) and the 16-bit copy bit-exact vs the CPU") {
  std::mt19937 rng(10);
  const gpu::Ctx c = make_ctx();
  const std::pair<StateFormat, StateFormat> formats[] = {
      {StateFormat::FP32, StateFormat::FP32},     {StateFormat::BF16, StateFormat::BF16},
      {StateFormat::BF16SR, StateFormat::BF16SR}, {StateFormat::FP16, StateFormat::FP16},
      {StateFormat::BF16, StateFormat::FP16},     {StateFormat::FP32, StateFormat::BF16SR}};
  for (size_t n : {size_t(3), size_t(1001), size_t(2048), size_t(20011)})
    for (bool sr : {false, true})
      for (const auto& [fm, fv] : formats) {
        CAPTURE(n);
        CAPTURE(sr);
        adamw_case<float>(c, rng, n, sr, fm, fv);
        adamw_case<bf16>(c, rng, n, sr, fm, fv);
        adamw_case<f16>(c, rng, n, sr, fm, fv);
      }
}

// bf16 master weights (precision.state.master=bf16-sr / bf16-kahan): the bf16 weights are the
// master, stored back stochastically or with their compensation, on both sides.
void adamw_bf16_master_case(std::mt19937& rng, size_t n, MasterFormat mf, StateFormat fm,
                            StateFormat fv) {
  CAPTURE(master_format_name(mf));
  CAPTURE(state_format_name(fm));
  CAPTURE(state_format_name(fv));
  // bf16-sr's stores are stochastic, as weight_rounding makes them.
  AdamWArgs a = emu_adamw_args(mf == MasterFormat::BF16SR, 4321, 55, fm, fv);
  a.master = mf;
  const bool kahan = mf == MasterFormat::BF16Kahan;
  Buf<bf16> p(n + 1), g(n), rp(n), comp(n + 1), rcomp(n);
  fill(g.p, n, rng);
  fill(p.p, n, rng);
  // A compensation as a store leaves it: the bf16 rounding of a residual below half a step.
  for (size_t i = 0; i < n; i++) comp[i] = bf16{f32_to_bf16(f(p[i]) * 0x1p-10f * f(g[i]))};
  copy(rp.p, p.p, n);
  copy(rcomp.p, comp.p, n);
  std::vector<float> m0(n), v0(n);
  fill(m0.data(), n, rng, 0.1f);
  for (size_t i = 0; i < n; i++) v0[i] = std::fabs(f(g[i])) * 0.01f + 1e-4f;
  MomentBufs m(a.m_format, m0), v(a.v_format, v0);
  gpu::adamw(emu_ctx(), DType::BF16, p.p, kahan ? comp.p : nullptr, g.p, m.dev.p, v.dev.p, n, a);
  wait_device();
  m.typed_ref([&](auto* rm) {
    v.typed_ref([&](auto* rv) {
      cpu::adamw_bf16_master(C(rp.p), kahan ? C(rcomp.p) : nullptr, C(g.p), rm, rv, n, a);
    });
  });
  CHECK(bit_diffs(p.p, rp.p, n) == 0);
  CHECK(bit_diffs(comp.p, rcomp.p, n) == 0);
  CHECK(std::memcmp(m.dev.p, m.ref.p, n * m.width) == 0);
  CHECK(std::memcmp(v.dev.p, v.ref.p, n * v.width) == 0);
  CHECK(all_poison(p.p + n, 1));
  CHECK(all_poison(comp.p + n, 1));
  CHECK(all_poison(m.dev.p + n * m.width, m.width));
  CHECK(all_poison(v.dev.p + n * v.width, v.width));
  check_emu();
}

TEST_CASE("AdamW: bf16 master weights (bf16-sr, bf16-kahan) bit-exact vs the CPU") {
  std::mt19937 rng(12);
  for (size_t n : {size_t(3), size_t(1001), size_t(2048), size_t(20011)})
    for (MasterFormat mf : {MasterFormat::BF16SR, MasterFormat::BF16Kahan})
      for (const auto& [fm, fv] : {std::pair{StateFormat::FP32, StateFormat::FP32},
                                   std::pair{StateFormat::BF16SR, StateFormat::FP16}}) {
        CAPTURE(n);
        adamw_bf16_master_case(rng, n, mf, fm, fv);
      }
}

// One Adam moment for the FP8-block kernel: the kernel's (dev) and the CPU's (ref) copies of
// its storage (fp32 values, 16-bit codes or FP8 codes) and FP8 blocks' meta, from the same
// initial values, one poisoned element past each end.
struct BlockedBufs {
  MomentFormat f;
  size_t n, width, meta_n;
  Buf<unsigned char> dev, ref;
  Buf<float> dev_meta, ref_meta;
  BlockedBufs(const MomentFormat& fmt, const std::vector<float>& x)
      : f(fmt),
        n(x.size()),
        width(moment_is_plain(fmt)     ? 4
              : moment_is_blocked(fmt) ? 1
                                       : 2),
        meta_n(moment_is_blocked(fmt) ? moment_blocks(n, f.block) * moment_meta_words(f) : 0),
        dev((n + 1) * width),
        ref(n * width),
        dev_meta(meta_n + 1),
        ref_meta(meta_n + 1) {
    if (moment_is_blocked(f))
      moment_encode_blocks(x.data(), n, f, dev.p, dev_meta.p);
    else
      store_moments(f, x, dev.p);
    std::memcpy(ref.p, dev.p, n * width);
    std::memcpy(ref_meta.p, dev_meta.p, meta_n * sizeof(float));
  }
  Tensor dev_meta_tensor() { return Tensor{dev_meta.p, DType::F32, meta_n}; }
  cpu::MomentSpan ref_span(uint64_t seed) {
    return cpu::MomentSpan{ref.p, meta_n ? ref_meta.p : nullptr, f, seed};
  }
  void check() {
    CHECK(std::memcmp(dev.p, ref.p, n * width) == 0);
    CHECK(std::memcmp(dev_meta.p, ref_meta.p, meta_n * sizeof(float)) == 0);
    CHECK(all_poison(dev.p + n * width, width));
    CHECK(all_poison(reinterpret_cast<unsigned char*>(dev_meta.p + meta_n), 4));
  }
};

// FP8 moments (src/numerics/moment_block.h): a warp per scale block on the device, a block at
// a time on the CPU, weight decay per element from two ranges; the weights (fp32 master and
// compute copy, or bf16 master weights), the codes and the blocks' meta bit for bit.
template <typename E>
void adamw_blocked_case(std::mt19937& rng, size_t n, MasterFormat mf, StateFormat fm,
                        StateFormat fv, const MomentBlocking& blocking) {
  CAPTURE(tname<E>());
  CAPTURE(moment_blocking_name(fm, blocking));
  CAPTURE(moment_blocking_name(fv, blocking));
  CAPTURE(master_format_name(mf));
  AdamWArgs a = emu_adamw_args(mf == MasterFormat::BF16SR, 2468, 33, fm, fv);
  a.m_format = moment_format(fm, false, blocking);
  a.v_format = moment_format(fv, true, blocking);
  a.master = mf;
  a.decay.n = 2;
  a.decay.lo[0] = 0, a.decay.hi[0] = n / 3;
  a.decay.lo[1] = n / 2, a.decay.hi[1] = n;
  Buf<E> p(n + 1), g(n), rp(n);
  Buf<float> master(n + 1), rmaster(n);
  Buf<bf16> comp(n + 1), rcomp(n);
  fill(g.p, n, rng);
  fill(master.p, n, rng);
  for (size_t i = 0; i < n; i++) p[i] = e<E>(master[i]);
  for (size_t i = 0; i < n; i++) comp[i] = bf16{f32_to_bf16(master[i] * 0x1p-10f * f(g[i]))};
  copy(rp.p, p.p, n);
  copy(rmaster.p, master.p, n);
  copy(rcomp.p, comp.p, n);
  std::vector<float> m0(n), v0(n);
  fill(m0.data(), n, rng, 0.1f);
  // moments over several binades, a few exact zeros: the blocks' scales and k vary
  for (size_t i = 0; i < n; i++) {
    m0[i] *= std::ldexp(1.f, -int(i % 23));
    v0[i] = i % 97 == 5 ? 0.f : std::fabs(f(g[i])) * 0.01f * std::ldexp(1.f, -int(i % 13)) + 1e-9f;
  }
  BlockedBufs m(a.m_format, m0), v(a.v_format, v0);
  a.m_meta = m.dev_meta_tensor();
  a.v_meta = v.dev_meta_tensor();
  const bool kahan = mf == MasterFormat::BF16Kahan;
  void* w = mf == MasterFormat::FP32 ? static_cast<void*>(master.p) : kahan ? comp.p : nullptr;
  WeightWords ww(n, false);
  gpu::adamw(emu_ctx(), dtype_of<E>(), p.p, w, g.p, m.dev.p, v.dev.p, n, a, nullptr, ww.s);
  wait_device();
  ww.check(p.p);
  if constexpr (std::is_same_v<E, bf16>) {
    if (mf != MasterFormat::FP32)
      cpu::adamw_bf16_master_blocked(C(rp.p), kahan ? C(rcomp.p) : nullptr, C(g.p),
                                     m.ref_span(a.m_seed), v.ref_span(a.v_seed), n, a);
  }
  if (mf == MasterFormat::FP32)
    cpu::adamw_blocked(C(rp.p), rmaster.p, C(g.p), m.ref_span(a.m_seed), v.ref_span(a.v_seed), n,
                       a);
  CHECK(bit_diffs(p.p, rp.p, n) == 0);
  CHECK(bit_diffs(master.p, rmaster.p, n) == 0);
  CHECK(bit_diffs(comp.p, rcomp.p, n) == 0);
  m.check();
  v.check();
  CHECK(all_poison(p.p + n, 1));
  CHECK(all_poison(master.p + n, 1));
  check_emu();
}

TEST_CASE(
    "AdamW: fp8 moments in blocks (every blocking, mixed with other formats) bit-exact vs the "
    "CPU") {
  std::mt19937 rng(13);
  const MomentBlocking blockings[] = {{128, MomentScale::FP32, MomentExpand::None},
                                      {32, MomentScale::E8M0, MomentExpand::None},
                                      {128, MomentScale::FP32, MomentExpand::Coat},
                                      {1024, MomentScale::E8M0, MomentExpand::Coat},
                                      {16, MomentScale::FP32, MomentExpand::Coat}};
  const std::pair<StateFormat, StateFormat> formats[] = {
      {StateFormat::FP8E4M3, StateFormat::FP8E4M3},
      {StateFormat::FP8E4M3, StateFormat::FP16},
      {StateFormat::BF16SR, StateFormat::FP8E5M2},
      {StateFormat::FP32, StateFormat::FP8E4M3}};
  for (size_t n : {size_t(5), size_t(1000), size_t(9001)})
    for (const MomentBlocking& b : blockings)
      for (const auto& [fm, fv] : formats) {
        CAPTURE(n);
        adamw_blocked_case<float>(rng, n, MasterFormat::FP32, fm, fv, b);
        adamw_blocked_case<bf16>(rng, n, MasterFormat::FP32, fm, fv, b);
        adamw_blocked_case<f16>(rng, n, MasterFormat::FP32, fm, fv, b);
        adamw_blocked_case<bf16>(rng, n, MasterFormat::BF16SR, fm, fv, b);
        adamw_blocked_case<bf16>(rng, n, MasterFormat::BF16Kahan, fm, fv, b);
      }
}

template <typename D, typename S>
void convert_case(const gpu::Ctx& c, std::mt19937& rng, size_t n, bool sr) {
  CAPTURE(tname<D>());
  CAPTURE(tname<S>());
  Buf<S> src(n);
  Buf<D> dst(n + 1), ref(n);
  fill(src.p, n, rng, 3.f);
  // specials and range edges in the first elements
  const float sp[] = {INFINITY, -INFINITY, NAN, 65504.f, 65520.f, 1e-8f, -6e-8f, 3.4e38f, 1e-40f};
  for (size_t i = 0; i < std::min(n, std::size(sp)); i++) src[i] = e<S>(sp[i]);
  const Rounding r{sr, 99, 5};
  convert<D, S>(c, dst.p, src.p, n, r);
  if constexpr (sizeof(D) == 2 && sizeof(S) == 2) {
    // 16 -> 16 bits: the CPU has no direct conversion (the backend refuses it); the kernel
    // widens exactly and rounds once, i.e. S -> fp32 -> D.
    std::vector<float> wide(n);
    cpu::convert(wide.data(), C(src.p), n, Rounding{});
    cpu::convert(C(ref.p), wide.data(), n, r);
  } else {
    cpu::convert(C(ref.p), C(src.p), n, r);
  }
  CHECK(bit_diffs(dst.p, ref.p, n) == 0);
  CHECK(all_poison(dst.p + n, 1));
  check_emu();
}

TEST_CASE("convert: every type pair, nearest and stochastic, bit-exact with the CPU") {
  std::mt19937 rng(11);
  const gpu::Ctx c = make_ctx();
  for (size_t n : {size_t(9), size_t(10007)})
    for (bool sr : {false, true}) {
      CAPTURE(n);
      CAPTURE(sr);
      convert_case<float, float>(c, rng, n, sr);
      convert_case<float, bf16>(c, rng, n, sr);
      convert_case<float, f16>(c, rng, n, sr);
      convert_case<bf16, float>(c, rng, n, sr);
      convert_case<bf16, bf16>(c, rng, n, sr);
      convert_case<bf16, f16>(c, rng, n, sr);
      convert_case<f16, float>(c, rng, n, sr);
      convert_case<f16, bf16>(c, rng, n, sr);
      convert_case<f16, f16>(c, rng, n, sr);
    }
}

TEST_CASE(
    "gradient wire: encode, sum and decode bit-exact with the host rows (tails, non-finite)") {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.f, 1.f);
  gpu::Ctx c = make_ctx();
  for (WireFormat f :
       {WireFormat::FP32, WireFormat::BF16, WireFormat::FP8E4M3, WireFormat::FP8E5M2})
    for (size_t part : {size_t(1), size_t(130), size_t(1001)}) {
      const std::string wire = wire_format_name(f);
      CAPTURE(wire);
      CAPTURE(part);
      const size_t rows = 3, row_bytes = wire_bytes(part, f);
      Buf<float> x(rows * part), sum(part), dec(rows * part);
      for (size_t i = 0; i < rows * part; i++)
        x[i] = normal(rng) * (i % 300 < 128 ? 1e-7f : 1.f);  // blocks of very different scales
      if (part > 200) {
        x[part + 5] = INFINITY;  // row 1's first block, and row 2's second
        x[2 * part + 140] = NAN;
      }
      Buf<uint8_t> enc(rows * row_bytes);
      gpu::wire_encode(c, x.p, part, rows, f, enc.p);
      wait_device();
      std::vector<uint8_t> want(rows * row_bytes);
      for (size_t r = 0; r < rows; r++)
        wire_encode(x.p + r * part, part, f, want.data() + r * row_bytes);
      CHECK(std::memcmp(enc.p, want.data(), want.size()) == 0);  // padding included
      gpu::wire_sum(c, enc.p, part, rows, f, sum.p);
      gpu::wire_decode(c, enc.p, part, rows, f, dec.p);
      wait_device();
      std::vector<float> acc(part, -0.f), one(rows * part);
      for (size_t r = 0; r < rows; r++) {
        wire_decode_add(want.data() + r * row_bytes, part, f, acc.data());
        wire_decode(want.data() + r * row_bytes, part, f, one.data() + r * part);
      }
      CHECK(std::memcmp(sum.p, acc.data(), part * 4) == 0);
      CHECK(std::memcmp(dec.p, one.data(), one.size() * 4) == 0);
      if (part > 200 && wire_is_fp8(f)) {  // the non-finite blocks arrive as NaN
        CHECK(std::isnan(dec[part + 6]));
        CHECK(std::isnan(dec[2 * part + 129]));
        CHECK(std::isfinite(dec[2 * part + 127]));
      }
      check_emu();
    }
}

TEST_CASE("global norm: sum of squares vs the CPU, unscaled, non-finite count") {
  std::mt19937 rng(12);
  for (size_t n : {size_t(1), size_t(777), size_t(300001)}) {
    CAPTURE(n);
    FOR_TYPES({
      CAPTURE(tname<E>());
      Buf<E> x(n);
      fill(x.p, n, rng);
      Buf<float> out(3);
      norm<E>(x.p, n, 1.f, out.p);
      const double ref = cpu::sum_squares(C(x.p), n);
      CHECK(std::fabs(out[0] - ref) <= 1e-5 * ref);
      CHECK(out[1] == 0.f);
      CHECK(all_poison(out.p + 2, 1));
      // unscaled by 1/1024, with non-finite values
      const float inv = 1.f / 1024.f;
      x[n / 2] = e<E>(INFINITY);
      if (n > 10) x[n - 1] = e<E>(NAN);
      double r2 = 0;
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) {
        const float v = f(x[i]);
        if (!std::isfinite(v)) {
          bad++;
          continue;
        }
        r2 += double(v * inv) * double(v * inv);
      }
      norm<E>(x.p, n, inv, out.p);
      CHECK(out[1] == float(bad));
      check_emu();
      if (n > 10) {  // the finite part alone: replace the specials again
        x[n / 2] = e<E>(0.25f);
        x[n - 1] = e<E>(-0.5f);
        r2 += double(0.25f * inv) * (0.25f * inv) + double(0.5f * inv) * (0.5f * inv);
        norm<E>(x.p, n, inv, out.p);
        CHECK(std::fabs(out[0] - r2) <= 1e-5 * r2);
        CHECK(out[1] == 0.f);
      }
    })
  }
}

DOCTEST_REGISTER_LISTENER("emu_errors", 1, EmuErrorListener);

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (ctx.shouldExit()) return rc;
  if (g_unreported) fprintf(stderr, "emulation errors outside the checks (above): failing\n");
  return rc ? rc : g_unreported ? 1 : 0;
}
