// attention_cudnn.cu: causal self-attention through cuDNN's fused flash attention (SDPA),
// forward and backward, with the contract of attention_forward_lse / attention_backward_lse
// (launch.h): q, k, v are read in place from qkv (B, T, 3, NH, hs) through strides, out is
// (B, T, NH, hs), lse (B, NH, T) fp32 is cuDNN's softmax statistics (the natural-log logsumexp
// of each row's scaled causal scores, as the CPU's lse twin keeps it), and the backward writes
// dq, dk, dv in place into dqkv's rows.
//
// cuDNN is optional twice over. At build time the Makefile defines TG_CUDNN only where the
// cudnn-frontend headers (1.32.0, fetched with their sha256 by scripts/gpu/gpu_deps.sh) are
// found; without it this file only says so. At run time libcudnn.so.9 is opened with dlopen
// (the frontend built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING calls cuDNN through the
// handle defined below), so the CUDA library never links it and a machine without it still
// runs every other path. Search order: cuda.cudnn_lib when set (only that file), else the
// loader's own search (LD_LIBRARY_PATH, the library's rpath: the toolkit's lib folders), else
// a pip wheel's copy (nvidia-cudnn-cu13, which PyTorch brings: site-packages/nvidia/cudnn/lib
// under a virtual environment, conda, ~/.local or /usr/local).
//
// Graphs are built once per (B, T, NH, hs, type, stats) forward and (B, T, NH, hs, type)
// backward (building is slow, executing is not) and kept with the backend's handle; the run's
// own shape is built at start-up (cudnn_build_graphs), before the model sizes its activations
// for lse, so that a graph cuDNN refuses is found while another path can still be taken; a
// forward-only shape after it (sampling's) is built first too, and the backend runs its
// forward on the cuBLAS path where cuDNN refuses it (backend.cu's attention_forward_lse). The
// workspace is the largest any graph asks for, in the backend's kScratchCudnn slot (counted in
// its bytes in use). The backward runs cuDNN's deterministic algorithm: a resumed run
// repeats its steps bit for bit only if every backward does.
#include "launch.h"

#ifdef TG_CUDNN
#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <glob.h>
#include <link.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

// The frontend reaches every cuDNN function through this handle (cudnn_frontend_shim.h).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace tg::gpu {

#ifndef TG_CUDNN

CudnnProbe cudnn_probe(const std::string&) {
  CudnnProbe p;
  p.detail =
      "this build has no cuDNN: cudnn_frontend.h was not found when it was compiled "
      "(scripts/gpu/gpu_deps.sh fetches it into .deps/include; then rebuild with CUDA=1)";
  return p;
}

// Never reached: the backend runs cuDNN only when cudnn_probe says it is built in.
void attention_forward_cudnn(Ctx&, DType, void*, float*, const void*, int, int, int, int) {
  throw Error("cuda.attention=cudnn: this build has no cuDNN");
}
void attention_backward_cudnn(Ctx&, DType, void*, const void*, const void*, const void*,
                              const float*, int, int, int, int) {
  throw Error("cuda.attention=cudnn: this build has no cuDNN");
}
std::string cudnn_validate_graphs(int, int, int, int, DType, int) {
  return "this build has no cuDNN";
}
std::string cudnn_build_graphs(Ctx&, DType, int, int, int, int, bool) {
  return "this build has no cuDNN";
}

#else

namespace fe = cudnn_frontend;

namespace {

// ---- loading libcudnn ----

// The pip wheels' copies, newest Python first within each root (glob sorts).
std::vector<std::string> wheel_candidates() {
  std::vector<std::string> roots;
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(env)) roots.push_back(v);
  if (const char* home = std::getenv("HOME")) roots.push_back(std::string(home) + "/.local");
  roots.push_back("/usr/local");
  roots.push_back("/usr");
  std::vector<std::string> found;
  for (const std::string& r : roots)
    for (const char* sp : {"site-packages", "dist-packages"}) {
      const std::string pattern = r + "/lib/python3*/" + sp + "/nvidia/cudnn/lib/libcudnn.so.9";
      glob_t g{};
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = g.gl_pathc; i-- > 0;) found.push_back(g.gl_pathv[i]);
      globfree(&g);
    }
  return found;
}

// The file a dlopen handle came from.
std::string loaded_path(void* h, const std::string& fallback) {
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) return lm->l_name;
  return fallback;
}

// Opens libcudnn (see the file's comment for the search) and names it, or says why not.
CudnnProbe load_cudnn(const std::string& lib) {
  CudnnProbe p;
  p.built_in = true;
  std::vector<std::string> names;
  if (!lib.empty()) {
    names.push_back(lib);
  } else {
    names.push_back("libcudnn.so.9");
    for (const std::string& w : wheel_candidates()) names.push_back(w);
  }
  void* h = nullptr;
  std::string tried, name;
  for (const std::string& n : names) {
    if ((h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      name = n;
      break;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(e ? e : n.c_str());
  }
  if (!h) {
    p.detail =
        strf("libcudnn not found (%s%s)", lib.empty() ? "" : "cuda.cudnn_lib: ", tried.c_str());
    return p;
  }
  using GetVersion = size_t (*)();
  auto version = reinterpret_cast<GetVersion>(dlsym(h, "cudnnGetVersion"));
  if (!version) {
    p.detail = strf("%s has no cudnnGetVersion: not a cuDNN library", name.c_str());
    return p;
  }
  const size_t v = version();  // cuDNN 9: major * 10000 + minor * 100 + patch
  if (v < 90000) {
    p.detail = strf("%s is cuDNN %zu.%zu, the frontend's SDPA needs 9 or newer", name.c_str(),
                    v / 1000, v / 100 % 10);
    return p;
  }
  fe::cudnn_dlhandle = h;
  p.loaded = true;
  p.detail = strf("libcudnn %zu.%zu.%zu from %s, cudnn-frontend %d.%d.%d", v / 10000, v / 100 % 100,
                  v % 100, loaded_path(h, name).c_str(), CUDNN_FRONTEND_MAJOR_VERSION,
                  CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
  return p;
}

// ---- graphs ----

void fe_check(fe::error_object e, const char* what) {
  if (!e.is_good()) throw Error(strf("cuDNN attention: %s: %s", what, e.get_message().c_str()));
}

void cudnn_check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw Error(strf("cuDNN attention: %s: %s", what, fe::detail::get_error_string(s)));
}

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// The dimensions of one call; every tensor is viewed as (B, NH, T, hs).
struct Dims {
  int64_t B, T, NH, hs;
  // q, k, v and their gradients: rows of 3 NH hs in qkv's (B, T, 3, NH, hs) layout.
  std::vector<int64_t> qkv_strides() const { return {T * 3 * NH * hs, hs, 3 * NH * hs, 1}; }
  // out and its gradient: (B, T, NH, hs).
  std::vector<int64_t> out_strides() const { return {T * NH * hs, hs, NH * hs, 1}; }
  std::vector<int64_t> dims() const { return {B, NH, T, hs}; }
};

using GraphPtr = std::shared_ptr<fe::graph::Graph>;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

fe::DataType_t fe_type(DType t) {
  return t == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// sm: the compute capability to plan for (0: the device's). Set before the nodes are added,
// which copy the graph's context.
GraphPtr new_graph(DType t, int sm) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(t))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  if (sm > 0) g->set_sm_version(sm);
  return g;
}

TensorPtr input(fe::graph::Graph& g, const char* name, Uid uid, std::vector<int64_t> dims,
                std::vector<int64_t> strides) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dims))
                      .set_stride(std::move(strides)));
}

// The lse tensor (B, NH, T, 1) fp32, contiguous: the model's lse(B, NH, T).
std::vector<int64_t> stats_dims(const Dims& d) { return {d.B, d.NH, d.T, 1}; }
std::vector<int64_t> stats_strides(const Dims& d) { return {d.NH * d.T, d.T, 1, 1}; }

}  // namespace

// The backend's cuDNN state (Ctx::cudnn): one handle, the graphs built so far.
struct CudnnAttention {
  cudnnHandle_t handle = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool>, GraphPtr> forward;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int>, GraphPtr> backward;
  CudnnAttention() { cudnn_check(fe::detail::create_handle(&handle), "cudnnCreate"); }
  ~CudnnAttention() {
    if (handle) fe::detail::destroy_handle(handle);
  }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;
};

namespace {

// Validates and builds g for this device (the slow part: once per key).
void build(fe::graph::Graph& g, cudnnHandle_t h) {
  fe_check(g.validate(), "the graph is not valid");
  fe_check(g.build_operation_graph(h), "build_operation_graph");
  fe_check(g.create_execution_plans({fe::HeurMode_t::A}), "no execution plan");
  fe_check(g.check_support(), "not supported on this GPU");
  fe_check(g.build_plans(h), "build_plans");
}

// The forward graph of one shape, not yet built: q, k, v in, out and (with stats) lse out.
GraphPtr make_forward_graph(const Dims& d, DType t, bool stats, int sm) {
  GraphPtr g = new_graph(t, sm);
  TensorPtr q = input(*g, "q", kQ, d.dims(), d.qkv_strides());
  TensorPtr k = input(*g, "k", kK, d.dims(), d.qkv_strides());
  TensorPtr v = input(*g, "v", kV, d.dims(), d.qkv_strides());
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("causal_attention")
                  .set_generate_stats(stats)
                  .set_causal_mask(true)
                  .set_attn_scale(1.f / std::sqrt(float(d.hs)));  // the CPU twin's scale
  auto [o, lse] = g->sdpa(q, k, v, opts);
  o->set_output(true).set_uid(kO).set_dim(d.dims()).set_stride(d.out_strides());
  if (stats)
    lse->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims(d))
        .set_stride(stats_strides(d));
  return g;
}

GraphPtr forward_graph(CudnnAttention& s, const Dims& d, DType t, bool stats) {
  const auto key = std::make_tuple(d.B, d.T, d.NH, d.hs, int(t), stats);
  auto it = s.forward.find(key);
  if (it != s.forward.end()) return it->second;
  GraphPtr g = make_forward_graph(d, t, stats, 0);
  build(*g, s.handle);
  s.forward.emplace(key, g);
  return g;
}

// The backward graph of one shape, not yet built: q, k, v, out, dout, lse in; dq, dk, dv out.
GraphPtr make_backward_graph(const Dims& d, DType t, int sm) {
  GraphPtr g = new_graph(t, sm);
  TensorPtr q = input(*g, "q", kQ, d.dims(), d.qkv_strides());
  TensorPtr k = input(*g, "k", kK, d.dims(), d.qkv_strides());
  TensorPtr v = input(*g, "v", kV, d.dims(), d.qkv_strides());
  TensorPtr o = input(*g, "o", kO, d.dims(), d.out_strides());
  TensorPtr dout = input(*g, "dout", kDO, d.dims(), d.out_strides());
  TensorPtr lse = input(*g, "lse", kStats, stats_dims(d), stats_strides(d));
  lse->set_data_type(fe::DataType_t::FLOAT);
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("causal_attention_backward")
                  .set_causal_mask(true)
                  .set_deterministic_algorithm(true)  // bit-exact resume needs it
                  .set_attn_scale(1.f / std::sqrt(float(d.hs)));
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, lse, opts);
  dq->set_output(true).set_uid(kDQ).set_dim(d.dims()).set_stride(d.qkv_strides());
  dk->set_output(true).set_uid(kDK).set_dim(d.dims()).set_stride(d.qkv_strides());
  dv->set_output(true).set_uid(kDV).set_dim(d.dims()).set_stride(d.qkv_strides());
  return g;
}

GraphPtr backward_graph(CudnnAttention& s, const Dims& d, DType t) {
  const auto key = std::make_tuple(d.B, d.T, d.NH, d.hs, int(t));
  auto it = s.backward.find(key);
  if (it != s.backward.end()) return it->second;
  GraphPtr g = make_backward_graph(d, t, 0);
  build(*g, s.handle);
  s.backward.emplace(key, g);
  return g;
}

// The backend's cuDNN state, made on first use, its handle on c's stream.
CudnnAttention& state(Ctx& c) {
  if (!c.cudnn) c.cudnn = std::make_shared<CudnnAttention>();
  cudnn_check(fe::detail::set_stream(c.cudnn->handle, c.stream), "cudnnSetStream");
  return *c.cudnn;
}

// g's workspace from the scratch slot (grown to the largest graph's; kept).
void* workspace(Ctx& c, const fe::graph::Graph& g) {
  int64_t bytes = 0;
  fe_check(g.get_workspace_size(bytes), "get_workspace_size");
  return bytes > 0 ? c.scratch(kScratchCudnn, size_t(bytes)) : nullptr;
}

Dims dims_of(int B, int T, int C, int NH) { return {B, T, NH, C / NH}; }

void need_16bit(DType t, const char* op) {
  if (t != DType::BF16 && t != DType::F16)
    throw Error(
        strf("%s: cuDNN's fused attention computes in bf16 or fp16, not %s", op, dtype_name(t)));
}

// The element `off` elements into p, whose elements are of type t.
void* at(const void* p, DType t, int64_t off) {
  return const_cast<char*>(static_cast<const char*>(p)) + off * int64_t(dtype_size(t));
}

}  // namespace

std::string cudnn_validate_graphs(int B, int T, int C, int NH, DType t, int sm) {
  if (!cudnn_probe("").loaded) return "libcudnn not loaded";
  const Dims d = dims_of(B, T, C, NH);
  for (int i = 0; i < 3; i++) {
    // The capability given instead of asked of the device, so that no GPU is needed.
    GraphPtr g = i == 2 ? make_backward_graph(d, t, sm) : make_forward_graph(d, t, i == 1, sm);
    const fe::error_object e = g->validate();
    if (!e.is_good()) return strf("%s graph: %s", i == 2 ? "backward" : "forward", e.err_msg.c_str());
  }
  return "";
}

std::string cudnn_build_graphs(Ctx& c, DType t, int B, int T, int C, int NH, bool backward) {
  const Dims d = dims_of(B, T, C, NH);
  const char* which = "handle";
  try {
    CudnnAttention& s = state(c);
    which = "forward graph";
    forward_graph(s, d, t, true);
    which = "backward graph";
    if (backward) backward_graph(s, d, t);
  } catch (const std::exception& e) {  // the frontend's own errors are runtime_errors
    return strf("%s: %s", which, e.what());
  }
  return "";
}

CudnnProbe cudnn_probe(const std::string& lib) {
  static std::mutex mu;
  static bool done = false;
  static CudnnProbe probe;
  std::lock_guard<std::mutex> lock(mu);
  if (!done) {
    probe = load_cudnn(lib);
    done = true;
  }
  return probe;
}

void attention_forward_cudnn(Ctx& c, DType t, void* out, float* lse, const void* qkv, int B, int T,
                             int C, int NH) {
  need_16bit(t, "attention_forward_cudnn");
  const Dims d = dims_of(B, T, C, NH);
  CudnnAttention& s = state(c);
  GraphPtr g = forward_graph(s, d, t, lse != nullptr);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, at(qkv, t, 0)}, {kK, at(qkv, t, C)}, {kV, at(qkv, t, 2 * int64_t(C))}, {kO, out}};
  if (lse) pack[kStats] = lse;
  fe_check(g->execute(s.handle, pack, workspace(c, *g)), "forward");
  TG_LAUNCH_CHECK();
}

void attention_backward_cudnn(Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse, int B, int T, int C, int NH) {
  need_16bit(t, "attention_backward_cudnn");
  const Dims d = dims_of(B, T, C, NH);
  CudnnAttention& s = state(c);
  GraphPtr g = backward_graph(s, d, t);
  std::unordered_map<int64_t, void*> pack = {{kQ, at(qkv, t, 0)},
                                             {kK, at(qkv, t, C)},
                                             {kV, at(qkv, t, 2 * int64_t(C))},
                                             {kO, const_cast<void*>(out)},
                                             {kDO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kDQ, dqkv},
                                             {kDK, at(dqkv, t, C)},
                                             {kDV, at(dqkv, t, 2 * int64_t(C))}};
  fe_check(g->execute(s.handle, pack, workspace(c, *g)), "backward");
  TG_LAUNCH_CHECK();
}

#endif  // TG_CUDNN

}  // namespace tg::gpu
