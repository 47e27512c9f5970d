// fp8_emulated.cpp: the FP8 quantization launchers (src/backends/cuda/fp8_cast.cu) and the kernels
// of kernels/fp8_kernels.cuh on the CPU, CUDA threads emulated (tests/cuda/cuda_emulation.h): casts
// on every bf16 code (vector and scalar paths), transposed casts on full and partial tiles, amax,
// scales, qdq, poisoning, the bias kernels and the fallback alphas, bit-exact against
// src/numerics/formats.h. It executes the index math, vector packing, tile transposes and reductions as
// written; it says nothing about nvcc, the memory model or cuBLASLt (tests/cuda/test_fp8.cu on a
// GPU does). Kernels whose vector paths the launchers choose by alignment are also launched
// directly, to force each path.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <algorithm>
#include <cstring>

#include "src/backends/cuda/fp8.h"

using namespace emu_test;
using namespace tg::gpu;
using namespace tg::gpu::fp8_detail;
namespace {

// kernel<<<g, block>>>(args...) on the legacy stream, waited for: the tests read the results
// at once.
template <typename... P, typename... A>
void launch(dim3 g, unsigned block, void (*kernel)(P...), A... args) {
  emu::launch(g, block, kernel, args...);
  wait_device();
}

uint8_t enc(Fp8Format f, float v) {
  return f == Fp8Format::E4M3 ? f32_to_e4m3(v, true) : f32_to_e5m2(v, true);
}
float dec(Fp8Format f, uint8_t q) { return f == Fp8Format::E4M3 ? e4m3_to_f32(q) : e5m2_to_f32(q); }

const bf16* B16(const uint16_t* p) { return reinterpret_cast<const bf16*>(p); }
bf16* B16(uint16_t* p) { return reinterpret_cast<bf16*>(p); }

// fp8_cast (the launcher picks the vector path when x and q are aligned); vec = false forces
// the scalar path through the kernel itself.
void cast_any(Fp8Format f, dim3 g, const uint16_t* x, uint8_t* q, size_t n, bool vec,
              const float* s, unsigned* a, const float* poison) {
  if (vec) {
    fp8_cast(q, B16(x), n, f, s, reinterpret_cast<float*>(a), poison, nullptr);
    return wait_device();
  }
  if (f == Fp8Format::E4M3)
    launch(g, kThreads, &cast_bf16_kernel<Fp8Format::E4M3>, B16(x), q, n, false, s, a, poison);
  else
    launch(g, kThreads, &cast_bf16_kernel<Fp8Format::E5M2>, B16(x), q, n, false, s, a, poison);
}
// fp8_cast_transpose; vin = vout = false forces the element-wise paths through the kernel.
void cast_t_any(Fp8Format f, const uint16_t* x, uint8_t* q, uint8_t* qT, int rows, int cols,
                bool vin, bool vout, const float* s, unsigned* a, const float* poison) {
  if (vin || vout) {
    fp8_cast_transpose(q, qT, B16(x), rows, cols, f, s, reinterpret_cast<float*>(a), poison,
                       nullptr);
    return wait_device();
  }
  const dim3 g((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  if (f == Fp8Format::E4M3)
    launch(g, 256, &cast_transpose_bf16_kernel<Fp8Format::E4M3>, B16(x), q, qT, rows, cols, false,
           false, s, a, poison);
  else
    launch(g, 256, &cast_transpose_bf16_kernel<Fp8Format::E5M2>, B16(x), q, qT, rows, cols, false,
           false, s, a, poison);
}

const Fp8Format kFormats[2] = {Fp8Format::E4M3, Fp8Format::E5M2};

}  // namespace

TEST_CASE("emulated: the cast kernel on every bf16 code, vector and scalar paths, fused amax") {
  Buf<uint16_t> x(65536 + 16);
  for (size_t i = 0; i < 65536; i++) x[i] = uint16_t(i);
  for (Fp8Format f : kFormats)
    for (float s : {1.0f, 448.0f / 3.7f, 1.0e-30f}) {
      CAPTURE(s);
      Buf<float> scale(1);
      scale[0] = s;
      Buf<unsigned> amax(1, 0);
      Buf<uint8_t> q(65536 + 16);
      cast_any(f, dim3(3), x.p, q.p, 65536, true, scale.p, amax.p, nullptr);
      size_t bad = 0;
      for (size_t i = 0; i < 65536; i++) bad += q[i] != enc(f, bf16_to_f32(uint16_t(i)) * s);
      CHECK(bad == 0);
      CHECK(q[65536] == 0xff);
      CHECK(amax[0] == 0x7f800000u);  // NaN/inf codes: +inf
      // scalar path, misaligned, no amax; then a finite range with the amax
      Buf<uint8_t> q2(65536 + 16);
      cast_any(f, dim3(2), x.p + 3, q2.p + 1, 65000, false, scale.p, nullptr, nullptr);
      bad = 0;
      for (size_t i = 0; i < 65000; i++)
        bad += q2[1 + i] != enc(f, bf16_to_f32(uint16_t(i + 3)) * s);
      CHECK(bad == 0);
      CHECK(q2[0] == 0xff);
      CHECK(q2[65001] == 0xff);
      amax[0] = 0;
      cast_any(f, dim3(2), x.p, q2.p, 0x7f80 - 5, true, scale.p, amax.p, nullptr);  // finite
      CHECK(amax[0] == (uint32_t(0x7f80 - 6) << 16));  // the largest code in the range
    }
}

TEST_CASE("emulated: the transposed cast, full and partial tiles, both copies and the amax") {
  std::mt19937 rng(5);
  for (Fp8Format f : kFormats) {
    const int shapes[][2] = {{256, 256}, {100, 72}, {64, 50}, {13, 7}, {130, 200}, {48, 80}};
    for (const auto& sh : shapes) {
      const int rows = sh[0], cols = sh[1];
      CAPTURE(rows);
      CAPTURE(cols);
      const size_t n = size_t(rows) * cols;
      Buf<uint16_t> x(n);
      std::normal_distribution<float> d(0.f, 3.f);
      float ref_amax = 0;
      for (size_t i = 0; i < n; i++) {
        x[i] = f32_to_bf16(d(rng));
        ref_amax = std::max(ref_amax, std::fabs(bf16_to_f32(x[i])));
      }
      Buf<float> scale(1);
      scale[0] = 37.0f;
      Buf<unsigned> amax(1, 0);
      Buf<uint8_t> q(n + 16), qT(n + 16);
      cast_t_any(f, x.p, q.p, qT.p, rows, cols, cols % 8 == 0, rows % 16 == 0, scale.p, amax.p,
                 nullptr);
      size_t bad = 0;
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
          const uint8_t ref = enc(f, bf16_to_f32(x[size_t(r) * cols + c]) * 37.0f);
          bad += (q[size_t(r) * cols + c] != ref) + (qT[size_t(c) * rows + r] != ref);
        }
      CHECK(bad == 0);
      CHECK(q[n] == 0xff);
      CHECK(qT[n] == 0xff);
      float a;
      std::memcpy(&a, amax.p, 4);
      CHECK(a == ref_amax);
      // qT only, element-wise paths forced, poisoned
      Buf<float> inf(1);
      inf[0] = INFINITY;
      Buf<uint8_t> qT2(n + 16);
      cast_t_any(f, x.p, nullptr, qT2.p, rows, cols, false, false, scale.p, nullptr, inf.p);
      CHECK(size_t(std::count(qT2.p, qT2.p + n, kFp8NaN)) == n);
      CHECK(qT2[n] == 0xff);
    }
  }
}

TEST_CASE("emulated: amax of bf16 and fp32 (vector, scalar, non-finite)") {
  const size_t n = 100003;
  Buf<uint16_t> x(n);
  Buf<float> xf(n);
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.f, 2.f);
  for (size_t i = 0; i < n; i++) {
    xf[i] = d(rng);
    x[i] = f32_to_bf16(xf[i]);
  }
  x[n - 1] = f32_to_bf16(-50.0f);  // in the scalar tail
  xf[7] = -1.0e20f;
  for (bool vec : {true, false}) {
    Buf<unsigned> a(1, 0);
    launch(dim3(3), kThreads, &amax_kernel<bf16>, B16(static_cast<const uint16_t*>(x.p)), n, vec,
           a.p);
    CHECK(a[0] == __float_as_uint(50.0f));
    a[0] = 0;
    launch(dim3(3), kThreads, &amax_kernel<float>, static_cast<const float*>(xf.p), n, vec, a.p);
    CHECK(a[0] == __float_as_uint(1.0e20f));
  }
  x[500] = 0xffc1;  // NaN
  xf[n - 2] = -INFINITY;
  Buf<unsigned> a(1, 0);
  launch(dim3(2), kThreads, &amax_kernel<bf16>, B16(static_cast<const uint16_t*>(x.p)), n, true,
         a.p);
  CHECK(a[0] == 0x7f800000u);
  a[0] = 0;
  launch(dim3(2), kThreads, &amax_kernel<float>, static_cast<const float*>(xf.p), n, true, a.p);
  CHECK(a[0] == 0x7f800000u);
}

TEST_CASE("emulated: qdq values, dequantized values, poisoning") {
  Buf<uint16_t> x(65536), y(65536);
  for (size_t i = 0; i < 65536; i++) x[i] = uint16_t(i);
  for (Fp8Format f : kFormats) {
    const float s = 0.013f;
    Buf<float> sc(2);
    sc[0] = s;
    sc[1] = 1.0f / s;
    auto run = [&](const float* descale, const float* poison, bool vec) {
      if (f == Fp8Format::E4M3)
        launch(dim3(2), kThreads, &qdq_bf16_kernel<Fp8Format::E4M3>,
               B16(static_cast<const uint16_t*>(x.p)), B16(y.p), size_t(65536), vec,
               static_cast<const float*>(sc.p), descale, static_cast<unsigned*>(nullptr), poison);
      else
        launch(dim3(2), kThreads, &qdq_bf16_kernel<Fp8Format::E5M2>,
               B16(static_cast<const uint16_t*>(x.p)), B16(y.p), size_t(65536), vec,
               static_cast<const float*>(sc.p), descale, static_cast<unsigned*>(nullptr), poison);
    };
    for (bool vec : {true, false}) {
      run(nullptr, nullptr, vec);
      size_t bad = 0;
      for (size_t i = 0; i < 65536; i++)
        bad += y[i] != f32_to_bf16(dec(f, enc(f, bf16_to_f32(uint16_t(i)) * s)));
      CHECK(bad == 0);
      run(sc.p + 1, nullptr, vec);
      bad = 0;
      for (size_t i = 0; i < 65536; i++)
        bad += y[i] != f32_to_bf16(dec(f, enc(f, bf16_to_f32(uint16_t(i)) * s)) * (1.0f / s));
      CHECK(bad == 0);
    }
    Buf<float> inf(1);
    inf[0] = NAN;
    run(nullptr, inf.p, true);
    CHECK(std::count(y.p, y.p + 65536, uint16_t(0x7fff)) == 65536);
  }
}

TEST_CASE("emulated: scales, poisoning of outputs, bias kernels, fallback alphas") {
  Buf<float> amax(1), scale(1), descale(1);
  for (float a : {0.0f, 1.0e-45f, 3.5f, 1.0e30f, INFINITY, NAN})
    for (int margin : {0, 2}) {
      amax[0] = a;
      launch(dim3(1), 32, &compute_scale_kernel, static_cast<const float*>(amax.p), E5M2_MAX,
             margin, scale.p, descale.p);
      const float s = fp8_scale_from_amax(a, E5M2_MAX, margin);
      CHECK(__float_as_uint(scale[0]) == __float_as_uint(s));
      CHECK(__float_as_uint(descale[0]) == __float_as_uint(1.0f / s));
    }
  launch(dim3(1), 32, &set_scale_kernel, 0.37f, scale.p, descale.p);
  CHECK(scale[0] == 0.37f);
  CHECK(descale[0] == 1.0f / 0.37f);

  // poisoning: untouched when finite, all NaN otherwise
  Buf<uint16_t> out(1000, 0x12);
  Buf<float> ok(1), bad(1);
  ok[0] = 3.0f;
  bad[0] = INFINITY;
  launch(dim3(2), kThreads, &poison_bf16_kernel, B16(out.p), size_t(1000),
         static_cast<const float*>(ok.p), static_cast<const float*>(nullptr));
  CHECK(std::count(out.p, out.p + 1000, uint16_t(0x1212)) == 1000);
  launch(dim3(2), kThreads, &poison_bf16_kernel, B16(out.p), size_t(1000),
         static_cast<const float*>(ok.p), static_cast<const float*>(bad.p));
  CHECK(std::count(out.p, out.p + 1000, uint16_t(0x7fff)) == 1000);

  // bias rows and the bias gradient (integers: exact in any order)
  const int N = 37, OC = 70;
  Buf<uint16_t> bias(OC), rows(size_t(N) * OC), dout(size_t(N) * OC), db(OC);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(-3, 3);
  for (int o = 0; o < OC; o++) {
    bias[o] = f32_to_bf16(float(d(rng)));
    db[o] = f32_to_bf16(float(d(rng)));
  }
  for (size_t i = 0; i < size_t(N) * OC; i++) dout[i] = f32_to_bf16(float(d(rng)));
  launch(dim3(3), kThreads, &fill_bias_rows_kernel, B16(rows.p),
         B16(static_cast<const uint16_t*>(bias.p)), N, OC);
  size_t wrong = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) wrong += rows[size_t(n) * OC + o] != bias[o];
  CHECK(wrong == 0);
  std::vector<float> ref(OC);
  for (int o = 0; o < OC; o++) {
    float s = bf16_to_f32(db[o]);
    for (int n = 0; n < N; n++) s += bf16_to_f32(dout[size_t(n) * OC + o]);
    ref[o] = s;
  }
  launch(dim3((OC + 31) / 32), 256, &bias_backward_kernel, B16(db.p),
         B16(static_cast<const uint16_t*>(dout.p)), N, OC);
  wrong = 0;
  for (int o = 0; o < OC; o++) wrong += db[o] != f32_to_bf16(ref[o]);
  CHECK(wrong == 0);

  // fallback alphas
  Buf<Fp8LinearDevice> dev(1, 0);
  dev[0].t[kFp8Inp].descale = 0.25f;
  dev[0].t[kFp8Weight].descale = 3.0f;
  dev[0].t[kFp8Grad].descale = 0.5f;
  launch(dim3(1), 32, &fallback_alpha_kernel, dev.p, 0);
  CHECK(dev[0].alpha[0] == 0.75f);
  launch(dim3(1), 32, &fallback_alpha_kernel, dev.p, 1);
  CHECK(dev[0].alpha[1] == 1.5f);
  CHECK(dev[0].alpha[2] == 0.125f);
}
