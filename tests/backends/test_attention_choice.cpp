// cuda.attention's choice of path (src/backends/attention_choice.h), checked on the CPU for
// every combination of what a build and a machine offer (cuDNN built in or not, libcudnn found
// or not, compute type, head size, a graph cuDNN refuses at the run's shape); an old config's
// flash read as cudnn and fused as cublas; the CPU backend's twin of each value; the ranks'
// vote (agree_attention); and the CUDA scratch plan of the cuDNN path
// (src/precision/cuda_scratch.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "src/backends/attention_choice.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/precision/cuda_scratch.h"

using namespace tg;

namespace {

CudnnProbe probe(bool built_in, bool loaded) {
  CudnnProbe p;
  p.built_in = built_in;
  p.loaded = loaded;
  p.detail = !built_in ? "this build has no cuDNN"
             : loaded  ? "libcudnn 9.19.0 from /x/libcudnn.so.9"
                       : "libcudnn not found (libcudnn.so.9: cannot open)";
  return p;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// cuda.attention's value named `name`.
AttentionRequest req(const char* name) {
  AttentionRequest r = AttentionRequest::Auto;
  REQUIRE(parse_enum(name, &r));
  return r;
}

}  // namespace

// cuDNN's graphs at the run's shape: both build.
static std::string graphs_build() { return ""; }

TEST_CASE("attention choice: cudnn and auto follow the build, the library, the type, the head") {
  const CudnnProbe ok = probe(true, true), none = probe(false, false), lost = probe(true, false);
  SUBCASE("cuDNN available, bf16 or fp16, head size 64: both run cuDNN and keep lse") {
    for (DType t : {DType::BF16, DType::F16})
      for (const char* key : {"cudnn", "auto"}) {
        const AttentionChoice c = choose_attention(req(key), ok, t, 64, graphs_build);
        CHECK(c.path == AttentionPath::Cudnn);
        CHECK(c.lse);
        CHECK(c.error.empty());
        CHECK(has(c.reason, "libcudnn 9.19.0"));
        CHECK(has(c.reason, std::string("cuda.attention=") + key));
      }
  }
  SUBCASE("not built in, or not found: cudnn is an error naming the key, auto runs cublas") {
    for (const CudnnProbe& p : {none, lost}) {
      const AttentionChoice c = choose_attention(req("cudnn"), p, DType::BF16, 64, graphs_build);
      CHECK(has(c.error, "cuda.attention=cudnn cannot run"));
      CHECK(has(c.error, p.detail));
      const AttentionChoice a = choose_attention(req("auto"), p, DType::BF16, 64, graphs_build);
      CHECK(a.path == AttentionPath::Cublas);
      CHECK_FALSE(a.lse);
      CHECK(a.error.empty());
      CHECK(has(a.reason, p.detail));
    }
  }
  SUBCASE("fp32 (and fp64): cuDNN has no fp32 SDPA") {
    for (DType t : {DType::F32, DType::F64}) {
      const AttentionChoice c = choose_attention(req("cudnn"), ok, t, 64, graphs_build);
      CHECK(has(c.error, "bf16 or fp16"));
      CHECK(has(c.error, dtype_name(t)));
      const AttentionChoice a = choose_attention(req("auto"), ok, t, 64, graphs_build);
      CHECK(a.path == AttentionPath::Cublas);
      CHECK(has(a.reason, "bf16 or fp16"));
    }
  }
  SUBCASE("head sizes: multiples of 8 up to 128") {
    for (int hs : {8, 16, 24, 64, 72, 128}) {
      INFO(hs);
      CHECK(choose_attention(req("auto"), ok, DType::BF16, hs, graphs_build).path ==
            AttentionPath::Cudnn);
    }
    for (int hs : {4, 12, 100, 136, 256}) {
      INFO(hs);
      const AttentionChoice a = choose_attention(req("auto"), ok, DType::BF16, hs, graphs_build);
      CHECK(a.path == AttentionPath::Cublas);
      CHECK(has(a.reason, std::to_string(hs)));
      CHECK(has(choose_attention(req("cudnn"), ok, DType::BF16, hs, graphs_build).error,
                "head sizes"));
    }
  }
}

TEST_CASE("attention choice: a graph cuDNN refuses at the run's shape: auto takes cublas") {
  const CudnnProbe ok = probe(true, true);
  for (const char* graph : {"forward", "backward"}) {
    INFO(graph);
    const std::string why = std::string("cuDNN at B 8 x T 1024, 12 heads of 64, bf16: ") + graph +
                            " graph: not supported on this GPU: no engine";
    int asked = 0;
    const CudnnGraphCheck refuse = [&] {
      asked++;
      return why;
    };
    // auto: the materialised path, decided now, the reason on the start-up line; not an error.
    const AttentionChoice a = choose_attention(req("auto"), ok, DType::BF16, 64, refuse);
    CHECK(asked == 1);
    CHECK(a.path == AttentionPath::Cublas);
    CHECK_FALSE(a.lse);
    CHECK(a.error.empty());
    CHECK(has(a.reason, "cuda.attention=auto"));
    CHECK(has(a.reason, why));
    CHECK_NOTHROW(require_runnable(a));
    // cudnn by name: an error naming the key and the cause, the machine's (exit 1), not usage.
    const AttentionChoice c = choose_attention(req("cudnn"), ok, DType::BF16, 64, refuse);
    CHECK(asked == 2);
    CHECK(has(c.error, "cuda.attention=cudnn cannot run"));
    CHECK(has(c.error, why));
    CHECK(has(c.error, "cuda.attention=auto or cublas"));
    CHECK_FALSE(c.usage_error);
    bool usage = false, error = false;
    try {
      require_runnable(c);
    } catch (const UsageError&) {
      usage = true;
    } catch (const Error& e) {
      error = has(e.what(), why);
    }
    CHECK_FALSE(usage);
    CHECK(error);
  }
  // The graphs are asked only where everything else allows cuDNN (building them is slow).
  int asked = 0;
  const CudnnGraphCheck count = [&] {
    asked++;
    return std::string();
  };
  choose_attention(req("auto"), ok, DType::F32, 64, count);
  choose_attention(req("auto"), probe(true, false), DType::BF16, 64, count);
  choose_attention(req("cublas"), ok, DType::BF16, 64, count);
  choose_attention(req("fused"), ok, DType::BF16, 64, count);
  CHECK(asked == 0);
  // A usage error stays one (exit 2): no cuDNN, or a type it lacks.
  const AttentionChoice f = choose_attention(req("cudnn"), ok, DType::F32, 64, count);
  CHECK(f.usage_error);
  CHECK_THROWS_AS(require_runnable(f), UsageError);
}

TEST_CASE("attention choice: cublas is as before whatever cuDNN is; an old config's fused too") {
  const CudnnProbe ok = probe(true, true);
  for (DType t : {DType::F32, DType::BF16})
    for (const char* key : {"cublas", "fused"}) {
      const AttentionChoice c = choose_attention(req(key), ok, t, 64, graphs_build);
      CHECK(c.path == AttentionPath::Cublas);
      CHECK_FALSE(c.lse);
      CHECK(c.error.empty());
    }
  CHECK(has(choose_attention(req("fused"), ok, DType::BF16, 64, graphs_build).reason,
            "cuda.attention=fused (read as cublas)"));
  CHECK(std::string(attention_path_name(AttentionPath::Cudnn)) == "cudnn");
}

TEST_CASE("attention choice: an old config's fused is read as cublas, with a notice") {
  // The single-pass forward kept att (B, NH, T, T) and ran cublas's backward, held to the
  // CPU's reference: cublas is the path with its layout and its twin.
  CHECK(effective_attention(req("fused")) == AttentionRequest::Cublas);
  const std::string notice = attention_request_notice(req("fused"));
  CHECK(has(notice, "notice: cuda.attention=fused"));
  CHECK(has(notice, "read as cublas"));
  CHECK(notice.find('\n') == std::string::npos);  // one line
  CHECK(planned_attention(req("fused"), DType::BF16, 64) == AttentionPath::Cublas);
  CHECK(
      plan_cuda_scratch(gpt_config(2, 4, 256, 1000, 256), DType::BF16, 4, 256, req("fused"), false)
          .total() ==
      plan_cuda_scratch(gpt_config(2, 4, 256, 1000, 256), DType::BF16, 4, 256, req("cublas"), false)
          .total());
}

TEST_CASE("attention choice: an old config's flash is read as cudnn, with a notice") {
  const CudnnProbe ok = probe(true, true), none = probe(false, false);
  CHECK(effective_attention(req("flash")) == AttentionRequest::Cudnn);
  for (const char* key : {"auto", "cublas", "cudnn"}) {
    CHECK(effective_attention(req(key)) == req(key));
    CHECK(attention_request_notice(req(key)).empty());
  }
  const std::string notice = attention_request_notice(req("flash"));
  CHECK(has(notice, "cuda.attention=flash"));
  CHECK(has(notice, "read as cudnn"));
  CHECK(notice.find('\n') == std::string::npos);  // one line
  // On a GPU: cuDNN's path, keeping lse as the flash kernels did; where cuDNN cannot run, the
  // error cudnn gives, naming flash as the config spells it.
  const AttentionChoice c = choose_attention(req("flash"), ok, DType::BF16, 64, graphs_build);
  CHECK(c.path == AttentionPath::Cudnn);
  CHECK(c.lse);
  CHECK(has(c.reason, "cuda.attention=flash (read as cudnn)"));
  const AttentionChoice n = choose_attention(req("flash"), none, DType::BF16, 64, graphs_build);
  CHECK(has(n.error, "cuda.attention=flash (read as cudnn) cannot run"));
  // Planned as cudnn too.
  CHECK(planned_attention(req("flash"), DType::BF16, 64) == AttentionPath::Cudnn);
  CHECK(planned_attention(req("flash"), DType::F32, 64) == AttentionPath::Cublas);
}

TEST_CASE(
    "attention choice: the CPU runs the lse twin for cudnn (and flash), its reference for auto") {
  for (const char* key : {"flash", "cudnn"}) {
    BackendOptions o;
    o.attention = req(key);
    auto be = make_cpu_backend(o);
    // Any type: the twin has no cuDNN limits (fp32 included), so a CPU run never refuses.
    for (DType t : {DType::F32, DType::BF16, DType::F64}) {
      const AttentionChoice c = be->attention_choice(64, t);
      CHECK(c.path == AttentionPath::CpuLse);
      CHECK(be->attention_saves_lse(64, t));
      CHECK(has(c.reason, std::string("cuda.attention=") + key));
    }
  }
  for (const char* key : {"auto", "cublas", "fused"}) {
    BackendOptions o;
    o.attention = req(key);
    auto be = make_cpu_backend(o);
    const AttentionChoice c = be->attention_choice(64, DType::BF16);
    CHECK_FALSE(c.lse);
    CHECK(c.reason.empty());  // no start-up line: the CPU's reference, as before auto existed
  }
}

TEST_CASE("cuda scratch: cudnn plans lse and cuDNN's workspace, auto plans cublas") {
  const GPTConfig c = gpt_config(2, 4, 256, 1000, 256);  // head size 64
  const int B = 4, T = 256, NH = 4, hs = 64;
  const CudaScratchPlan cudnn = plan_cuda_scratch(c, DType::BF16, B, T, req("cudnn"), false);
  CHECK(cudnn.cudnn == size_t(B) * NH * T * (hs + 1) * 4);
  for (int s = kCudaQ; s <= kCudaDV; s++) CHECK(cudnn.slot[s] == 0);
  CHECK(cudnn.attention() == cudnn.cudnn);
  const CudaScratchPlan cublas = plan_cuda_scratch(c, DType::BF16, B, T, req("cublas"), false);
  CHECK(cublas.cudnn == 0);
  CHECK(cublas.slot[kCudaS] == size_t(B) * NH * T * T * 2);  // bf16 scores, as attention.cu
  CHECK(plan_cuda_scratch(c, DType::F32, B, T, req("cublas"), false).slot[kCudaS] ==
        size_t(B) * NH * T * T * 4);
  CHECK(cudnn.total() < cublas.total());
  const CudaScratchPlan autop = plan_cuda_scratch(c, DType::BF16, B, T, req("auto"), false);
  CHECK(autop.total() == cublas.total());
  // fp32 cannot run cuDNN: its plan is cublas's (and the run stops; the start-up says why).
  CHECK(plan_cuda_scratch(c, DType::F32, B, T, req("cudnn"), false).total() ==
        plan_cuda_scratch(c, DType::F32, B, T, req("cublas"), false).total());
  CHECK(planned_attention(req("cudnn"), DType::F16, hs) == AttentionPath::Cudnn);
  CHECK(planned_attention(req("cudnn"), DType::F32, hs) == AttentionPath::Cublas);
  CHECK(planned_attention(req("auto"), DType::BF16, hs) == AttentionPath::Cublas);
  CHECK(plan_cuda_scratch(c, DType::BF16, B, T, req("flash"), false).total() == cudnn.total());
}

namespace {

AttentionChoice settled(AttentionPath p, const std::string& reason) {
  AttentionChoice c;
  c.path = p;
  c.lse = p != AttentionPath::Cublas;
  c.reason = reason;
  return c;
}

}  // namespace

TEST_CASE("attention choice: the ranks agree on one path, cublas where a rank's cuDNN refused") {
  const AttentionChoice cudnn = settled(AttentionPath::Cudnn, "cuda.attention=auto: libcudnn 9");
  const AttentionChoice refused = settled(
      AttentionPath::Cublas, "cuda.attention=auto: cuDNN at B 4 x T 64: forward graph: refused");
  // Agreeing ranks keep their own choice.
  for (int r = 0; r < 2; r++) {
    CHECK(agree_attention({cudnn, cudnn}, r).reason == cudnn.reason);
    CHECK(agree_attention({refused, refused}, r).path == AttentionPath::Cublas);
  }
  // One rank refused: every rank takes cublas (no lse), the reason naming that rank and why,
  // the same on every rank whichever refused.
  for (int refusing = 0; refusing < 3; refusing++) {
    std::vector<AttentionChoice> ranks(3, cudnn);
    ranks[size_t(refusing)] = refused;
    for (int r = 0; r < 3; r++) {
      CAPTURE(refusing);
      CAPTURE(r);
      const AttentionChoice a = agree_attention(ranks, r);
      CHECK(a.path == AttentionPath::Cublas);
      CHECK_FALSE(a.lse);
      CHECK(a.error.empty());
      CHECK(has(a.reason, "rank " + std::to_string(refusing) + "'s " + refused.reason));
      CHECK(has(a.reason, "every rank takes cublas"));
    }
  }
  // A rank whose path cannot run stops every rank, naming it; the configuration's error (the
  // same on every rank) as it is.
  AttentionChoice failed = cudnn;
  failed.error = "cuda.attention=cudnn cannot run: cuDNN at B 4 x T 64: backward graph: refused";
  failed.usage_error = false;
  const AttentionChoice e = agree_attention({cudnn, failed}, 0);
  CHECK(e.error == "rank 1: " + failed.error);
  CHECK_THROWS_AS(require_runnable(e), Error);
  CHECK(agree_attention({failed, failed}, 1).error == failed.error);
  // Paths only auto can mix: any other mix is a bug, refused rather than run.
  CHECK_THROWS_AS(agree_attention({settled(AttentionPath::CpuLse, ""), refused}, 0), Error);
  // ... wherever the third path stands, also behind two ranks that could agree.
  for (int odd = 0; odd < 3; odd++) {
    std::vector<AttentionChoice> ranks = {cudnn, refused, cudnn};
    ranks[size_t(odd)] = settled(AttentionPath::CpuLse, "");
    CAPTURE(odd);
    const std::string named = "lse on rank " + std::to_string(odd);
    CHECK_THROWS_WITH_AS(agree_attention(ranks, 0), doctest::Contains(named.c_str()), Error);
  }
}
