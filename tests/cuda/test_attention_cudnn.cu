// cuDNN's fused attention (src/backends/cuda/attention_cudnn.cu, cuda.attention=cudnn) against
// the CPU's lse twin: out and lse from the forward, dq, dk, dv from the backward, each within
// the 16-bit tolerance; the backward deterministic (the same bits twice); dqkv written whole
// (poisoned first). Skipped, with the reason, where the build has no cuDNN or libcudnn is not
// found (the emulated tests, CI, a GPU machine without the wheel). The start-up check
// (Backend::settle_attention) runs everywhere, the emulation included, against a stand-in cuDNN
// that refuses one graph (TG_TEST_CUDNN_REFUSE), and so do the forward of a shape refused after
// start-up (sampling's, on the cuBLAS path) and the ranks' agreed path replacing a settled one.
#include <array>
#include <cmath>
#include <cstdlib>

#include "cuda_test_util.h"
#include "src/backends/cuda/launch.h"
#include "src/model/sample.h"

using namespace tgc;

namespace {

// Relative L2 error of one third (q, k or v) of (B*T, 3C) gradient rows.
double part_err(const std::vector<double>& g, const std::vector<double>& r, size_t rows, int C,
                int part) {
  double num = 0, den = 0;
  for (size_t row = 0; row < rows; row++)
    for (int i = 0; i < C; i++) {
      const double a = g[row * 3 * C + part * C + i], b = r[row * 3 * C + part * C + i];
      num += (a - b) * (a - b);
      den += b * b;
    }
  return std::sqrt(num / den);  // NaN (a forgotten element) fails the check
}

}  // namespace

TEST_CASE("cuda: cuDNN attention forward (out, lse) and backward (dq, dk, dv)") {
  TG_REQUIRE_GPU();
  tg::BackendOptions o;
  o.attention = tg::AttentionRequest::Cudnn;
  for (auto sh : {std::array<int, 4>{2, 40, 96, 3},  // head sizes 32, 64, 128, 64, 16
                  {1, 64, 128, 2},
                  {2, 33, 512, 4},
                  {1, 257, 256, 4},
                  {2, 24, 64, 4}}) {
    const int B = sh[0], T = sh[1], C = sh[2], NH = sh[3];
    for (DType t : {DType::BF16, DType::F16}) {
      INFO(name(t) << " B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
      Twin tw(o);
      const tg::AttentionChoice choice = tw.gpu->attention_choice(C / NH, t);
      if (!choice.error.empty()) {
        MESSAGE("cuDNN attention not checked: " << choice.error);
        return;
      }
      REQUIRE(choice.path == tg::AttentionPath::Cudnn);
      MESSAGE(choice.reason);
      const size_t btc = size_t(B) * T * C, bht = size_t(B) * NH * T;
      Pair qkv = tw.rand(t, 3 * btc, 71, 2.f);
      Pair out = tw.poisoned(t, btc), lse = tw.poisoned(DType::F32, bht);
      tw.cpu->attention_forward_lse(out.cpu, lse.cpu, qkv.cpu, B, T, C, NH);
      tw.gpu->attention_forward_lse(out.gpu, lse.gpu, qkv.gpu, B, T, C, NH);
      CHECK(tw.err(out) < tol(t));
      CHECK(tw.err(lse) < 1e-4);  // fp32 statistics of 16-bit scores, exp2 inside cuDNN
      Pair dout = tw.rand(t, btc, 72), dqkv = tw.poisoned(t, 3 * btc);
      tw.cpu->attention_backward_lse(dqkv.cpu, dout.cpu, qkv.cpu, out.cpu, lse.cpu, B, T, C, NH);
      tw.gpu->attention_backward_lse(dqkv.gpu, dout.gpu, qkv.gpu, out.gpu, lse.gpu, B, T, C, NH);
      const std::vector<double> gc = tw.get(*tw.cpu, dqkv.cpu), gg = tw.get(*tw.gpu, dqkv.gpu);
      for (int part = 0; part < 3; part++) {
        INFO("part "
             << "qkv"[part]);
        CHECK(part_err(gg, gc, size_t(B) * T, C, part) < tol(t));
      }
      // Deterministic (set_deterministic_algorithm): the backward again gives the same bits.
      Pair dqkv2 = tw.poisoned(t, 3 * btc);
      tw.gpu->attention_backward_lse(dqkv2.gpu, dout.gpu, qkv.gpu, out.gpu, lse.gpu, B, T, C, NH);
      CHECK(tw.get(*tw.gpu, dqkv2.gpu) == gg);
    }
  }
}

// No GPU needed: the frontend's validate() of the three graphs, told the compute capability,
// runs wherever libcudnn loads (this machine's toolkit, CI with cuDNN), so the graphs' shapes,
// strides and options are checked before any GPU run.
TEST_CASE("cuda: cuDNN's attention graphs validate for sm_80, sm_90 and sm_100 (no GPU needed)") {
  const tg::CudnnProbe p = tg::gpu::cudnn_probe("");
  if (!p.built_in || !p.loaded) {
    MESSAGE("cuDNN graphs not validated: " << p.detail);
    return;
  }
  MESSAGE(p.detail);
  for (auto sh : {std::array<int, 4>{8, 1024, 768, 12},  // GPT-2 124M
                  {2, 40, 96, 3},
                  {2, 24, 64, 4},
                  {1, 257, 256, 4},
                  {4, 64, 1024, 16}})
    for (DType t : {DType::BF16, DType::F16})
      for (int sm : {80, 90, 100}) {
        INFO(name(t) << " B=" << sh[0] << " T=" << sh[1] << " C=" << sh[2] << " NH=" << sh[3]
                     << " sm_" << sm);
        CHECK(tg::gpu::cudnn_validate_graphs(sh[0], sh[1], sh[2], sh[3], t, sm) == "");
      }
  // A head size cuDNN refuses (12: not a multiple of 8) is refused by validate too, so the
  // check above is not vacuous.
  CHECK(tg::gpu::cudnn_validate_graphs(2, 24, 48, 4, DType::BF16, 90).find("multiple of 8") !=
        std::string::npos);
}

TEST_CASE("cuda: cuDNN attention refuses fp32 by name; auto then runs cublas") {
  TG_REQUIRE_GPU();
  tg::BackendOptions o;
  o.attention = tg::AttentionRequest::Cudnn;
  Twin tw(o);
  const tg::AttentionChoice c = tw.gpu->attention_choice(64, DType::F32);
  CHECK(c.error.find("cuda.attention=cudnn cannot run") != std::string::npos);
  CHECK_THROWS_AS(tw.gpu->attention_saves_lse(64, DType::F32), tg::UsageError);
  o.attention = tg::AttentionRequest::Auto;
  Twin ta(o);
  const tg::AttentionChoice a = ta.gpu->attention_choice(64, DType::F32);
  CHECK(a.path == tg::AttentionPath::Cublas);
  CHECK_FALSE(a.lse);
  MESSAGE(a.reason);
}

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// TG_TEST_CUDNN_REFUSE=graph for one scope: the CUDA backend finds a loaded cuDNN that refuses
// that graph at start-up, as a GPU whose cuDNN has no engine for the shape would.
struct RefusingCudnn {
  explicit RefusingCudnn(const char* graph) { setenv("TG_TEST_CUDNN_REFUSE", graph, 1); }
  ~RefusingCudnn() { unsetenv("TG_TEST_CUDNN_REFUSE"); }
  RefusingCudnn(const RefusingCudnn&) = delete;
  RefusingCudnn& operator=(const RefusingCudnn&) = delete;
};

// What require_runnable throws for c: "usage: ..." for a UsageError, "error: ..." for an Error.
std::string thrown(const tg::AttentionChoice& c) {
  try {
    tg::require_runnable(c);
  } catch (const tg::UsageError& e) {
    return std::string("usage: ") + e.what();
  } catch (const tg::Error& e) {
    return std::string("error: ") + e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cuda: a graph cuDNN refuses at start-up: auto takes cublas and says why; cudnn stops") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 256, 1000, 64);  // head size 64
  const tg::AttentionShape s{4, 64, 4, 64, DType::BF16};
  for (const char* graph : {"forward", "backward"}) {
    INFO(graph);
    RefusingCudnn refuse(graph);
    tg::BackendOptions o;
    o.attention = tg::AttentionRequest::Auto;
    auto be = tg::make_cuda_backend(0, o);
    // Short of the graphs (nothing settled), cuDNN would be taken: the check is what decides.
    CHECK(be->attention_choice(64, DType::BF16).path == tg::AttentionPath::Cudnn);
    const tg::AttentionChoice a = be->settle_attention(s);
    CHECK(a.path == tg::AttentionPath::Cublas);
    CHECK_FALSE(a.lse);
    CHECK(a.error.empty());
    CHECK(has(a.reason, "cuda.attention=auto: cuDNN at B 4 x T 64, 4 heads of 64, bf16: " +
                            std::string(graph) + " graph: refused"));
    // Settled: the model sizes its activations for the materialised path.
    CHECK(be->attention_choice(64, DType::BF16).path == tg::AttentionPath::Cublas);
    {
      tg::GPT m(cfg, *be, DType::BF16);
      CHECK_FALSE(m.attention_lse());
    }
    // The lse ops are cuDNN's alone: asked on a backend settled on cublas, an error.
    Twin tw(o);
    tw.gpu->settle_attention(s);
    Pair qkv = tw.rand(DType::BF16, size_t(3) * 4 * 64 * 256, 73);
    Pair out = tw.poisoned(DType::BF16, size_t(4) * 64 * 256);
    Pair lse = tw.poisoned(DType::F32, size_t(4) * 4 * 64);
    CHECK_THROWS_WITH_AS(tw.gpu->attention_forward_lse(out.gpu, lse.gpu, qkv.gpu, 4, 64, 256, 4),
                         doctest::Contains("keeps lse only through cuDNN"), tg::Error);
    // cudnn by name: an error (exit 1) naming the key and the refused graph, before any model.
    o.attention = tg::AttentionRequest::Cudnn;
    auto bc = tg::make_cuda_backend(0, o);
    const std::string e = thrown(bc->settle_attention(s));
    CHECK(has(e, "error: cuda.attention=cudnn cannot run: cuDNN at B 4 x T 64"));
    CHECK(has(e, std::string(graph) + " graph: refused"));
    CHECK_THROWS_AS(tg::GPT(cfg, *bc, DType::BF16), tg::Error);
  }
}

TEST_CASE("cuda: a cuDNN call that fails mid-run stops the run with the reason, no path switch") {
  TG_REQUIRE_GPU();
  if (tg::gpu::cudnn_probe("").built_in) {
    MESSAGE("not checked here: this build has cuDNN (the GPU case above runs it)");
    return;
  }
  // Without cuDNN, cudnn's lse op reaches a cuDNN call that fails, as a graph failing after
  // the start-up check would (a shape start-up did not build).
  tg::BackendOptions o;
  o.attention = tg::AttentionRequest::Cudnn;
  Twin tw(o);
  const int B = 2, T = 24, C = 64, NH = 4;
  Pair qkv = tw.rand(DType::BF16, size_t(3) * B * T * C, 74);
  Pair out = tw.poisoned(DType::BF16, size_t(B) * T * C);
  Pair lse = tw.poisoned(DType::F32, size_t(B) * NH * T);
  std::string what;
  try {
    tw.gpu->attention_forward_lse(out.gpu, lse.gpu, qkv.gpu, B, T, C, NH);
  } catch (const tg::Error& e) {
    what = e.what();
  }
  CHECK(has(what,
            "cuda.attention=cudnn: cuDNN attention failed mid-run at B 2 x T 24, 4 heads "
            "of 16, bf16"));
  CHECK(has(what, "the run stops rather than change path"));
}

TEST_CASE("cuda: a shape cuDNN refuses after start-up (sampling's) runs its forward on cuBLAS") {
  TG_REQUIRE_GPU();
  RefusingCudnn refuse("sampling");  // start-up's graphs build; every later shape's is refused
  tg::BackendOptions o;
  o.attention = tg::AttentionRequest::Auto;
  Twin tw(o);
  const int C = 256, NH = 4;
  const tg::AttentionChoice a = tw.gpu->settle_attention({4, 64, NH, 64, DType::BF16});
  REQUIRE(a.path == tg::AttentionPath::Cudnn);
  CHECK(a.error.empty());
  for (int T : {1, 5, 24}) {  // sampling's B 1 x T t
    INFO("T " << T);
    const size_t btc = size_t(T) * C;
    Pair qkv = tw.rand(DType::BF16, 3 * btc, 80 + uint64_t(T));
    Pair out = tw.poisoned(DType::BF16, btc), ref = tw.poisoned(DType::BF16, btc);
    Pair lse = tw.poisoned(DType::F32, size_t(NH) * T);
    Pair att = tw.poisoned(DType::BF16, size_t(NH) * T * T);
    tw.gpu->attention_forward_lse(out.gpu, lse.gpu, qkv.gpu, 1, T, C, NH);
    tw.cpu->attention_forward(out.cpu, att.cpu, qkv.cpu, 1, T, C, NH);
    CHECK(tw.err(out) < tol(DType::BF16));
    // The cuBLAS path's own forward, bit for bit.
    tw.gpu->attention_forward(ref.gpu, att.gpu, qkv.gpu, 1, T, C, NH);
    CHECK(tw.get(*tw.gpu, out.gpu) == tw.get(*tw.gpu, ref.gpu));
    // No lse was kept: a backward at that shape is refused rather than run on garbage.
    Pair dout = tw.rand(DType::BF16, btc, 90), dqkv = tw.poisoned(DType::BF16, 3 * btc);
    CHECK_THROWS_WITH_AS(
        tw.gpu->attention_backward_lse(dqkv.gpu, dout.gpu, qkv.gpu, out.gpu, lse.gpu, 1, T, C, NH),
        doctest::Contains("kept no lse"), tg::Error);
  }
  // Sampling itself: a model keeping lse generates, greedily, the tokens a cublas model does.
  const tg::GPTConfig cfg = tg::gpt_config(2, NH, C, 1000, 64);
  tg::BackendOptions ob;
  ob.attention = tg::AttentionRequest::Cublas;
  auto bb = tg::make_cuda_backend(0, ob);
  tg::GPT mc(cfg, *tw.gpu, DType::BF16), mb(cfg, *bb, DType::BF16);
  CHECK(mc.attention_lse());
  CHECK_FALSE(mb.attention_lse());
  mc.init_random(3);
  mb.init_random(3);
  tg::Rng rc(1), rb(1);
  const std::vector<int32_t> gc = tg::generate(mc, {7, 8, 9}, 5, 0.0, 0, rc);
  CHECK(gc.size() == size_t(8));
  CHECK(gc == tg::generate(mb, {7, 8, 9}, 5, 0.0, 0, rb));
}

TEST_CASE("cuda: the ranks' agreed path replaces the one this rank settled") {
  TG_REQUIRE_GPU();
  RefusingCudnn refuse("sampling");  // start-up's graphs build: this rank settles cudnn
  tg::BackendOptions o;
  o.attention = tg::AttentionRequest::Auto;
  auto be = tg::make_cuda_backend(0, o);
  const tg::AttentionShape s{4, 64, 4, 64, DType::BF16};
  const tg::AttentionChoice mine = be->settle_attention(s);
  REQUIRE(mine.path == tg::AttentionPath::Cudnn);
  // Another rank's cuDNN refused its forward graph: the vote takes cublas on every rank.
  tg::AttentionChoice other;
  other.reason = "cuda.attention=auto: cuDNN at B 4 x T 64: forward graph: refused";
  const tg::AttentionChoice agreed = tg::agree_attention({mine, other}, 0);
  be->settle_agreed_attention(s, agreed);
  const tg::AttentionChoice c = be->attention_choice(64, DType::BF16);
  CHECK(c.path == tg::AttentionPath::Cublas);
  CHECK(has(c.reason, "rank 1's " + other.reason));
  tg::GPT m(tg::gpt_config(2, 4, 256, 1000, 64), *be, DType::BF16);
  CHECK_FALSE(m.attention_lse());
  // The CPU backend's path follows its config alone, the same on every rank: another is a bug.
  auto cpu = tg::make_cpu_backend(o);
  CHECK_THROWS_AS(cpu->settle_agreed_attention(s, mine), tg::Error);
}
