// cublaslt.cu: the cuBLASLt wrapper (cublaslt.h): the descriptors (per thread) and the
// heuristic's answer cached per GEMM configuration (the query costs tens of microseconds, the
// descriptors a few; a training step makes the same dozen GEMMs over and over).
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cublaslt.h"
#include "launch.h"

namespace tg::gpu {

namespace {

// Owns the cuBLASLt descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  TG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof v));
}

void set_batch(cublasLtMatrixLayout_t l, int count, long long stride) {
  const int32_t n = count;
  const int64_t s = stride;
  TG_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                   &s, sizeof s));
}

// The narrow types that take scale pointers (FP8, and FP4 with a block scale mode).
bool is_fp8(cudaDataType_t t) {
  return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2 || t == CUDA_R_4F_E2M1;
}

// The epilogue's kind and the types and leading dimension it reads (its pointers: set_pointers).
void set_epilogue(cublasLtMatmulDesc_t op, const LtGemm& g) {
  if (g.epilogue == LtEpilogue::kNone) return;
  const cublasLtEpilogue_t epi =
      g.epilogue == LtEpilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  set_attr(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(g.d_type));
  if (g.epilogue == LtEpilogue::kGeluAuxBias)
    set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(g.ldd));
}

// The pointers a descriptor carries (bias, GELU's pre-activation, FP8 descales): they change
// from call to call of one configuration, so a cached descriptor takes each call's.
void set_pointers(cublasLtMatmulDesc_t op, const LtGemm& g) {
  if (is_fp8(g.a_type)) {
    set_attr(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.a_scale);
    set_attr(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.b_scale);
  }
  if (g.epilogue != LtEpilogue::kNone) set_attr(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.epilogue == LtEpilogue::kGeluAuxBias)
    set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.gelu_aux);
}

void make_descs(LtDescs& d, const LtGemm& g) {
  TG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSA, g.transa ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSB, g.transb ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (g.device_scalars)
    set_attr(d.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
  if (is_fp8(g.a_type)) {
    if (g.a_scale_mode) set_attr(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, g.a_scale_mode);
    if (g.b_scale_mode) set_attr(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, g.b_scale_mode);
    set_attr(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(g.fast_accum ? 1 : 0));
  }
  set_epilogue(d.op, g);
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, g.a_type, g.transa ? g.k : g.m,
                                             g.transa ? g.m : g.k, g.lda));
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, g.b_type, g.transb ? g.n : g.k,
                                             g.transb ? g.k : g.n, g.ldb));
  TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.d, g.d_type, g.m, g.n, g.ldd));
  if (g.batch > 1) {
    set_batch(d.a, g.batch, g.stride_a);
    set_batch(d.b, g.batch, g.stride_b);
    set_batch(d.d, g.batch, g.stride_d);
  }
}

// Whether an algorithm sums split-K partials in fp32 or not at all: the in-place and
// output-type schemes would round partial sums to a 16-bit D, a rounding the CPU reference
// never does.
bool sums_in_fp32(const cublasLtMatmulAlgo_t& algo) {
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                           sizeof scheme, &written) != CUBLAS_STATUS_SUCCESS)
    return false;
  return scheme == CUBLASLT_REDUCTION_SCHEME_NONE ||
         scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

constexpr int kAsk = 8;  // algorithms asked of the heuristic per query

// The heuristic's algorithms for g that sum in fp32, best first (at most kAsk; none when
// it has none). Asked twice at most: first with the reduction-scheme mask that says so;
// then, when that finds nothing, without it, keeping the answers whose scheme qualifies (the
// second query does not depend on how the library reads a mask that cannot name "no
// reduction").
int ask_heuristic(const LtContext& c, LtDescs& d, const LtGemm& g, cublasLtMatmulAlgo_t* algos) {
  if (!d.pref) TG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  set_pref(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(c.workspace_bytes));
  // The heuristic assumes 256-byte aligned pointers unless told otherwise (a weight or bias
  // slice of a small model may be aligned to 16 bytes only).
  const uint32_t al_d = pointer_alignment(g.D);
  set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pointer_alignment(g.A));
  set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, pointer_alignment(g.B));
  set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_d);
  set_pref(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d);
  cublasLtMatmulHeuristicResult_t res[kAsk] = {};
  for (const bool masked : {true, false}) {
    set_pref(
        d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
        uint32_t(masked ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_MASK));
    int found = 0, kept = 0;
    if (cublasLtMatmulAlgoGetHeuristic(c.lt, d.op, d.a, d.b, d.d, d.d, d.pref, kAsk, res, &found) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    for (int i = 0; i < found; i++)
      if (res[i].state == CUBLAS_STATUS_SUCCESS && sums_in_fp32(res[i].algo))
        algos[kept++] = res[i].algo;
    if (kept > 0) return kept;
  }
  return 0;
}

using AlgoKey = std::array<int64_t, 27>;
// The heuristic's qualifying algorithms for one configuration, and the one that ran last
// (cublasLtMatmul may refuse an algorithm the heuristic offered: the next one is tried).
struct AlgoEntry {
  int count = 0, working = 0;
  cublasLtMatmulAlgo_t algos[kAsk] = {};
};

AlgoKey key_of(const LtContext& c, const LtGemm& g) {
  return {reinterpret_cast<int64_t>(c.lt),
          int64_t(c.workspace_bytes),
          g.a_type,
          g.b_type,
          g.d_type,
          g.transa,
          g.transb,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          int64_t(g.epilogue),
          g.fast_accum && is_fp8(g.a_type),
          g.device_scalars,
          pointer_alignment(g.A),
          pointer_alignment(g.B),
          pointer_alignment(g.D),
          g.bias ? pointer_alignment(g.bias) : 0,
          g.gelu_aux ? pointer_alignment(g.gelu_aux) : 0,
          g.batch,
          g.stride_a,
          g.stride_b,
          g.stride_d,
          g.a_scale_mode,
          g.b_scale_mode};
}

std::map<AlgoKey, AlgoEntry> g_cache;
std::mutex g_cache_mu;

// The cached heuristic answer for g, asked on first sight.
AlgoEntry cached_algo(const LtContext& c, LtDescs& d, const LtGemm& g, const AlgoKey& key) {
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    const auto it = g_cache.find(key);
    if (it != g_cache.end()) return it->second;
  }
  AlgoEntry e;
  e.count = ask_heuristic(c, d, g, e.algos);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache[key] = e;
  return e;
}

// The descriptors of each configuration this thread has run, built on first sight: a step
// makes the same GEMMs over and over, and building them (five objects, a dozen attributes)
// costs the host more than the launch. Per thread, because a call sets its pointers on them.
// Dropped whole past kMaxDescs configurations (a bound on what a run of changing shapes keeps).
constexpr size_t kMaxDescs = 1024;
thread_local std::map<AlgoKey, std::unique_ptr<LtDescs>> t_descs;

LtDescs& cached_descs(const LtGemm& g, const AlgoKey& key) {
  auto it = t_descs.find(key);
  if (it == t_descs.end()) {
    if (t_descs.size() >= kMaxDescs) t_descs.clear();
    auto d = std::make_unique<LtDescs>();
    make_descs(*d, g);
    it = t_descs.emplace(key, std::move(d)).first;
  }
  set_pointers(it->second->op, g);
  return *it->second;
}

void remember_working(const AlgoKey& key, int working) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache[key].working = working;
}

thread_local std::string t_refusal;  // why this thread's last lt_matmul returned false
thread_local std::string t_log;      // the GEMMs this thread ran since lt_take_log

// cuBLASLt's name for an algorithm: its id and tile id (cublasLtMatmulTile_t).
std::string algo_name(const cublasLtMatmulAlgo_t& algo) {
  int id = -1;
  uint32_t tile = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id,
                                           nullptr) != CUBLAS_STATUS_SUCCESS)
    id = -1;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile,
                                           nullptr) != CUBLAS_STATUS_SUCCESS)
    tile = 0;
  return "algo " + std::to_string(id) + " tile " + std::to_string(tile);
}

// The algorithm that ran, and the operand type when it is not 16-bit, for the profile's log.
void log_algorithm(const cublasLtMatmulAlgo_t& algo, const LtGemm& g) {
  const char* type = is_fp8(g.a_type) ? " f8" : g.a_type == CUDA_R_32F ? " f32" : "";
  lt_log(("lt " + algo_name(algo) + type).c_str());
}

// cuBLAS's own names for the types (what cuBLASLt's log prints).
const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
    default: return "another cudaDataType_t";
  }
}

// Everything a refused GEMM's descriptors carried, so that its refusal names the setting that
// differs from a call that runs (the first H200 refused every per-tensor FP8 GEMM while its
// heuristic offered algorithms for them; scripts/gpu/gpu_check_fp8.sh).
std::string describe(const LtContext& c, const LtGemm& g) {
  std::string s = strf(
      "%s x %s -> %s, op %c%c, m %d n %d k %d, ld %d %d %d, alignment A %u B %u "
      "D %u bytes",
      type_name(g.a_type), type_name(g.b_type), type_name(g.d_type), g.transa ? 'T' : 'N',
      g.transb ? 'T' : 'N', g.m, g.n, g.k, g.lda, g.ldb, g.ldd, pointer_alignment(g.A),
      pointer_alignment(g.B), pointer_alignment(g.D));
  if (g.a_scale || g.b_scale)
    s += strf(", scales (modes %d %d) at alignment %u %u", int(g.a_scale_mode), int(g.b_scale_mode),
              g.a_scale ? pointer_alignment(g.a_scale) : 0,
              g.b_scale ? pointer_alignment(g.b_scale) : 0);
  if (g.epilogue != LtEpilogue::kNone)
    s += strf(", epilogue %s, bias at alignment %u",
              g.epilogue == LtEpilogue::kBias ? "bias" : "gelu aux bias",
              g.bias ? pointer_alignment(g.bias) : 0);
  if (is_fp8(g.a_type)) s += g.fast_accum ? ", fast accumulation" : ", exact accumulation";
  if (g.batch > 1) s += strf(", batch %d", g.batch);
  return s + strf(", workspace %zu bytes at alignment %u", c.workspace_bytes,
                  pointer_alignment(c.workspace));
}

}  // namespace

bool lt_matmul(const LtContext& c, const LtGemm& g) {
  // cuBLASLt takes no alignment hint for the bias vector: leave odd ones to the caller.
  if (g.bias && pointer_alignment(g.bias) < 16) {
    t_refusal = "the bias pointer is not 16-byte aligned";
    return false;
  }
  const AlgoKey key = key_of(c, g);
  LtDescs& d = cached_descs(g, key);
  const AlgoEntry e = cached_algo(c, d, g, key);
  if (e.count == 0) {
    t_refusal = "the heuristic offered no algorithm that sums in fp32 for " + describe(c, g);
    return false;
  }
  // The algorithm that ran last time first, then the others in the heuristic's order.
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  std::string statuses;
  for (int i = 0; i < e.count; i++) {
    const int a = (e.working + i) % e.count;
    st = cublasLtMatmul(c.lt, d.op, g.alpha, g.A, d.a, g.B, d.b, g.beta, g.D, d.d, g.D, d.d,
                        &e.algos[a], c.workspace, c.workspace_bytes, c.stream);
    if (st == CUBLAS_STATUS_SUCCESS) {
      if (a != e.working) remember_working(key, a);
      log_algorithm(e.algos[a], g);
      return true;
    }
    statuses +=
        (statuses.empty() ? "" : ", ") + algo_name(e.algos[a]) + " " + cublasGetStatusString(st);
  }
  t_refusal = "cublasLtMatmul refused each of the heuristic's " + std::to_string(e.count) +
              " algorithms (" + statuses + ") for " + describe(c, g);
  return false;
}

const std::string& lt_last_refusal() { return t_refusal; }

std::string lt_take_log() {
  std::string s;
  s.swap(t_log);
  return s;
}

void lt_log(const char* what) {
  if (!t_log.empty()) t_log += "; ";
  t_log += what;
}

}  // namespace tg::gpu
