// The per-op profile's decorator (src/backends/profiling_backend.h): a step through it is the
// step without it, bit for bit; every op is recorded once, with its layer, phase, FLOPs and
// bytes; the backend's defaults that a decorator could split into two ops are forwarded whole.
#include <doctest/doctest.h>

#include <set>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/profiling_backend.h"
#include "src/model/model.h"
#include "tests/test_util.h"

using namespace tg;

namespace {

// Two steps of a tiny bf16 model (forward, backward, AdamW) on `be`; returns the weights.
std::vector<float> two_steps(Backend& be, ProfilingBackend* pb, std::vector<OpRecord>* recs) {
  GPT m(gpt_config(2, 2, 16, 64, 16), be, DType::BF16);
  m.init_random(7);
  std::vector<int32_t> in(2 * 16), tg(2 * 16);
  for (size_t i = 0; i < in.size(); i++) {
    in[i] = int32_t((i * 7) % 64);
    tg[i] = int32_t((i * 5 + 3) % 64);
  }
  for (int s = 1; s <= 2; s++) {
    if (pb) pb->set_recording(s == 2);
    m.zero_grad();
    m.forward(in.data(), tg.data(), 2, 16, 1.0f);
    m.backward();
    const GradCheck g = m.check_grads(1.0);
    AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s, Rounding{}};
    (void)g;
    m.adamw_step(a);
  }
  if (pb) *recs = pb->take_records(nullptr);
  return m.params_f32();
}

}  // namespace

TEST_CASE("profiling backend: a step through it equals the step without it") {
  auto plain = make_cpu_backend();
  auto inner = make_cpu_backend();
  ProfilingBackend pb(*inner);
  std::vector<OpRecord> recs;
  const std::vector<float> a = two_steps(*plain, nullptr, nullptr);
  const std::vector<float> b = two_steps(pb, &pb, &recs);
  REQUIRE(a.size() == b.size());
  CHECK(a == b);
  REQUIRE(!recs.empty());
  // Every block op is tagged with its layer in both phases; the update with the optimizer.
  std::set<std::pair<int, StepPhase>> seen;
  for (const OpRecord& r : recs) {
    seen.insert({r.layer, r.phase});
    CHECK(r.ms >= 0);
    CHECK(r.flops >= 0);
    if (r.op != "upload" && r.op != "download") CHECK(r.bytes > 0);
  }
  for (int l = 0; l < 2; l++) {
    CHECK(seen.count({l, StepPhase::Forward}) == 1);
    CHECK(seen.count({l, StepPhase::Backward}) == 1);
  }
  CHECK(seen.count({-1, StepPhase::Optimizer}) == 1);
  size_t adamw = 0, gemms = 0;
  for (const OpRecord& r : recs) {
    if (r.op == "adamw") {
      adamw++;
      CHECK(r.phase == StepPhase::Optimizer);
    }
    if (r.op == "matmul_forward" && r.layer == 0) {
      gemms++;
      CHECK(r.kind == OpKind::Gemm);
    }
  }
  CHECK(adamw > 0);
  CHECK(gemms == 3);  // qkv, attproj and fcproj (fc runs as matmul_gelu_forward)
}

TEST_CASE("profiling backend: FLOPs and bytes of a linear are the interface's") {
  auto inner = make_cpu_backend();
  ProfilingBackend pb(*inner);
  const int N = 8, C = 16, OC = 24;
  Tensor x = pb.alloc(DType::F32, size_t(N) * C), w = pb.alloc(DType::F32, size_t(OC) * C);
  Tensor b = pb.alloc(DType::F32, OC), y = pb.alloc(DType::F32, size_t(N) * OC);
  for (Tensor t : {x, w, b}) pb.zero(t);
  pb.set_recording(true);
  pb.set_scope(3, StepPhase::Forward);
  pb.matmul_forward(y, x, w, b, N, C, OC);
  const std::vector<OpRecord> r = pb.take_records(nullptr);
  REQUIRE(r.size() == 1);
  CHECK(r[0].op == "matmul_forward");
  CHECK(r[0].layer == 3);
  CHECK(r[0].phase == StepPhase::Forward);
  CHECK(r[0].flops == doctest::Approx(2.0 * N * C * OC));
  CHECK(r[0].bytes == doctest::Approx(4.0 * (N * C + OC * C + OC + N * OC)));
  CHECK(r[0].shape == "N=8 C=16 OC=24");
  for (Tensor t : {x, w, b, y}) pb.free(t);
}

// The Backend defaults made of two ops (matmul + GELU, residual + layernorm, the gradient check
// from sum_squares) must reach the inner backend whole: a device fuses them.
TEST_CASE("profiling backend: fused ops are recorded once, as themselves") {
  auto inner = make_cpu_backend();
  ProfilingBackend pb(*inner);
  const int N = 4, C = 8;
  const size_t nc = size_t(N) * C;
  Tensor x = pb.alloc(DType::F32, nc), w = pb.alloc(DType::F32, size_t(4) * C * C);
  Tensor b = pb.alloc(DType::F32, 4 * C), pre = pb.alloc(DType::F32, 4 * nc);
  Tensor out = pb.alloc(DType::F32, 4 * nc), res = pb.alloc(DType::F32, nc);
  Tensor mean = pb.alloc(DType::F32, N), rstd = pb.alloc(DType::F32, N);
  const std::vector<float> ones(size_t(4) * C * C, 0.5f);  // the largest tensor, w
  for (Tensor t : {x, w, b}) pb.upload(t, ones.data());
  pb.set_recording(true);
  pb.matmul_gelu_forward(pre, out, x, w, b, N, C, 4 * C);
  pb.residual_layernorm_forward(res, out.slice(0, nc), mean, rstd, x, x, b.slice(0, C),
                                b.slice(0, C), N, C);
  pb.unscale_check_norm(x, 2.0);
  const std::vector<OpRecord> r = pb.take_records(nullptr);
  REQUIRE(r.size() == 3);
  CHECK(r[0].op == "matmul_gelu_forward");
  CHECK(r[1].op == "residual_layernorm_forward");
  CHECK(r[2].op == "unscale_check_norm");
  for (Tensor t : {x, w, b, pre, out, res, mean, rstd}) pb.free(t);
}

TEST_CASE("profiling backend: not recording, nothing is recorded and the marks stay empty") {
  auto inner = make_cpu_backend();
  ProfilingBackend pb(*inner);
  Tensor x = pb.alloc(DType::F32, 16);
  pb.zero(x);
  std::vector<double> t;
  CHECK(pb.take_records(&t).empty());
  CHECK(t.empty());
  pb.free(x);
}
