// cost_model_quant_checked.cpp: the quantized linears in the GPU cost model (docs/gpu.md, "The
// cost model"; the bf16 step is cost_model_checked.cpp). One linear of each quantized mode runs
// its forward and backward through the launchers (src/backends/cuda/matmul_scaled.cu) at the
// emulator's shape with the traffic counted, on the emulated sm_90 (an H100 / H200: the native
// block-scaled GEMMs of fp8 and fp8-block, the portable path of the MX and NV modes). Each
// operand's quantizer (its kernels from the amax pass to the operand it writes, or its one-pass
// kernel and the finish kernel after it) is held to
// 1.25x its minimum traffic (the source read once, the GEMM operand and its scales written
// once), but for the exceptions named below; the scaled epilogue's traffic and the fp32 product
// it reads back (the GEMM's fp32 write beside it, counted analytically) are reported. The last
// case appends "One quantized step" to cost_model.md: each mode's memory-bound work of the
// quantized linears at GPT-2 124M, its launches, its predicted time.
#include "checked_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cost_model.h"
#include "cuda_test_util.h"
#include "src/backends/cuda/scaled.h"
#include "src/numerics/recipe.h"

using namespace emu_test;

namespace {

constexpr double kBound = 1.25;  // as for the bf16 step's ops
const DType kBf16 = DType::BF16;

// The quantized modes modelled: the recipe each runs with its defaults; `delayed`: per-tensor
// scales given by the host (the linear's TensorScaling, as LinearQuantizers gives them).
struct QuantMode {
  const char* name;
  QuantRecipe (*recipe)();
  bool delayed = false;
};
const QuantMode kModes[] = {
    {"fp8", [] { return fp8_tensor_recipe(ScaleSource::Current, 16, 0, {}); }},
    {"fp8-delayed", [] { return fp8_tensor_recipe(ScaleSource::Delayed, 16, 0, {}); }, true},
    {"fp8-block", [] { return block_scaled_recipe("fp8-block", RecipeOptions{}); }},
    {"mxfp8", [] { return block_scaled_recipe("mxfp8", RecipeOptions{}); }},
    {"nvfp4", [] { return block_scaled_recipe("nvfp4", RecipeOptions{}); }},
};

// Quantizers that move more than kBound times their minimum today (keyed by the kind of
// operand they write, and the part where one alone is), with the ratio measured: the test fails
// if one moves more, or once it is within the bound (then its line goes).
struct Exception {
  const char* kind;
  const char* part;  // nullptr: every part of that kind
  double ratio;
  const char* why;
};
// Where every scale group fits one block's super-tile, or the scale is given (fp8-block, mxfp8,
// fp8-delayed), the quantizer reads its source once (kernels/quantize_tile.cuh) and is within
// the bound; so do fp8 (per-tensor current scaling), whose one scale needs the whole operand's
// amax before the first value is rounded, and nvfp4, whose tensor scale does: they read each
// operand once at an amax taken before, the forward's input at the one its producer took as
// it wrote it (layernorm, GELU, the attention's output: Backend's InputAmax), the weight at
// AdamW's (WeightAmax), the backward's input and weight at the forward's, the gradient at
// bias_backward's; nvfp4's wgrad reads dout^T and inp^T through its 16-point rotation, at the
// rotated amaxes the dgrad's quantizer of dout and the forward's of inp take on the way
// (TransposedAmax). None keeps the two passes now (an exception names one that would: its kind,
// its part or every part of that kind, the ratio measured and why).
const std::vector<Exception> kExceptions = {};
// The three GEMMs of a linear, in the launchers' order, and their operands (rows, cols along
// the reduction) of a linear (N, C) -> (N, OC).
struct Gemm {
  const char* role;
  int M, Nout, K;
  bool accumulate, bias;
  const char* a;
  const char* b;
};
std::vector<Gemm> gemms_of(int N, int C, int OC) {
  return {{"forward", N, OC, C, false, true, "input", "weight"},
          {"dgrad", N, C, OC, false, false, "dout", "weight^T"},
          {"wgrad", OC, C, N, true, false, "dout^T", "input^T"}};
}
const OperandRecipe& operand_of(const QuantRecipe& r, int gemm, int operand) {
  const int role = gemm == 0 ? kForward : gemm == 1 ? kInputGrad : kWeightGrad;
  return operand ? r.gemm[role].b : r.gemm[role].a;
}

std::string base_name(const void* kernel) {
  const std::string s = emu::check::symbolize(kernel, false);
  return s.substr(0, s.find('<'));
}
bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// One quantizer or epilogue of the linear, measured at the emulator's shape.
struct Part {
  std::string what;  // "forward: input", "forward: epilogue"
  std::string kind;  // "codes", "bf16 operand", "fp32 operand", "epilogue"
  int gemm = 0, operand = 0;
  int launches = 0;
  double min_bytes = 0;  // at the emulator's call
  uint64_t sector_bytes = 0, unique = 0;
  double ratio() const { return double(sector_bytes) / min_bytes; }
};

// The minimum of one quantizer over a bf16 (rows, cols) source: the source read once, and the
// GEMM operand written once (codes and the scale tensor, or the dequantized bf16 / fp32 values).
double quantizer_min(const OperandRecipe& o, const std::string& kind, int rows, int cols) {
  const double n = double(rows) * cols;
  if (kind == "codes") {
    cublasLtMatmulMatrixScale_t mode{};
    REQUIRE(gpu::native_operand_mode(o, &mode).empty());
    return 2 * n + n * elem_bits(o.elem) / 8 + double(gpu::native_scale_bytes(o, mode, rows, cols));
  }
  return 2 * n + n * (kind == "bf16 operand" ? 2 : 4);
}
// The epilogue's minimum: what the GEMM would write with the output fused (the output, read too
// when accumulated, and the bias); the fp32 product it reads is the round trip it costs.
double epilogue_min(const Gemm& g) {
  return 2.0 * g.M * g.Nout * (g.accumulate ? 2 : 1) + (g.bias ? 2.0 * g.Nout : 0);
}

// The emulator's linear: B 8 x T 64 tokens (cost_model_checked.cpp's shape), C 128 -> OC 384
// (the qkv linear's ratio; fp8-block's weight has 3 x 1 tiles of 128, its wgrad 4 blocks of
// 128 tokens per row).
constexpr int kN = 512, kC = 128, kOC = 384;

std::mt19937& rng() {
  static std::mt19937 r(45);
  return r;
}

// One mode's linear, forward and backward, measured: its quantizers and epilogues in the
// launchers' order, and the queued work by kind (launches, memsets, GEMMs).
struct LinearRun {
  std::vector<Part> parts;
  std::map<std::string, uint64_t> work;
  int bias_launches = 0;  // bias_backward's, as in the bf16 step (its row there)
};

// Parts from the launches: a quantizer runs from its amax pass to the kernel that writes its
// operand (apply_kernel or codes_kernel), or from its one-pass kernel to the finish kernel after
// it; an epilogue is one launch.
void group_parts(LinearRun& run, const QuantRecipe& r,
                 const std::vector<emu::traffic::LaunchTraffic>& launches) {
  const std::vector<Gemm> g = gemms_of(kN, kC, kOC);
  int quantizers = 0, epilogues = 0;
  Part* open = nullptr;
  for (const auto& l : launches) {
    const std::string k = base_name(l.kernel);
    if (ends_with(k, "bias_backward_partial_kernel") ||
        ends_with(k, "bias_backward_final_kernel")) {
      run.bias_launches++;
      continue;
    }
    if (ends_with(k, "gemm_scalars_kernel")) continue;  // NVFP4's alpha, 8 bytes (in the work)
    const bool opens = ends_with(k, "::operand_amax_kernel") ||
                       ends_with(k, "::one_pass_codes_kernel") ||
                       ends_with(k, "::one_pass_operand_kernel");
    const bool writes = ends_with(k, "::apply_kernel") || ends_with(k, "::codes_kernel") ||
                        ends_with(k, "::one_pass_codes_kernel") ||
                        ends_with(k, "::one_pass_operand_kernel");
    const bool closes = ends_with(k, "::apply_kernel") || ends_with(k, "::codes_kernel") ||
                        ends_with(k, "::finish_codes_kernel") ||
                        ends_with(k, "::finish_operand_kernel");
    if (opens) {
      REQUIRE(quantizers < 6);
      run.parts.push_back(Part{});
      open = &run.parts.back();
      open->gemm = quantizers / 2, open->operand = quantizers % 2;
      const Gemm& ge = g[size_t(open->gemm)];
      open->what = std::string(ge.role) + ": " + (open->operand ? ge.b : ge.a);
      quantizers++;
    } else if (ends_with(k, "scaled_epilogue_kernel")) {
      REQUIRE(epilogues < 3);
      run.parts.push_back(Part{});
      open = &run.parts.back();
      const Gemm& ge = g[size_t(epilogues)];
      open->gemm = epilogues++;
      open->what = std::string(ge.role) + ": epilogue";
      open->kind = "epilogue";
      open->min_bytes = epilogue_min(ge);
    } else if (!ends_with(k, "::group_scale_kernel") && !ends_with(k, "::native_scale_kernel") &&
               !writes && !closes) {
      FAIL_CHECK(k << ": a quantized linear's kernel that no part of the model counts");
      continue;
    }
    REQUIRE(open);
    open->launches++;
    open->sector_bytes += l.sector_bytes();
    open->unique += l.unique();
    if (writes) {
      const Gemm& ge = g[size_t(open->gemm)];
      const OperandRecipe& o = operand_of(r, open->gemm, open->operand);
      const OperandRecipe& other = operand_of(r, open->gemm, 1 - open->operand);
      open->kind = ends_with(k, "codes_kernel")                           ? "codes"
                   : dequantizes_to_bf16(o) && dequantizes_to_bf16(other) ? "bf16 operand"
                                                                          : "fp32 operand";
      open->min_bytes = quantizer_min(o, open->kind, open->operand ? ge.Nout : ge.M, ge.K);
    }
    if (closes) open = nullptr;
  }
  CHECK(quantizers == 6);
  // On these paths every GEMM writes the output itself (matmul_scaled.cu's scaled_gemm; the
  // epilogue kernel is left to the split channels and the native NVFP4 GEMMs of an sm_100).
  CHECK_MESSAGE(epilogues == 0, r.name << ": " << epilogues << " epilogue kernels");
}

LinearRun run_linear(const QuantMode& m) {
  const QuantRecipe r = m.recipe();
  auto inp = random_dev<bf16>(size_t(kN) * kC, rng()),
       w = random_dev<bf16>(size_t(kOC) * kC, rng());
  auto bias = random_dev<bf16>(kOC, rng()), dout = random_dev<bf16>(size_t(kN) * kOC, rng());
  Dev<bf16> out(size_t(kN) * kOC), dinp(size_t(kN) * kC), dw(size_t(kOC) * kC), dbias(kOC);
  // A per-tensor mode's linear (or nvfp4's, for its tensor scale) as the CUDA backend runs it
  // (LinearQuantizers gives it a slot): slot 0, its amaxes left in `amax` (the host's history
  // reads fp8's), a delayed mode's scales as a history would give them for these values; at
  // current scales the forward keeps its input's and weight's amaxes in `kept` for the
  // backward, given the same tensors.
  // Where the recipe reads the input at a current tensor scale as it lies, the input's
  // producer takes its amax as it writes it (Backend's InputAmax: that kernel's row of the bf16
  // step's cost model), here the word it would leave; the weight's likewise, taken by AdamW as
  // it writes the weights (Backend's WeightAmax: a warp's reduction and an atomic in the
  // optimizer's row, no bytes more).
  ScaledLinear q{&r, 7, {}};
  const bool slotted = is_per_tensor(r) || has_tensor_scale_over_groups(r);  // nvfp4's too
  if (slotted) q.tensor.slot = 0;
  if (m.delayed) q.tensor.scale[0] = q.tensor.scale[1] = q.tensor.scale[2] = 64;
  Dev<unsigned> amax(kTensorOperands), kept(gpu::kKeptWords), produced(2);
  unsigned* slot = slotted ? amax.p : nullptr;
  unsigned* keep = gpu::forward_amax_kept(q) ? kept.p : nullptr;
  produced.put({amax_bits(inp->get().data(), inp->n), amax_bits(w->get().data(), w->n)});
  const unsigned* input_amax = takes_input_amax(q) ? produced.p : nullptr;
  const unsigned* weight_amax = takes_weight_amax(q) ? produced.p + 1 : nullptr;
  auto step = [&] {
    gpu::Ctx& c = checked_ctx();
    gpu::scaled_linear_forward(c, kBf16, out.p, inp->p, w->p, bias->p, kN, kC, kOC, q, slot, keep,
                               input_amax, weight_amax);
    gpu::scaled_linear_backward(c, kBf16, dinp.p, dw.p, dbias.p, dout->p, inp->p, w->p, kN, kC, kOC,
                                q, slot, keep);
  };
  // As an H100 / H200 (compute capability 9.0) runs it: the native path where it has one.
  const int saved_major = checked_ctx().prop.major;
  checked_ctx().prop.major = 9;
  gpu::native_forget_checks();
  step();  // the native path's self-check, once per operand pair and shape class
  cudaDeviceSynchronize();
  take_reports();
  emu::take_work_tally();
  LinearRun run;
  const auto launches = counted_launches(step);
  run.work = emu::take_work_tally();
  checked_ctx().prop.major = saved_major;
  gpu::native_forget_checks();
  group_parts(run, r, launches);
  return run;
}

// Every mode measured once (the cases below share them).
const std::map<std::string, LinearRun>& measured() {
  static std::map<std::string, LinearRun> out;
  if (out.empty())
    for (const QuantMode& m : kModes) out[m.name] = run_linear(m);
  return out;
}

const Exception* exception_of(const Part& p) {
  for (const Exception& e : kExceptions)
    if (p.kind == e.kind && (!e.part || p.what == e.part)) return &e;
  return nullptr;
}

TEST_CASE(
    "cost model: every quantizer of the quantized linears within 1.25x its minimum traffic, "
    "or a named exception") {
  std::map<const Exception*, double> worst;
  for (const auto& [mode, run] : measured())
    for (const Part& p : run.parts) {
      INFO(mode << " " << p.what << " (" << p.kind << "): " << p.sector_bytes
                << " bytes in sectors, " << p.unique << " unique, minimum " << p.min_bytes << ": "
                << p.ratio() << "x");
      CHECK(p.unique >= 0.99 * p.min_bytes);  // a minimum cannot be overstated to pass
      if (p.kind == "epilogue") continue;     // reported, with the round trip it costs
      const Exception* e = exception_of(p);
      if (!e) {
        CHECK(p.ratio() <= kBound);
        continue;
      }
      CHECK_MESSAGE(p.ratio() <= e->ratio, "worse than its exception's " << e->ratio << "x");
      worst[e] = std::max(worst[e], p.ratio());
    }
  for (const Exception& e : kExceptions) {
    INFO(e.kind << " " << (e.part ? e.part : ""));
    CHECK_MESSAGE(worst.count(&e), "an exception no quantizer needs");
    if (worst.count(&e))
      CHECK_MESSAGE(worst[&e] > kBound, "within the bound now: remove its exception");
  }
}

// ---- one quantized step at GPT-2 124M ----

// A mode's quantized linears per step: the four of each block (qkv, attention projection, MLP
// fc and projection) in every layer the recipe quantizes (keep_bf16 leaves some in bf16;
// the tied lm_head always is).
struct StepSum {
  int linears = 0;
  double q_min = 0, q_moved = 0, e_min = 0, e_moved = 0, product = 0;
  int q_launches = 0, e_launches = 0;
  std::map<std::string, uint64_t> work;
  // Beyond the bf16 step's linears: a GEMM writing the output itself moves e_min, which the
  // bf16 step's GEMM rows count.
  double beyond() const { return q_moved + e_moved - e_min + product; }
};

StepSum step_sum(const QuantMode& m, const LinearRun& run) {
  const cost::Dims d = cost::gpt2_124m();
  const QuantRecipe r = m.recipe();
  const int layers = d.L() - int(r.keep_bf16.size());
  const int N = int(d.BT()), C = d.C();
  const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
  StepSum s;
  s.linears = 4 * layers;
  for (const auto& [kind, n] : run.work) s.work[kind] = n * uint64_t(s.linears);
  for (const auto& sh : shapes) {
    const std::vector<Gemm> g = gemms_of(N, sh[0], sh[1]);
    for (const Part& p : run.parts) {
      const Gemm& ge = g[size_t(p.gemm)];
      if (p.kind == "epilogue") {
        const double min = epilogue_min(ge);
        s.e_min += layers * min, s.e_moved += layers * min * p.ratio();
        s.e_launches += layers * p.launches;
        // The GEMM's fp32 product beyond the output a fused GEMM would write: 4 bytes a
        // value written where the output takes 2 (the epilogue's read of it is measured).
        s.product += layers * 2.0 * ge.M * ge.Nout;
        continue;
      }
      const OperandRecipe& o = operand_of(r, p.gemm, p.operand);
      const double min = quantizer_min(o, p.kind, p.operand ? ge.Nout : ge.M, ge.K);
      s.q_min += layers * min, s.q_moved += layers * min * p.ratio();
      s.q_launches += layers * p.launches;
    }
  }
  return s;
}

std::string fmt_ratio(double r) {
  char b[32];
  snprintf(b, sizeof b, "%.2fx", r);
  return b;
}
std::string mb(double bytes) { return std::to_string(int64_t(bytes / 1e6 + 0.5)); }
std::string ms(double bytes, const cost::Device& dev) {
  char b[32];
  snprintf(b, sizeof b, "%.2f", bytes / dev.bytes_per_s * 1e3);
  return b;
}

// The section "One quantized step": a line per mode, then each mode's parts.
std::string quant_section(const cost::Device& dev) {
  std::ostringstream md;
  md << "\n## One quantized step: the quantized linears' memory-bound work\n\n"
     << "tests/cuda/cost_model_quant_checked.cpp: one linear (B 8 x T 64 tokens, C " << kC << " -> "
     << kOC << ") of each mode, forward and backward, on an emulated sm_90 (H100 / "
     << "H200: fp8, fp8-delayed and fp8-block on the native block-scaled GEMMs, the MX and NV "
        "modes on the "
     << "portable path), each part's traffic per minimum byte applied to the four linears of "
     << "every quantized layer at GPT-2 124M. Quantizers: the amax pass to the GEMM operand (or "
     << "the one-pass kernel and its finish kernel), "
     << "minimum = the bf16 source read once, codes and scales (or the dequantized operand) "
     << "written once. Epilogues (where the GEMM cannot write the output itself): minimum = the "
     << "output written (read too when accumulated) and the bias, what a GEMM writing the "
     << "output itself moves; the GEMM's fp32 product beyond that (2 bytes a value) is counted "
     << "apart. \"Beyond bf16\": this work less what the bf16 step's GEMMs move anyway (the "
     << "output), i.e. on top of the bf16 step, whose linears have no memory-bound work but "
     << "the bias gradients (counted there). At the minimum: the quantizers' minimum. "
     << "Predicted at " << dev.name << "'s " << dev.bytes_per_s / 1e12 << " TB/s.\n\n"
     << "| mode | linears | quantizers: launches, minimum MB, moved MB | epilogues: launches, "
        "MB beyond the output | fp32 product MB | beyond bf16 MB | predicted ms | at the "
        "minimum ms | queued work per step |\n|---|---:|---|---|---:|---:|---:|---:|---|\n";
  for (const QuantMode& m : kModes) {
    const StepSum s = step_sum(m, measured().at(m.name));
    std::string work;
    for (const auto& [kind, n] : s.work)
      work += (work.empty() ? "" : ", ") + kind + " " + std::to_string(n);
    md << "| " << m.name << " | " << s.linears << " | " << s.q_launches << ", " << mb(s.q_min)
       << ", " << mb(s.q_moved) << " | " << s.e_launches << ", " << mb(s.e_moved - s.e_min) << " | "
       << mb(s.product) << " | " << mb(s.beyond()) << " | " << ms(s.beyond(), dev) << " | "
       << ms(s.q_min, dev) << " | " << work << " |\n";
  }
  md << "\nEach part at the emulator's linear (sectors / minimum):\n\n| mode | part | kind | "
        "launches | ratio |\n|---|---|---|---:|---:|\n";
  for (const QuantMode& m : kModes)
    for (const Part& p : measured().at(m.name).parts)
      md << "| " << m.name << " | " << p.what << " | " << p.kind << " | " << p.launches << " | "
         << fmt_ratio(p.ratio()) << " |\n";
  return md.str();
}

std::string binary_dir() {
  char b[4096];
  const ssize_t n = readlink("/proc/self/exe", b, sizeof b - 1);
  REQUIRE(n > 0);
  const std::string path(b, size_t(n));
  return path.substr(0, path.rfind('/'));
}

// Appends the section to cost_model.md (written by cost_model_checked.cpp's last case, which
// doctest runs first: its file sorts first), replacing an earlier one.
TEST_CASE("cost model: one quantized step at GPT-2 124M, appended to the report") {
  const std::string path = binary_dir() + "/cost_model.md";
  std::string text;
  {
    std::ifstream in(path);
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  const std::string marker = "\n## One quantized step";
  const size_t at = text.find(marker);
  if (at != std::string::npos) text.resize(at);
  const std::string section = quant_section(cost::kH200);
  std::ofstream(path) << text << section;
  MESSAGE("appended to " << path << ":\n" << section);
  for (const QuantMode& m : kModes) CHECK(step_sum(m, measured().at(m.name)).beyond() > 0);
}

}  // namespace
