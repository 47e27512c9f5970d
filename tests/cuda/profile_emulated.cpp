// profile_emulated.cpp: the per-op profile on the CUDA backend under the emulation: its time
// marks are CUDA events on the backend's stream (read after one wait; the emulation has no
// clock, so every interval is 0 ms), every GEMM names the cuBLASLt algorithm it ran, and a
// profiled step computes what an unprofiled one does.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/profiling_backend.h"
#include "src/model/model.h"

namespace {

constexpr int kB = 2, kT = 8, kVocab = 64;

// One forward and backward of a tiny bf16 model on `be`; returns the loss.
double one_step(tg::Backend& be) {
  tg::GPT m(tg::gpt_config(1, 2, 32, kVocab, 16), be, tg::DType::BF16, tg::DataParallel{});
  m.init_random(3);
  const std::vector<int32_t> in = tgc::random_tokens(kB * kT, kVocab, 1),
                             tgt = tgc::random_tokens(kB * kT, kVocab, 2);
  m.zero_grad();
  const double loss = m.forward(in.data(), tgt.data(), kB, kT, 1.0f);
  m.backward();
  return loss;
}

}  // namespace

TEST_CASE("emulated: the per-op profile on the CUDA backend: event marks, GEMM algorithms") {
  auto plain = tg::make_cuda_backend();
  auto inner = tg::make_cuda_backend();
  tg::ProfilingBackend pb(*inner);
  pb.set_recording(true);
  const size_t m0 = pb.step_mark();
  const double loss = one_step(pb);
  const size_t m1 = pb.step_mark();
  std::vector<double> t;
  const std::vector<tg::OpRecord> recs = pb.take_records(&t);
  CHECK(loss == one_step(*plain));
  REQUIRE(m1 < t.size());
  CHECK(m0 == 0);
  REQUIRE(!recs.empty());
  size_t gemms = 0;
  for (const tg::OpRecord& r : recs) {
    INFO(r.op);
    CHECK(r.mark_begin < r.mark_end);
    CHECK(r.mark_end < m1);
    CHECK(r.ms == 0.0);  // the emulation's events have no clock
    if (r.kind == tg::OpKind::Gemm) {
      gemms++;
      CHECK(r.gemm.rfind("lt algo 0 tile 0", 0) == 0);
    }
  }
  CHECK(gemms >= 8);  // 4 linears forward and backward, the lm_head both ways
  // The marks were cleared: the next profiled op starts again at mark 0.
  std::vector<double> t2;
  CHECK(pb.take_records(&t2).empty());
  CHECK(t2.empty());
}
