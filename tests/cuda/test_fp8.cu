// FP8 kernels (src/backends/cuda/fp8_cast.cu, src/backends/cuda/matmul_fp8.cu) against the CPU
// emulation: formats.h's encoders/decoders and CpuBackend::qdq's semantics (amax, scale rule, NaN
// poisoning, quantize-dequantize with fp32 accumulation).
//
//   - every cast on all 2^16 bf16 codes times several scales, bit-exact (vector, scalar and
//     transposed paths, partial tiles);
//   - amax exact (bf16 and fp32), non-finite -> +inf; scales from amax bit-exact; descales;
//   - the current and delayed recipes end to end, and NaN poisoning;
//   - each GEMM (forward with/without bias, dgrad, wgrad accumulating, dbias) on both paths
//     (FP8 tensor cores where the GPU has them, the bf16 fallback everywhere): exactly on
//     small-integer data with power-of-two scales (catches any layout or scale mistake), and
//     against an fp64 reference of the dequantized operands on random data;
//   - shape/alignment errors and plan sizes (host only: these run without a GPU too).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "cuda_test_util.h"
#include "fp8_test_util.h"
#include "src/backends/cuda/cublaslt.h"
#include "src/backends/cuda/fp8.h"

using namespace tg;
using namespace tg::gpu;
using fp8t::DevBuf;

namespace {

uint8_t enc(Fp8Format f, float v) {
  return f == Fp8Format::E4M3 ? f32_to_e4m3(v, true) : f32_to_e5m2(v, true);
}
float dec(Fp8Format f, uint8_t q) { return f == Fp8Format::E4M3 ? e4m3_to_f32(q) : e5m2_to_f32(q); }
// The CPU's quantize-dequantize of one finite value (CpuBackend::qdq: round trip * (1 / s)).
float qdq_cpu(Fp8Format f, float x, float s) { return dec(f, enc(f, x * s)) * (1.0f / s); }

gpu::bf16* bf(uint16_t* p) { return reinterpret_cast<gpu::bf16*>(p); }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const Fp8Format kFormats[2] = {Fp8Format::E4M3, Fp8Format::E5M2};
// Scales: identity, powers of two, awkward values, a huge one (underflows most codes to 0
// and overflows into saturation) and a tiny one.
const float kScales[] = {1.0f, 0.5f, 64.0f, 448.0f / 3.7f, 0.013f, 3.0e5f, 1.0e-30f};

std::vector<uint16_t> all_codes() {
  std::vector<uint16_t> v(65536);
  std::iota(v.begin(), v.end(), uint16_t(0));
  return v;
}

void poison(DevBuf<uint8_t>& b) { FP8_CUDA_OK(cudaMemset(b.p, 0xff, b.bytes())); }

void set_state(DevBuf<Fp8TensorScale>& st, float amax, float scale, float descale) {
  Fp8TensorScale t{};
  t.amax = amax;
  t.scale = scale;
  t.descale = descale;
  st.upload({t});
}

}  // namespace

TEST_CASE("fp8 cast: every bf16 code times several scales, E4M3 and E5M2, bit-exact") {
  TG_REQUIRE_GPU();
  const std::vector<uint16_t> codes = all_codes();
  DevBuf<uint16_t> x(codes);
  DevBuf<Fp8TensorScale> st(1);
  DevBuf<float> amax(1);
  DevBuf<uint8_t> q(65536), qT(65536);
  for (Fp8Format fmt : kFormats) {
    for (float s : kScales) {
      INFO("format " << std::string(fp8_format_name(fmt)));
      CAPTURE(s);
      std::vector<uint8_t> ref(65536);
      for (size_t i = 0; i < ref.size(); i++) ref[i] = enc(fmt, bf16_to_f32(codes[i]) * s);
      fp8_set_scale(st.p, s, 0);

      // vector path, with the fused amax (the codes hold NaN and inf: amax = +inf)
      poison(q);
      fp8_cast(q.p, bf(x.p), 65536, fmt, &st.p->scale, amax.p, nullptr, 0);
      std::vector<uint8_t> h = q.download();
      size_t bad = 0;
      for (size_t i = 0; i < h.size(); i++) bad += h[i] != ref[i];
      CHECK(bad == 0);
      const float a = amax.download()[0];
      CHECK((std::isinf(a) && a > 0));

      // scalar path: misaligned input and output, odd length
      poison(q);
      const size_t n = 65536 - 11;
      fp8_cast(q.p + 1, bf(x.p + 3), n, fmt, &st.p->scale, nullptr, nullptr, 0);
      h = q.download();
      bad = 0;
      for (size_t i = 0; i < n; i++) bad += h[1 + i] != ref[3 + i];
      CHECK(bad == 0);
      CHECK(h[0] == 0xff);  // nothing written outside
      CHECK(h[1 + n] == 0xff);

      // transposed, 256 x 256 (every code once), both copies
      poison(q);
      poison(qT);
      fp8_cast_transpose(q.p, qT.p, bf(x.p), 256, 256, fmt, &st.p->scale, nullptr, nullptr, 0);
      h = q.download();
      std::vector<uint8_t> ht = qT.download();
      bad = 0;
      for (int r = 0; r < 256; r++)
        for (int c = 0; c < 256; c++)
          bad += (h[r * 256 + c] != ref[r * 256 + c]) + (ht[c * 256 + r] != ref[r * 256 + c]);
      CHECK(bad == 0);

      // partial tiles and the element-wise paths: (rows, cols, offset into the codes)
      const int shapes[][3] = {{100, 72, 0}, {64, 50, 9000}, {13, 7, 40000}, {130, 200, 1}};
      for (const auto& sh : shapes) {
        const int rows = sh[0], cols = sh[1], off = sh[2];
        CAPTURE(rows);
        CAPTURE(cols);
        poison(q);
        poison(qT);
        fp8_cast_transpose(q.p, qT.p, bf(x.p + off), rows, cols, fmt, &st.p->scale, amax.p, nullptr,
                           0);
        h = q.download();
        ht = qT.download();
        bad = 0;
        float amax_ref = 0;
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++) {
            const size_t i = size_t(r) * cols + c;
            bad += (h[i] != ref[off + i]) + (ht[size_t(c) * rows + r] != ref[off + i]);
            const float v = std::fabs(bf16_to_f32(codes[off + i]));
            amax_ref = std::isfinite(v) ? std::max(amax_ref, v) : INFINITY;
          }
        CHECK(bad == 0);
        CHECK(h[size_t(rows) * cols] == 0xff);
        CHECK(ht[size_t(rows) * cols] == 0xff);
        CHECK(bits(amax.download()[0]) == bits(amax_ref));
        // qT only
        poison(qT);
        fp8_cast_transpose(nullptr, qT.p, bf(x.p + off), rows, cols, fmt, &st.p->scale, nullptr,
                           nullptr, 0);
        ht = qT.download();
        bad = 0;
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++)
            bad += ht[size_t(c) * rows + r] != ref[off + size_t(r) * cols + c];
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("fp8 qdq: bf16 -> fp8 -> bf16 equals the CPU's quantize-dequantize on every code") {
  TG_REQUIRE_GPU();
  const std::vector<uint16_t> codes = all_codes();
  DevBuf<uint16_t> x(codes), y(65536);
  DevBuf<Fp8TensorScale> st(1);
  DevBuf<float> bad_amax(std::vector<float>{INFINITY});
  for (Fp8Format fmt : kFormats) {
    for (float s : kScales) {
      INFO("format " << std::string(fp8_format_name(fmt)));
      CAPTURE(s);
      fp8_set_scale(st.p, s, 0);
      // value mode: the fp8 value itself (descale left to the GEMM)
      fp8_qdq_bf16(bf(y.p), bf(x.p), 65536, fmt, &st.p->scale, nullptr, nullptr, nullptr, 0);
      std::vector<uint16_t> h = y.download();
      size_t bad = 0;
      for (size_t i = 0; i < h.size(); i++)
        bad += h[i] != f32_to_bf16(dec(fmt, enc(fmt, bf16_to_f32(codes[i]) * s)));
      CHECK(bad == 0);
      // dequantized: bf16 of the CPU's qdq value (which is fp32)
      fp8_qdq_bf16(bf(y.p), bf(x.p), 65536, fmt, &st.p->scale, &st.p->descale, nullptr, nullptr, 0);
      h = y.download();
      bad = 0;
      for (size_t i = 0; i < h.size(); i++) {
        const float v = bf16_to_f32(codes[i]);
        // = bf16(qdq_cpu(v)) for finite v; NaN codes for the rest, as formats.h says
        bad += h[i] != f32_to_bf16(dec(fmt, enc(fmt, v * s)) * (1.0f / s));
      }
      CHECK(bad == 0);
      // in place, scalar path (odd offset)
      DevBuf<uint16_t> z(codes);
      fp8_qdq_bf16(bf(z.p + 1), bf(z.p + 1), 65535, fmt, &st.p->scale, nullptr, nullptr, nullptr,
                   0);
      h = z.download();
      bad = h[0] != codes[0];
      for (size_t i = 1; i < h.size(); i++)
        bad += h[i] != f32_to_bf16(dec(fmt, enc(fmt, bf16_to_f32(codes[i]) * s)));
      CHECK(bad == 0);
      // poisoned: every output NaN
      fp8_qdq_bf16(bf(y.p), bf(x.p), 65536, fmt, &st.p->scale, nullptr, nullptr, bad_amax.p, 0);
      h = y.download();
      CHECK(std::count(h.begin(), h.end(), uint16_t(0x7fff)) == 65536);
    }
  }
}

TEST_CASE("fp8 amax: exact for bf16 and fp32, +inf on NaN or inf, 0 for zeros") {
  TG_REQUIRE_GPU();
  const size_t n = (size_t(1) << 20) + 5;
  std::vector<uint16_t> h = fp8t::random_bf16(n, 3.0f, 1);
  h[123457] = f32_to_bf16(-97.5f);  // the largest magnitude is negative
  auto host_amax = [](const std::vector<uint16_t>& v, size_t from) {
    float m = 0;
    for (size_t i = from; i < v.size(); i++) {
      const float a = std::fabs(bf16_to_f32(v[i]));
      m = std::isfinite(a) ? std::max(m, a) : INFINITY;
    }
    return m;
  };
  DevBuf<uint16_t> x(h);
  DevBuf<float> amax(1);
  fp8_amax(amax.p, bf(x.p), n, 0);
  CHECK(amax.download()[0] == 97.5f);
  fp8_amax(amax.p, bf(x.p + 1), n - 1, 0);  // scalar path
  CHECK(amax.download()[0] == host_amax(h, 1));
  fp8_amax(amax.p, bf(x.p), 1000, 0);  // fewer elements than threads
  CHECK(amax.download()[0] == host_amax(std::vector<uint16_t>(h.begin(), h.begin() + 1000), 0));

  for (uint16_t bad : {uint16_t(0x7fc0), uint16_t(0xffc1), uint16_t(0x7f80), uint16_t(0xff80)}) {
    CAPTURE(bad);
    std::vector<uint16_t> g = h;
    g[n / 3] = bad;
    x.upload(g);
    fp8_amax(amax.p, bf(x.p), n, 0);
    const float a = amax.download()[0];
    CHECK((std::isinf(a) && a > 0));
  }
  std::vector<uint16_t> zeros(4096, 0);
  for (size_t i = 0; i < zeros.size(); i += 2) zeros[i] = 0x8000;  // -0
  DevBuf<uint16_t> z(zeros);
  fp8_amax(amax.p, bf(z.p), zeros.size(), 0);
  CHECK(bits(amax.download()[0]) == 0u);

  // fp32
  std::vector<float> f = fp8t::random_f32(n, 2.0f, 2);
  f[77] = -1.0e30f;
  f[78] = 1.0e-41f;  // subnormal
  DevBuf<float> xf(f);
  fp8_amax(amax.p, xf.p, n, 0);
  CHECK(amax.download()[0] == 1.0e30f);
  fp8_amax(amax.p, xf.p + 1, n - 1, 0);
  CHECK(amax.download()[0] == 1.0e30f);
  fp8_amax(amax.p, xf.p + 79, n - 79, 0);
  float m = 0;
  for (size_t i = 79; i < n; i++) m = std::max(m, std::fabs(f[i]));
  CHECK(amax.download()[0] == m);
  f[n - 1] = NAN;
  xf.upload(f);
  fp8_amax(amax.p, xf.p, n, 0);
  CHECK(std::isinf(amax.download()[0]));
}

TEST_CASE("fp8 scales: current (from the device amax) and delayed (from the host) match the CPU") {
  TG_REQUIRE_GPU();
  DevBuf<Fp8TensorScale> st(1);
  const float amaxes[] = {0.0f,   -0.0f,  1.0e-45f, 1.0e-30f, 1.0f,     3.5f,
                          448.0f, 7.0e4f, 1.0e30f,  3.4e38f,  INFINITY, NAN};
  for (Fp8Format fmt : kFormats)
    for (int margin : {0, 1, 3})
      for (float a : amaxes) {
        INFO("format " << std::string(fp8_format_name(fmt)));
        CAPTURE(margin);
        CAPTURE(a);
        set_state(st, a, -1.f, -1.f);
        fp8_compute_scale(st.p, fmt, margin, 0);
        const Fp8TensorScale h = st.download()[0];
        const float s = fp8_scale_from_amax(a, fp8_format_max(fmt), margin);
        CHECK(bits(h.scale) == bits(s));
        CHECK(bits(h.descale) == bits(1.0f / s));
        CHECK(bits(h.amax) == bits(a));  // untouched
      }
  for (float s : {1.0f, 0.37f, 3.0e38f, 1.0e-38f, 57344.0f / 7.0f}) {
    CAPTURE(s);
    set_state(st, 5.f, -1.f, -1.f);
    fp8_set_scale(st.p, s, 0);
    const Fp8TensorScale h = st.download()[0];
    CHECK(bits(h.scale) == bits(s));
    CHECK(bits(h.descale) == bits(1.0f / s));
    CHECK(h.amax == 5.f);
  }
}

TEST_CASE("fp8 recipes: current and delayed quantization end to end, and NaN poisoning") {
  TG_REQUIRE_GPU();
  const int rows = 48, cols = 80;
  const size_t n = size_t(rows) * cols;
  for (Fp8Format fmt : kFormats) {
    INFO("format " << std::string(fp8_format_name(fmt)));
    std::vector<uint16_t> h = fp8t::random_bf16(n, 2.0f, 3);
    float amax_ref = 0;
    for (uint16_t v : h) amax_ref = std::max(amax_ref, std::fabs(bf16_to_f32(v)));
    const int margin = 1;
    const float s = fp8_scale_from_amax(amax_ref, fp8_format_max(fmt), margin);
    std::vector<uint8_t> ref(n);
    for (size_t i = 0; i < n; i++) ref[i] = enc(fmt, bf16_to_f32(h[i]) * s);
    DevBuf<uint16_t> x(h);
    DevBuf<uint8_t> q(n), qT(n);
    DevBuf<Fp8TensorScale> st(1);
    auto check_codes = [&](bool transposed) {
      const std::vector<uint8_t> hq = q.download();
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += hq[i] != ref[i];
      if (transposed) {
        const std::vector<uint8_t> ht = qT.download();
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++)
            bad += ht[size_t(c) * rows + r] != ref[size_t(r) * cols + c];
      }
      CHECK(bad == 0);
    };
    for (bool transposed : {false, true}) {
      CAPTURE(transposed);
      // current: amax, scale, codes
      set_state(st, -1.f, -1.f, -1.f);
      poison(q);
      poison(qT);
      fp8_quantize_current(q.p, transposed ? qT.p : nullptr, bf(x.p), rows, cols, fmt, margin, st.p,
                           0);
      Fp8TensorScale hs = st.download()[0];
      CHECK(hs.amax == amax_ref);
      CHECK(bits(hs.scale) == bits(s));
      CHECK(bits(hs.descale) == bits(1.0f / s));
      check_codes(transposed);
      // delayed with the same scale: the same codes, the amax fused
      set_state(st, -1.f, -1.f, -1.f);
      poison(q);
      poison(qT);
      fp8_quantize_delayed(q.p, transposed ? qT.p : nullptr, bf(x.p), rows, cols, fmt, s, st.p, 0);
      hs = st.download()[0];
      CHECK(hs.amax == amax_ref);
      CHECK(bits(hs.scale) == bits(s));
      check_codes(transposed);
    }
    // a non-finite element
    for (uint16_t bad : {uint16_t(0x7fc0), uint16_t(0xff80)}) {
      CAPTURE(bad);
      std::vector<uint16_t> g = h;
      g[1234] = bad;
      x.upload(g);
      // current: every code NaN (the CPU turns the whole tensor into NaN), scale 1
      fp8_quantize_current(q.p, qT.p, bf(x.p), rows, cols, fmt, margin, st.p, 0);
      Fp8TensorScale hs = st.download()[0];
      CHECK(std::isinf(hs.amax));
      CHECK(hs.scale == 1.0f);
      std::vector<uint8_t> hq = q.download(), ht = qT.download();
      CHECK(size_t(std::count(hq.begin(), hq.end(), kFp8NaN)) == n);
      CHECK(size_t(std::count(ht.begin(), ht.end(), kFp8NaN)) == n);
      // delayed: the amax says so (the GEMM output gets poisoned); the other codes are normal
      fp8_quantize_delayed(q.p, qT.p, bf(x.p), rows, cols, fmt, s, st.p, 0);
      hs = st.download()[0];
      CHECK(std::isinf(hs.amax));
      hq = q.download();
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += hq[i] != enc(fmt, bf16_to_f32(g[i]) * s);
      CHECK(wrong == 0);
    }
  }
}

namespace {

std::vector<Fp8Path> paths_to_test() {
  int dev = 0;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  const Fp8Path p = fp8_path_for_device(dev);
  MESSAGE("fp8 GEMM path on this GPU: " << std::string(fp8_path_name(p)));
  std::vector<Fp8Path> v = {Fp8Path::kBf16Fallback};
  if (p == Fp8Path::kFp8) v.push_back(Fp8Path::kFp8);
  return v;
}

// Row-major references in fp64 of the three GEMMs on already dequantized operands.
std::vector<double> ref_forward(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>* b, int N, int C, int OC) {
  std::vector<double> out(size_t(N) * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = b ? (*b)[o] : 0.0;
      for (int c = 0; c < C; c++) acc += x[size_t(n) * C + c] * w[size_t(o) * C + c];
      out[size_t(n) * OC + o] = acc;
    }
  return out;
}
std::vector<double> ref_dgrad(const std::vector<double>& g, const std::vector<double>& w, int N,
                              int C, int OC) {
  std::vector<double> d(size_t(N) * C, 0.0);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++)
      for (int c = 0; c < C; c++)
        d[size_t(n) * C + c] += g[size_t(n) * OC + o] * w[size_t(o) * C + c];
  return d;
}
std::vector<double> ref_wgrad(const std::vector<double>& dw0, const std::vector<double>& g,
                              const std::vector<double>& x, int N, int C, int OC) {
  std::vector<double> d = dw0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++)
      for (int c = 0; c < C; c++)
        d[size_t(o) * C + c] += g[size_t(n) * OC + o] * x[size_t(n) * C + c];
  return d;
}
std::vector<double> ref_dbias(const std::vector<double>& db0, const std::vector<double>& g, int N,
                              int OC) {
  std::vector<double> d = db0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) d[o] += g[size_t(n) * OC + o];
  return d;
}
std::vector<double> qdq_all(Fp8Format f, const std::vector<uint16_t>& v, float s) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = qdq_cpu(f, bf16_to_f32(v[i]), s);
  return r;
}
float amax_of(const std::vector<uint16_t>& v) {
  float m = 0;
  for (uint16_t x : v) m = std::max(m, std::fabs(bf16_to_f32(x)));
  return m;
}
size_t count_nan(const std::vector<uint16_t>& v) {
  size_t k = 0;
  for (uint16_t x : v) k += std::isnan(bf16_to_f32(x));
  return k;
}

struct LinearData {
  int N, C, OC;
  std::vector<uint16_t> x, w, b, g, dw0, db0;
};

struct LinearRun {
  std::vector<uint16_t> out, out_nobias, dinp, dw, db;
  Fp8Report fwd, bwd;
};

// Forward (with and without bias) and backward of one linear on `path`. misalign: every
// bf16 tensor starts 16 bytes past a 256-byte boundary (as slices of small models do), which
// cuBLASLt must be told (its heuristic assumes 256 by default).
LinearRun run_linear(Fp8Path path, bool fast_accum, const LinearData& d, const Fp8Quant q[2],
                     const Fp8Quant& gq, bool misalign = false) {
  fp8t::LtEnv env;
  Fp8GemmContext ctx;
  ctx.lt = env.lt;
  ctx.workspace = env.ws;
  ctx.workspace_bytes = env.ws_bytes;
  ctx.stream = 0;
  ctx.path = path;
  ctx.fast_accum_forward = fast_accum;
  const Fp8LinearShape sh{d.N, d.C, d.OC};
  Fp8Plan plan = fp8_plan_create(path, 3, fp8_plan_scratch_bytes(path, &sh, 1));
  const size_t off = misalign ? 8 : 0;  // 8 bf16 = 16 bytes
  auto padded = [&](const std::vector<uint16_t>& h) {
    std::vector<uint16_t> v(off, 0);
    v.insert(v.end(), h.begin(), h.end());
    return v;
  };
  auto unpadded = [&](const DevBuf<uint16_t>& buf) {
    const std::vector<uint16_t> v = buf.download();
    return std::vector<uint16_t>(v.begin() + off, v.end());
  };
  DevBuf<uint16_t> x(padded(d.x)), w(padded(d.w)), b(padded(d.b)), g(padded(d.g)),
      dw(padded(d.dw0)), db(padded(d.db0));
  DevBuf<uint16_t> out(off + size_t(d.N) * d.OC), out2(off + size_t(d.N) * d.OC),
      dinp(off + size_t(d.N) * d.C);
  const int lin = 2;
  LinearRun r;
  fp8_linear_forward(ctx, plan, lin, bf(out2.p + off), bf(x.p + off), bf(w.p + off), nullptr, d.N,
                     d.C, d.OC, q);
  fp8_linear_forward(ctx, plan, lin, bf(out.p + off), bf(x.p + off), bf(w.p + off), bf(b.p + off),
                     d.N, d.C, d.OC, q);
  r.fwd = fp8_forward_report(plan, lin, 0);
  fp8_linear_backward(ctx, plan, lin, bf(dinp.p + off), bf(dw.p + off), bf(db.p + off),
                      bf(g.p + off), bf(x.p + off), bf(w.p + off), d.N, d.C, d.OC, gq,
                      r.fwd.scale[0], r.fwd.scale[1]);
  r.bwd = fp8_backward_report(plan, lin, 0);
  r.out = unpadded(out);
  r.out_nobias = unpadded(out2);
  r.dinp = unpadded(dinp);
  r.dw = unpadded(dw);
  r.db = unpadded(db);
  fp8_plan_destroy(plan);
  return r;
}

}  // namespace

TEST_CASE("fp8 GEMMs: exact on small integers with power-of-two scales (layouts and descales)") {
  TG_REQUIRE_GPU();
  LinearData d;
  d.N = 32;
  d.C = 64;
  d.OC = 48;
  d.x = fp8t::random_int_bf16(size_t(d.N) * d.C, -1, 1, 10);
  d.w = fp8t::random_int_bf16(size_t(d.OC) * d.C, -2, 2, 11);
  d.b = fp8t::random_int_bf16(d.OC, -4, 4, 12);
  d.g = fp8t::random_int_bf16(size_t(d.N) * d.OC, -1, 1, 13);
  d.dw0 = fp8t::random_int_bf16(size_t(d.OC) * d.C, -3, 3, 14);
  d.db0 = fp8t::random_int_bf16(d.OC, -3, 3, 15);
  // delayed scales: inp * 4 and W * 0.5 are exact in E4M3, dout * 8 in E5M2; the sums stay
  // integers below 256, exact in fp32 and in bf16, whatever the accumulation order
  const Fp8Quant q[2] = {Fp8Quant{4.0f, false, 0}, Fp8Quant{0.5f, false, 0}};
  const Fp8Quant gq{8.0f, false, 0, tg::ElemFormat::E5M2};
  const auto X = fp8t::widen_bf16(d.x), W = fp8t::widen_bf16(d.w), B = fp8t::widen_bf16(d.b),
             G = fp8t::widen_bf16(d.g), DW0 = fp8t::widen_bf16(d.dw0),
             DB0 = fp8t::widen_bf16(d.db0);
  const auto out_ref = ref_forward(X, W, &B, d.N, d.C, d.OC);
  const auto out2_ref = ref_forward(X, W, nullptr, d.N, d.C, d.OC);
  const auto dinp_ref = ref_dgrad(G, W, d.N, d.C, d.OC);
  const auto dw_ref = ref_wgrad(DW0, G, X, d.N, d.C, d.OC);
  const auto db_ref = ref_dbias(DB0, G, d.N, d.OC);
  auto exact = [](const std::vector<uint16_t>& got, const std::vector<double>& ref) {
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); i++) bad += got[i] != f32_to_bf16(float(ref[i]));
    return bad;
  };
  for (Fp8Path path : paths_to_test()) {
    for (int variant = 0; variant < 3; variant++) {
      const bool fast = variant != 1, misalign = variant == 2;
      INFO("path: " << std::string(fp8_path_name(path)));
      CAPTURE(fast);
      CAPTURE(misalign);
      const LinearRun r = run_linear(path, fast, d, q, gq, misalign);
      CHECK(exact(r.out, out_ref) == 0);
      CHECK(exact(r.out_nobias, out2_ref) == 0);
      CHECK(exact(r.dinp, dinp_ref) == 0);
      CHECK(exact(r.dw, dw_ref) == 0);
      CHECK(exact(r.db, db_ref) == 0);
      CHECK(r.fwd.amax[0] == amax_of(d.x));
      CHECK(r.fwd.amax[1] == amax_of(d.w));
      CHECK(r.fwd.scale[0] == 4.0f);
      CHECK(r.fwd.scale[1] == 0.5f);
      CHECK(r.bwd.amax[0] == amax_of(d.g));
      CHECK(r.bwd.scale[0] == 8.0f);
    }
  }
}

TEST_CASE("fp8 GEMMs: random data against fp64 on the CPU's dequantized operands") {
  TG_REQUIRE_GPU();
  // shapes of a small GPT-2 block's linears (C = 192): qkv, attproj, fc, fcproj
  const int shapes[][3] = {{128, 192, 576}, {128, 192, 192}, {128, 192, 768}, {128, 768, 192}};
  uint32_t seed = 100;
  for (const auto& sh : shapes) {
    LinearData d;
    d.N = sh[0];
    d.C = sh[1];
    d.OC = sh[2];
    CAPTURE(d.C);
    CAPTURE(d.OC);
    d.x = fp8t::random_bf16(size_t(d.N) * d.C, 1.0f, seed++);
    d.w = fp8t::random_bf16(size_t(d.OC) * d.C, 0.05f, seed++);
    d.b = fp8t::random_bf16(d.OC, 0.1f, seed++);
    d.g = fp8t::random_bf16(size_t(d.N) * d.OC, 1e-3f, seed++);
    d.dw0 = fp8t::random_bf16(size_t(d.OC) * d.C, 1e-2f, seed++);
    d.db0 = fp8t::random_bf16(d.OC, 1e-2f, seed++);
    const float ax = amax_of(d.x), aw = amax_of(d.w), ag = amax_of(d.g);
    for (bool current : {true, false}) {
      CAPTURE(current);
      // current: the tensors' own amax (margin 1 for inp); delayed: a stale history amax (half
      // the real one for inp, so some values saturate as they would after a jump; twice for W)
      const float sx = current ? fp8_scale_from_amax(ax, E4M3_MAX, 1)
                               : fp8_scale_from_amax(0.5f * ax, E4M3_MAX, 0);
      const float sw = current ? fp8_scale_from_amax(aw, E4M3_MAX, 0)
                               : fp8_scale_from_amax(2.0f * aw, E4M3_MAX, 0);
      const float sg = current ? fp8_scale_from_amax(ag, E5M2_MAX, 0)
                               : fp8_scale_from_amax(1.5f * ag, E5M2_MAX, 2);
      const Fp8Quant q[2] = {Fp8Quant{current ? 1.0f : sx, current, current ? 1 : 0},
                             Fp8Quant{current ? 1.0f : sw, current, 0}};
      const Fp8Quant gq{current ? 1.0f : sg, current, 0, tg::ElemFormat::E5M2};
      const auto X = qdq_all(Fp8Format::E4M3, d.x, sx), W = qdq_all(Fp8Format::E4M3, d.w, sw),
                 G = qdq_all(Fp8Format::E5M2, d.g, sg);
      const auto B = fp8t::widen_bf16(d.b), DW0 = fp8t::widen_bf16(d.dw0),
                 DB0 = fp8t::widen_bf16(d.db0), Graw = fp8t::widen_bf16(d.g);
      const auto out_ref = ref_forward(X, W, &B, d.N, d.C, d.OC);
      const auto out2_ref = ref_forward(X, W, nullptr, d.N, d.C, d.OC);
      const auto dinp_ref = ref_dgrad(G, W, d.N, d.C, d.OC);
      const auto dw_ref = ref_wgrad(DW0, G, X, d.N, d.C, d.OC);
      const auto db_ref = ref_dbias(DB0, Graw, d.N, d.OC);  // unquantized dout
      for (Fp8Path path : paths_to_test()) {
        for (bool fast : {true, false}) {
          INFO("path: " << std::string(fp8_path_name(path)));
          CAPTURE(fast);
          const LinearRun r = run_linear(path, fast, d, q, gq);
          // bf16 output rounding (2^-9 relative) plus fp32 accumulation in another order
          const double tol = 1e-2;
          CHECK(fp8t::rel_error(fp8t::widen_bf16(r.out), out_ref) < tol);
          CHECK(fp8t::rel_error(fp8t::widen_bf16(r.out_nobias), out2_ref) < tol);
          CHECK(fp8t::rel_error(fp8t::widen_bf16(r.dinp), dinp_ref) < tol);
          CHECK(fp8t::rel_error(fp8t::widen_bf16(r.dw), dw_ref) < tol);
          CHECK(fp8t::rel_error(fp8t::widen_bf16(r.db), db_ref) < tol);
          CHECK(r.fwd.amax[0] == ax);
          CHECK(r.fwd.amax[1] == aw);
          CHECK(bits(r.fwd.scale[0]) == bits(sx));
          CHECK(bits(r.fwd.scale[1]) == bits(sw));
          CHECK(r.bwd.amax[0] == ag);
          CHECK(bits(r.bwd.scale[0]) == bits(sg));
        }
      }
    }
  }
}

TEST_CASE("fp8 GEMMs: a non-finite operand makes the outputs NaN, as on the CPU") {
  TG_REQUIRE_GPU();
  LinearData d;
  d.N = 32;
  d.C = 64;
  d.OC = 48;
  d.x = fp8t::random_bf16(size_t(d.N) * d.C, 1.0f, 40);
  d.w = fp8t::random_bf16(size_t(d.OC) * d.C, 0.05f, 41);
  d.b = fp8t::random_bf16(d.OC, 0.1f, 42);
  d.g = fp8t::random_bf16(size_t(d.N) * d.OC, 1e-3f, 43);
  d.dw0 = fp8t::random_bf16(size_t(d.OC) * d.C, 1e-2f, 44);
  d.db0 = fp8t::random_bf16(d.OC, 1e-2f, 45);
  for (Fp8Path path : paths_to_test()) {
    for (bool current : {true, false}) {
      INFO("path: " << std::string(fp8_path_name(path)));
      CAPTURE(current);
      const Fp8Quant q[2] = {Fp8Quant{1.0f, current, 0}, Fp8Quant{64.0f, current, 0}};
      const Fp8Quant gq{1000.0f, current, 0, tg::ElemFormat::E5M2};
      // NaN / inf in the forward input: out all NaN; dinp stays finite (it does not involve
      // inp), dw all NaN (inp enters it, requantized with the forward's scale)
      for (uint16_t bad : {uint16_t(0x7fc0), uint16_t(0x7f80)}) {
        CAPTURE(bad);
        LinearData e = d;
        e.x[777] = bad;
        const LinearRun r = run_linear(path, true, e, q, gq);
        CHECK(count_nan(r.out) == r.out.size());
        CHECK(count_nan(r.out_nobias) == r.out_nobias.size());
        CHECK(std::isinf(r.fwd.amax[0]));
        if (current) CHECK(r.fwd.scale[0] == 1.0f);
        CHECK(count_nan(r.dinp) == 0);
        CHECK(count_nan(r.dw) == r.dw.size());
      }
      // an overflowed gradient: dinp and dw all NaN, its amax +inf
      {
        LinearData e = d;
        e.g[5] = 0xff80;  // -inf
        const LinearRun r = run_linear(path, true, e, q, gq);
        CHECK(count_nan(r.out) == 0);
        CHECK(count_nan(r.dinp) == r.dinp.size());
        CHECK(count_nan(r.dw) == r.dw.size());
        CHECK(std::isinf(r.bwd.amax[0]));
        if (current) CHECK(r.bwd.scale[0] == 1.0f);
      }
    }
  }
}

// ---- host-only checks: these run without a GPU ----

TEST_CASE("fp8 GEMM shape and alignment errors name the GEMM and the shape") {
  Fp8GemmContext ctx;  // never reaches cuBLASLt: the checks come first
  uint8_t* p = reinterpret_cast<uint8_t*>(uintptr_t(0x100000));
  gpu::bf16* o = reinterpret_cast<gpu::bf16*>(uintptr_t(0x200000));
  const float* s = reinterpret_cast<const float*>(uintptr_t(0x300000));
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Fp8ShapeError& e) {
      return e.what();
    } catch (...) {
      return "wrong exception type";
    }
    return "no exception";
  };
  std::string m = message([&] { fp8_gemm_forward(ctx, o, p, p, nullptr, 32, 40, 48, s, s); });
  CHECK(m.find("forward") != std::string::npos);
  CHECK(m.find("C=40") != std::string::npos);
  CHECK(m.find("multiple of 16") != std::string::npos);
  m = message([&] { fp8_gemm_dgrad(ctx, o, p, p, 32, 64, 24, s, s); });
  CHECK(m.find("dgrad") != std::string::npos);
  CHECK(m.find("OC=24") != std::string::npos);
  m = message([&] { fp8_gemm_wgrad(ctx, o, p, p, 8, 64, 48, s, s); });
  CHECK(m.find("wgrad") != std::string::npos);
  CHECK(m.find("N=8") != std::string::npos);
  m = message([&] { fp8_gemm_forward(ctx, o, p + 1, p, nullptr, 32, 64, 48, s, s); });
  CHECK(m.find("forward") != std::string::npos);
  CHECK(m.find("inp") != std::string::npos);
  CHECK(m.find("16-byte aligned") != std::string::npos);
  m = message([&] { fp8_gemm_wgrad(ctx, o + 1, p, p, 32, 64, 48, s, s); });
  CHECK(m.find("dweight") != std::string::npos);
  m = message([&] {
    fp8_gemm_forward(ctx, o, p, p, reinterpret_cast<const gpu::bf16*>(p + 2), 32, 64, 48, s, s);
  });
  CHECK(m.find("bias") != std::string::npos);
  CHECK(fp8_shape_ok(4096, 768, 3072));
  CHECK_FALSE(fp8_shape_ok(4096, 770, 3072));
  CHECK_FALSE(fp8_shape_ok(0, 768, 768));
  // the end-to-end linear checks the shape (FP8 path) and the plan before touching the GPU
  Fp8Plan plan;
  plan.path = Fp8Path::kFp8;
  plan.n_linears = 1;
  plan.scratch = p;
  plan.scratch_bytes = 1024;
  const Fp8Quant q[2] = {};
  m = message([&] { fp8_linear_forward(ctx, plan, 0, o, o, o, nullptr, 32, 40, 48, q); });
  CHECK(m.find("C=40") != std::string::npos);
  CHECK_THROWS_AS(fp8_linear_forward(ctx, plan, 0, o, o, o, nullptr, 32, 64, 48, q), Error);
  CHECK_THROWS_AS(fp8_linear_forward(ctx, plan, 1, o, o, o, nullptr, 16, 16, 16, q), Error);
  ctx.path = Fp8Path::kBf16Fallback;
  CHECK_THROWS_AS(fp8_linear_forward(ctx, plan, 0, o, o, o, nullptr, 16, 16, 16, q), Error);
}

TEST_CASE("fp8 plan: scratch of the largest linear's backward, 80 bytes of state per linear") {
  const int N = 4096, C = 768;
  const Fp8LinearShape gpt2[4] = {{N, C, 3 * C}, {N, C, C}, {N, C, 4 * C}, {N, 4 * C, C}};
  const size_t nc = size_t(N) * C, cc = size_t(C) * C;
  CHECK(fp8_plan_scratch_bytes(Fp8Path::kFp8, gpt2, 4) == 9 * nc + 4 * cc);
  CHECK(fp8_plan_scratch_bytes(Fp8Path::kBf16Fallback, gpt2, 4) == 10 * nc + 8 * cc);
  CHECK(fp8_plan_state_bytes(48) == 48 * 80);
  // the forward needs a + b only; layouts are 256-byte aligned
  const Fp8ScratchLayout l = fp8_scratch_layout(Fp8Path::kFp8, Fp8LinearShape{48, 40, 24});
  CHECK(l.a == 0);
  CHECK(l.b == 2048);  // 48*40 = 1920 -> 2048
  CHECK(l.g == 2048 + 1024);
  CHECK(l.gT == 2048 + 1024 + 1280);
  CHECK(l.total == 2048 + 1024 + 1280 + 1280);
  // against GPT-2's fp32 logits buffer (N x 50304 x 4 bytes) the scratch is small
  CHECK(fp8_plan_scratch_bytes(Fp8Path::kFp8, gpt2, 4) < size_t(N) * 50304 * 4);
}

TEST_CASE("fp8 plan: a weight's address names its linear's state slot") {
  Fp8Plan plan;
  plan.n_linears = 2;
  int a = 0, b = 0, c = 0;
  CHECK(fp8_plan_slot(plan, &a) == 0);
  CHECK(fp8_plan_slot(plan, &b) == 1);
  CHECK(fp8_plan_slot(plan, &a) == 0);
  CHECK(fp8_plan_slot(plan, &b) == 1);
  CHECK_THROWS_AS(fp8_plan_slot(plan, &c), Error);
}

TEST_CASE("GEMM pointer alignment told to cuBLASLt's heuristic (src/backends/cuda/cublaslt.h)") {
  CHECK(pointer_alignment(reinterpret_cast<void*>(uintptr_t(0x12300))) == 256);
  CHECK(pointer_alignment(reinterpret_cast<void*>(uintptr_t(0x12310))) == 16);
  CHECK(pointer_alignment(reinterpret_cast<void*>(uintptr_t(0x12380))) == 128);
  CHECK(pointer_alignment(reinterpret_cast<void*>(uintptr_t(0x12301))) == 1);
}

// ---- informational timings (skipped unless asked: --no-skip -tc="fp8 bench*") ----

namespace {
template <typename F>
double time_ms(F&& f, int reps = 20) {
  f();  // warm up (and fill the heuristic cache)
  cudaEvent_t a, b;
  FP8_CUDA_OK(cudaEventCreate(&a));
  FP8_CUDA_OK(cudaEventCreate(&b));
  FP8_CUDA_OK(cudaEventRecord(a, 0));
  for (int i = 0; i < reps; i++) f();
  FP8_CUDA_OK(cudaEventRecord(b, 0));
  FP8_CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  FP8_CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / reps;
}
}  // namespace

TEST_CASE("fp8 bench: casts and GEMMs at GPT-2 124M sizes (informational)" * doctest::skip()) {
  TG_REQUIRE_GPU();
  const int N = 8192, C = 768, OC = 3072;  // the fc linear at B*T = 8192
  const size_t nx = size_t(N) * C;
  DevBuf<uint16_t> x(fp8t::random_bf16(nx, 1.0f, 1)),
      w(fp8t::random_bf16(size_t(OC) * C, 0.02f, 2));
  DevBuf<uint16_t> g(fp8t::random_bf16(size_t(N) * OC, 1e-3f, 3)), out(size_t(N) * OC), dinp(nx),
      dw(size_t(OC) * C), b(fp8t::random_bf16(OC, 0.1f, 4)), db(OC);
  FP8_CUDA_OK(cudaMemset(dw.p, 0, dw.bytes()));
  FP8_CUDA_OK(cudaMemset(db.p, 0, db.bytes()));
  DevBuf<uint8_t> q(nx), qT(nx);
  DevBuf<Fp8TensorScale> st(1);
  fp8_set_scale(st.p, 100.0f, 0);
  const double bytes_cast = nx * 3.0;  // read 2, write 1
  const double t_amax = time_ms([&] { fp8_amax(&st.p->amax, bf(x.p), nx, 0); });
  const double t_cast = time_ms(
      [&] { fp8_cast(q.p, bf(x.p), nx, Fp8Format::E4M3, &st.p->scale, &st.p->amax, nullptr, 0); });
  const double t_castT = time_ms([&] {
    fp8_cast_transpose(q.p, qT.p, bf(x.p), N, C, Fp8Format::E4M3, &st.p->scale, nullptr, nullptr,
                       0);
  });
  std::printf("amax bf16 %zu elements: %.3f ms, %.0f GB/s\n", nx, t_amax, nx * 2.0 / t_amax / 1e6);
  std::printf("cast + amax -> e4m3:    %.3f ms, %.0f GB/s\n", t_cast, bytes_cast / t_cast / 1e6);
  std::printf("cast -> e4m3 + e4m3^T:  %.3f ms, %.0f GB/s\n", t_castT, nx * 4.0 / t_castT / 1e6);
  const Fp8Quant qd[2] = {Fp8Quant{100.0f, false, 0}, Fp8Quant{1000.0f, false, 0}};
  const Fp8Quant qc[2] = {Fp8Quant{1.0f, true, 0}, Fp8Quant{1.0f, true, 0}};
  int dev = 0;
  FP8_CUDA_OK(cudaGetDevice(&dev));
  const Fp8Path native = fp8_path_for_device(dev);
  const double flop = 2.0 * N * C * OC;
  for (Fp8Path path : {Fp8Path::kBf16Fallback, native}) {
    fp8t::LtEnv env;
    Fp8GemmContext ctx;
    ctx.lt = env.lt;
    ctx.workspace = env.ws;
    ctx.workspace_bytes = env.ws_bytes;
    ctx.path = path;
    const Fp8LinearShape sh{N, C, OC};
    Fp8Plan plan = fp8_plan_create(path, 1, fp8_plan_scratch_bytes(path, &sh, 1));
    for (bool current : {false, true}) {
      const Fp8Quant* qq = current ? qc : qd;
      const double tf = time_ms([&] {
        fp8_linear_forward(ctx, plan, 0, bf(out.p), bf(x.p), bf(w.p), bf(b.p), N, C, OC, qq);
      });
      const double tb = time_ms([&] {
        fp8_linear_backward(ctx, plan, 0, bf(dinp.p), bf(dw.p), bf(db.p), bf(g.p), bf(x.p), bf(w.p),
                            N, C, OC, qq[0], 100.0f, 1000.0f);
      });
      std::printf(
          "%-8s %-7s linear forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f "
          "TFLOP/s), all casts included\n",
          path == Fp8Path::kFp8 ? "fp8" : "fallback", current ? "current" : "delayed", tf,
          flop / tf / 1e9, tb, 2 * flop / tb / 1e9);
    }
    fp8_plan_destroy(plan);
    if (native == Fp8Path::kBf16Fallback) break;
  }
}
