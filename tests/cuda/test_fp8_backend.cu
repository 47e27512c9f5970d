// Per-tensor FP8 (the fp8 mode's recipes, fp8_tensor_recipe) through the Backend interface on
// the GPU (CudaBackend::matmul_forward_scaled / matmul_backward_scaled with a TensorScaling
// slot, over src/backends/cuda/matmul_scaled.cu and matmul_native.cu's SCALAR_32F GEMMs)
// against the CPU backend's per-tensor emulation: each linear on the same inputs and scales
// (both scale sources, margins, saturating delayed scales), the amaxes each pass leaves for
// take_amaxes, NaN poisoning, shapes the native GEMM cannot take, cuBLASLt refusing every FP8
// GEMM (the portable path runs, said once), ten training steps of a whole model, the memory.
//
// Tolerances reflect accumulation order only. The quantized values are the CPU's bit for bit
// (a per-tensor scale is one fp32 multiplier, the same function of the same amax); the CPU
// sums the dequantized operands in fp32, cuBLASLt sums codes and applies the descales, the
// portable path sums the dequantized operands in another order. Each rounds to bf16 once, so
// an output differs by at most one bf16 ulp (2^-8 relative) where the sums straddle a rounding
// boundary: 5e-3 on the relative norm. amaxes are maxima: bit-equal.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/cublaslt.h"
#include "src/backends/cuda/scaled.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/precision/scaled_scratch.h"

#ifdef TG_CUDA_EMULATION
namespace emu_test {
extern bool lt_refuse_fp8;  // cublaslt_emulation.cpp: every FP8 GEMM refused
}
#endif

using namespace tgc;

namespace {

constexpr double kExact = 5e-3;

struct Fp8Case {
  int N, C, OC;
};

// One forward + backward of a per-tensor linear (slot 2) on both backends; checks outputs,
// gradients and the amaxes the passes leave.
void check_linear(const Fp8Case& cs, bool current, int margin, uint64_t seed) {
  const int N = cs.N, C = cs.C, OC = cs.OC;
  const DType t = DType::BF16;
  Twin tw;
  const tg::QuantRecipe r = tg::fp8_tensor_recipe(
      current ? tg::ScaleSource::Current : tg::ScaleSource::Delayed, 4, margin, {});
  tg::QuantOptions o;
  o.recipe = &r;
  tw.gpu->set_quant_options(o);
  // Delayed scales as a history would give them: not powers of two, some saturating.
  tg::ScaledLinear q{&r, seed, {2, {97.3f, 2100.5f, 3.1e7f}, margin}};
  Pair inp = tw.rand(t, size_t(N) * C, seed), w = tw.rand(t, size_t(OC) * C, seed + 1, 0.05f),
       bias = tw.rand(t, OC, seed + 2, 0.1f);
  Pair out = tw.poisoned(t, size_t(N) * OC);
  tw.cpu->matmul_forward_scaled(out.cpu, inp.cpu, w.cpu, bias.cpu, N, C, OC, q);
  tw.gpu->matmul_forward_scaled(out.gpu, inp.gpu, w.gpu, bias.gpu, N, C, OC, q);
  CHECK(tw.err(out) < kExact);
  std::vector<float> ac = tw.cpu->take_amaxes(4), ag = tw.gpu->take_amaxes(4);
  CHECK(ac == ag);
  CHECK(ac[2 * tg::kTensorOperands + tg::kTensorInput] > 0);
  CHECK(ac[2 * tg::kTensorOperands + tg::kTensorWeight] > 0);
  CHECK(ac[2 * tg::kTensorOperands + tg::kTensorGrad] == 0);
  Pair dout = tw.rand(t, size_t(N) * OC, seed + 3, 1e-3f);
  Pair dinp = tw.poisoned(t, size_t(N) * C), dw = tw.rand(t, size_t(OC) * C, seed + 4, 0.01f),
       db = tw.rand(t, OC, seed + 5, 0.01f);
  tw.cpu->matmul_backward_scaled(dinp.cpu, dw.cpu, db.cpu, dout.cpu, inp.cpu, w.cpu, N, C, OC, q);
  tw.gpu->matmul_backward_scaled(dinp.gpu, dw.gpu, db.gpu, dout.gpu, inp.gpu, w.gpu, N, C, OC, q);
  CHECK(tw.err(dinp) < kExact);
  CHECK(tw.err(dw) < kExact);
  CHECK(tw.err(db) < kExact);
  ac = tw.cpu->take_amaxes(4), ag = tw.gpu->take_amaxes(4);
  CHECK(ac == ag);
  CHECK(ac[2 * tg::kTensorOperands + tg::kTensorGrad] > 0);
  CHECK(tw.gpu->take_amaxes(4) == std::vector<float>(12, 0.0f));  // taken: cleared
}

}  // namespace

TEST_CASE("cuda: per-tensor fp8 linears through the backend match the CPU emulation") {
  TG_REQUIRE_GPU();
  {
    auto gpu = tg::make_cuda_backend();
    const tg::QuantRecipe r = tg::fp8_tensor_recipe(tg::ScaleSource::Delayed, 16, 0, {});
    tg::QuantOptions o;
    o.recipe = &r;
    gpu->set_quant_options(o);
    MESSAGE("fp8 path of this GPU: " << gpu->fp8_path_name());
    CHECK(gpu->fp8_path_name().find("SCALAR_32F") != std::string::npos);
  }
  // The four GPT-2 block shapes at a small width, and a bigger fc.
  const Fp8Case cases[] = {
      {128, 64, 192}, {128, 64, 64}, {128, 64, 256}, {128, 256, 64}, {512, 256, 1024}};
  uint64_t seed = 500;
  for (const Fp8Case& cs : cases)
    for (bool current : {false, true}) {
      INFO("N=" << cs.N << " C=" << cs.C << " OC=" << cs.OC << " current=" << current);
      check_linear(cs, current, current ? 1 : 0, seed += 10);
    }
}

TEST_CASE(
    "cuda: per-tensor fp8 linears of shapes the native GEMM cannot take run the portable path") {
  TG_REQUIRE_GPU();
  // N = 24 rows (sampling a short prompt): not a multiple of 16.
  check_linear({24, 64, 256}, true, 0, 950);
  check_linear({24, 64, 256}, false, 0, 960);
}

#ifdef TG_CUDA_EMULATION  // (the refusal is the emulated cuBLASLt's; a GPU refuses or not)
TEST_CASE("cuda: where cuBLASLt refuses every FP8 GEMM, per-tensor fp8 runs the portable path") {
  TG_REQUIRE_GPU();
  tg::gpu::native_forget_checks();
  emu_test::lt_refuse_fp8 = true;
  const int failed = tg::gpu::native_checks_failed();
  check_linear({128, 64, 256}, false, 0, 970);
  check_linear({128, 64, 256}, true, 0, 980);
  CHECK(tg::gpu::native_checks_failed() > failed);  // the verdicts that said so, once each
  // The refusal names the GEMM as its descriptors asked for it: types, shape, alignments,
  // scales, workspace (what scripts/gpu/gpu_check_fp8.sh compares with PyTorch's calls).
  const std::string why = tg::gpu::lt_last_refusal();
  INFO(why);
  CHECK(why.find("the heuristic offered no algorithm that sums in fp32 for CUDA_R_8F_E") == 0);
  for (const char* fact :
       {" -> ", ", m ", ", alignment A ", ", scales (modes 0 0) at alignment ", ", workspace "})
    CHECK_MESSAGE(why.find(fact) != std::string::npos, fact);
  emu_test::lt_refuse_fp8 = false;
  tg::gpu::native_forget_checks();
}
#endif

TEST_CASE("cuda: a current-scaled fp8 backward not given its forward's input takes its amax anew") {
  // The forward keeps its input's and weight's amaxes for its backward (CudaBackend's
  // forward_read_), which must read them only for the tensors that forward read: here the
  // backward's input is another tensor, 4x larger (at the forward's amax it would saturate).
  TG_REQUIRE_GPU();
  const int N = 64, C = 64, OC = 128;
  const DType t = DType::BF16;
  Twin tw;
  const tg::QuantRecipe r = tg::fp8_tensor_recipe(tg::ScaleSource::Current, 4, 0, {});
  const tg::ScaledLinear q{&r, 9, {1, {1.f, 1.f, 1.f}, 0}};
  Pair inp = tw.rand(t, size_t(N) * C, 20), other = tw.rand(t, size_t(N) * C, 21, 4.f);
  Pair w = tw.rand(t, size_t(OC) * C, 22, 0.05f), bias = tw.rand(t, OC, 23, 0.1f);
  Pair out = tw.alloc(t, size_t(N) * OC);
  Pair dout = tw.rand(t, size_t(N) * OC, 24, 1e-3f);
  Pair dinp = tw.alloc(t, size_t(N) * C), dw = tw.rand(t, size_t(OC) * C, 25, 0.01f);
  for (tg::Backend* be : {tw.cpu.get(), tw.gpu.get()}) {
    const bool cpu = be == tw.cpu.get();
    be->matmul_forward_scaled(cpu ? out.cpu : out.gpu, cpu ? inp.cpu : inp.gpu, cpu ? w.cpu : w.gpu,
                              cpu ? bias.cpu : bias.gpu, N, C, OC, q);
    be->matmul_backward_scaled(cpu ? dinp.cpu : dinp.gpu, cpu ? dw.cpu : dw.gpu, Tensor{},
                               cpu ? dout.cpu : dout.gpu, cpu ? other.cpu : other.gpu,
                               cpu ? w.cpu : w.gpu, N, C, OC, q);
  }
  CHECK(tw.err(dw) < kExact);
  CHECK(tw.err(dinp) < kExact);
  CHECK(tw.cpu->take_amaxes(2) == tw.gpu->take_amaxes(2));
}

TEST_CASE("cuda: a current-scaled fp8 forward reads its producer's amax only for what it wrote") {
  // The op that writes a linear's input takes its amax for it (Backend's InputAmax), which the
  // linear's forward must read only for that memory, unchanged since (amax_records.h): the
  // layernorm writes x for slot 1, then the forward reads x (one pass: the word), or x is
  // written anew first (GELU of values 4x larger, an upload of them), or the forward is given
  // another tensor. At the layernorm's amax those larger values would saturate; every case
  // matches the CPU, the amaxes bit for bit.
  TG_REQUIRE_GPU();
  const int N = 64, C = 64, OC = 128;
  const DType t = DType::BF16;
  Twin tw;
  const tg::QuantRecipe r = tg::fp8_tensor_recipe(tg::ScaleSource::Current, 4, 0, {});
  const tg::ScaledLinear q{&r, 11, {1, {1.f, 1.f, 1.f}, 0}};
  REQUIRE(tg::takes_input_amax(q));
  const std::vector<float> big_values = randn(size_t(N) * C, 31, 4.f);
  Pair src = tw.rand(t, size_t(N) * C, 30), big = tw.make(t, big_values);
  Pair lw = tw.rand(t, C, 32, 0.2f, 1.f), lb = tw.rand(t, C, 33, 0.1f);
  Pair mean = tw.alloc(DType::F32, N), rstd = tw.alloc(DType::F32, N);
  Pair x = tw.alloc(t, size_t(N) * C), out = tw.alloc(t, size_t(N) * OC);
  Pair w = tw.rand(t, size_t(OC) * C, 34, 0.05f), bias = tw.rand(t, OC, 35, 0.1f);
  const auto big_bytes = encode(big_values, t);
  for (const char* then : {"the forward", "GELU rewrites x", "x uploaded", "another tensor"}) {
    INFO("the layernorm writes x, then " << then);
    const std::string k = then;
    for (tg::Backend* be : {tw.cpu.get(), tw.gpu.get()}) {
      const bool cpu = be == tw.cpu.get();
      auto at = [&](const Pair& p) { return cpu ? p.cpu : p.gpu; };
      be->layernorm_forward(at(x), at(mean), at(rstd), at(src), at(lw), at(lb), N, C,
                            tg::InputAmax{1});
      if (k == "GELU rewrites x") be->gelu_forward(at(x), at(big), size_t(N) * C);
      if (k == "x uploaded") be->upload(at(x), big_bytes.data());
      be->matmul_forward_scaled(at(out), k == "another tensor" ? at(big) : at(x), at(w), at(bias),
                                N, C, OC, q);
    }
    CHECK(tw.err(out) < kExact);
    CHECK(tw.cpu->take_amaxes(2) == tw.gpu->take_amaxes(2));
  }
  tg::gpu::native_forget_checks();  // (the verdicts of this test's GEMMs)
}

TEST_CASE("cuda: a current-scaled fp8 forward reads AdamW's weight amax only for what it wrote") {
  // AdamW takes each linear's weight amax as it writes the weights (Backend's WeightAmax), which
  // every forward of that linear reads given those weights, until they are written again
  // (amax_records.h): AdamW writes two linears' weights (slots 0 and 1), then slot 1's forward
  // reads its weight (one pass: the word) twice, or the weight is written anew first (an upload
  // of values 4x larger, a conversion of them, AdamW again with a large step, asked for no
  // amax), or the forward is given slot 0's weight. At the stale amax the new values would
  // saturate or round at another scale; every case matches the CPU, which takes its own
  // amaxes, the amaxes bit for bit.
  TG_REQUIRE_GPU();
  const int N = 64, C = 64, OC = 128;
  const size_t wn = size_t(OC) * C;
  const DType t = DType::BF16;
  const tg::QuantRecipe r = tg::fp8_tensor_recipe(tg::ScaleSource::Current, 4, 0, {});
  const tg::ScaledLinear q{&r, 12, {1, {1.f, 1.f, 1.f}, 0}};
  REQUIRE(tg::takes_weight_amax(q));
  const std::vector<float> big_values = randn(wn, 41, 0.2f);
  for (const char* then :
       {"the forward", "two forwards", "the weight uploaded", "the weight converted into",
        "AdamW asked for none", "slot 0's weight"}) {
    const std::string k = then;
    INFO("AdamW writes the weights, then " << k);
    Twin tw;
    Pair master = tw.rand(DType::F32, 2 * wn, 42, 0.05f),
         m = tw.rand(DType::F32, 2 * wn, 43, 1e-3f);
    std::vector<float> vv = randn(2 * wn, 44, 1e-4f);
    for (auto& x : vv) x = std::fabs(x);
    Pair v = tw.make(DType::F32, vv), grads = tw.rand(t, 2 * wn, 45, 0.05f);
    Pair params = tw.alloc(t, 2 * wn), x = tw.rand(t, size_t(N) * C, 46);
    Pair bias = tw.rand(t, OC, 47, 0.1f), out = tw.alloc(t, size_t(N) * OC);
    Pair big = tw.make(DType::F32, big_values);
    const auto big_bytes = encode(big_values, t);
    tg::AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7, tg::Rounding{}};
    a.weight_amax.n = 1;
    a.weight_amax.seg_len[0] = wn, a.weight_amax.segs[0] = 2, a.weight_amax.slot_step[0] = 1;
    for (tg::Backend* be : {tw.cpu.get(), tw.gpu.get()}) {
      const bool cpu = be == tw.cpu.get();
      auto at = [&](const Pair& p) { return cpu ? p.cpu : p.gpu; };
      const tg::Tensor w0 = at(params).slice(0, wn), w1 = at(params).slice(wn, wn);
      be->adamw(at(params), at(master), at(grads), at(m), at(v), a);
      if (k == "the weight uploaded") be->upload(w1, big_bytes.data());
      if (k == "the weight converted into") be->convert(w1, at(big), tg::Rounding{});
      if (k == "AdamW asked for none") {
        tg::AdamWArgs none = a;  // a step large enough to move the amax
        none.weight_amax = {};
        none.lr = 0.5f;
        be->adamw(at(params), at(master), at(grads), at(m), at(v), none);
      }
      const int forwards = k == "two forwards" ? 2 : 1;
      for (int f = 0; f < forwards; f++)
        be->matmul_forward_scaled(at(out), at(x), k == "slot 0's weight" ? w0 : w1, at(bias), N, C,
                                  OC, q);
    }
    CHECK(tw.err(out) < kExact);
    CHECK(tw.cpu->take_amaxes(2) == tw.gpu->take_amaxes(2));
  }
  tg::gpu::native_forget_checks();  // (the verdicts of this test's GEMMs)
}

TEST_CASE("cuda: a non-finite gradient poisons a per-tensor fp8 linear's outputs, amax +inf") {
  TG_REQUIRE_GPU();
  const int N = 32, C = 64, OC = 64;
  const DType t = DType::BF16;
  // Current scales too: the dgrad reads the gradient once at the amax the wgrad's quantizer
  // left (+inf here), and must poison dinp as the two passes do.
  for (tg::ScaleSource src : {tg::ScaleSource::Delayed, tg::ScaleSource::Current})
    for (float bad : {INFINITY, NAN}) {
      INFO("current " << (src == tg::ScaleSource::Current) << ", " << bad);
      Twin tw;
      const tg::QuantRecipe r = tg::fp8_tensor_recipe(src, 4, 0, {});
      const tg::ScaledLinear q{&r, 1, {0, {64.f, 64.f, 1000.f}, 0}};
      Pair inp = tw.rand(t, size_t(N) * C, 1), w = tw.rand(t, size_t(OC) * C, 2, 0.05f);
      std::vector<float> g(size_t(N) * OC, 1e-3f);
      g[77] = bad;
      Pair dout = tw.make(t, g);
      Pair dinp = tw.alloc(t, size_t(N) * C), dw = tw.rand(t, size_t(OC) * C, 3, 0.01f);
      tw.cpu->matmul_backward_scaled(dinp.cpu, dw.cpu, Tensor{}, dout.cpu, inp.cpu, w.cpu, N, C, OC,
                                     q);
      tw.gpu->matmul_backward_scaled(dinp.gpu, dw.gpu, Tensor{}, dout.gpu, inp.gpu, w.gpu, N, C, OC,
                                     q);
      for (tg::Backend* be : {tw.cpu.get(), tw.gpu.get()})
        CHECK(std::isinf(be->take_amaxes(1)[tg::kTensorGrad]));
      for (double x : tw.get(*tw.gpu, dinp.gpu)) REQUIRE(std::isnan(x));
      for (double x : tw.get(*tw.cpu, dinp.cpu)) REQUIRE(std::isnan(x));
    }
}

namespace {

// Ten AdamW steps of a small GPT in fp8 on both backends (same init, same batches).
// Tolerance of the loss: 1e-2 relative. Each FP8 matmul differs from the CPU's by at most a
// bf16 ulp per output (above); through the layers that moves other roundings and, rarely, an
// E4M3/E5M2 rounding of an operand (a 6% or 12% step on one element), and the differences
// compound over the steps. bf16 mode's comparison of the same model allows 3e-2; fp8 adds
// no other source of difference, the amaxes that set the scales being maxima of nearly equal
// tensors, so 1e-2 on the mean loss of 128 tokens leaves room without hiding a wrong scale
// (a wrong scale or layout moves the loss by far more, or makes it NaN).
void fp8_training_parity(const std::string& recipe, const std::vector<int>& keep) {
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 100, 32);
  const int B = 4, T = 32;
  auto cpu = tg::make_cpu_backend();
  auto gpu = tg::make_cuda_backend();
  tg::Fp8Config fc;
  REQUIRE(tg::parse_enum(recipe, &fc.recipe));
  fc.history_len = 4;
  fc.keep_bf16 = keep;
  tg::LinearQuantizers sc(fc, cfg.n_layer), sg(fc, cfg.n_layer);
  tg::GPT mc(cfg, *cpu, DType::BF16), mg(cfg, *gpu, DType::BF16);
  mc.set_quantizers(&sc);
  mg.set_quantizers(&sg);
  mc.init_random(5);
  mg.init_random(5);
  for (int step = 1; step <= 10; step++) {
    const auto in = random_tokens(size_t(B) * T, cfg.vocab_size, 300 + step);
    const auto tgt = random_tokens(size_t(B) * T, cfg.vocab_size, 700 + step);
    double loss[2], norm[2];
    tg::GPT* ms[2] = {&mc, &mg};
    for (int k = 0; k < 2; k++) {
      ms[k]->zero_grad();
      loss[k] = ms[k]->forward(in.data(), tgt.data(), B, T, 1.f);
      ms[k]->backward();
      tg::GradCheck gc = ms[k]->check_grads(1.0);
      REQUIRE(gc.finite);
      norm[k] = gc.norm;
      const float clip = norm[k] > 1.0 ? float(1.0 / norm[k]) : 1.f;
      ms[k]->adamw_step({3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, clip, step, tg::Rounding{}});
    }
    INFO("step " << step << ": loss cpu " << loss[0] << " gpu " << loss[1]);
    CHECK(std::fabs(loss[1] / loss[0] - 1) < 1e-2);
    CHECK(std::fabs(norm[1] / norm[0] - 1) < 5e-2);
  }
  // The amax histories (what checkpoints keep) follow the CPU's. Each entry is the maximum of
  // a tensor whose elements move by whole E4M3 / E5M2 steps (6% / 12%) wherever a rounding
  // flips, and flips come as soon as the two backends sum in different orders (the CPU's
  // blocked sgemm, cuBLASLt's kernels, the emulation's k-order loops): under the emulation,
  // the gradients' amaxes differ by up to 3% after the first step and the inputs' by up to
  // 10% after ten. A slot or scale mix-up moves entries by factors (weights ~0.08, inputs ~3,
  // gradients ~1e-3), hence: every entry within 25%, and the median within 3%.
  const nlohmann::json jc = sc.to_json(), jg = sg.to_json();
  const auto &hc = jc.at("amax_history"), &hg = jg.at("amax_history");
  REQUIRE(hc.size() == hg.size());
  std::vector<double> rel;
  for (size_t i = 0; i < hc.size(); i++) {
    REQUIRE(hc[i].size() == hg[i].size());
    for (size_t k = 0; k < hc[i].size(); k++) {
      const double a = hc[i][k].get<double>(), b = hg[i][k].get<double>();
      CAPTURE(i);
      CAPTURE(k);
      CHECK(std::fabs(b - a) <= 0.25 * std::fabs(a));
      rel.push_back(std::fabs(b - a) / std::fabs(a));
    }
  }
  REQUIRE(!rel.empty());
  std::nth_element(rel.begin(), rel.begin() + rel.size() / 2, rel.end());
  MESSAGE("amax histories: median relative difference " << rel[rel.size() / 2]);
  CHECK(rel[rel.size() / 2] <= 0.03);
}

}  // namespace

TEST_CASE("cuda: ten fp8 training steps follow the CPU emulation") {
  TG_REQUIRE_GPU();
  for (const char* recipe : {"delayed", "current"}) {
    INFO(recipe);
    fp8_training_parity(recipe, {});
  }
  INFO("keep_bf16 = [-1]");
  fp8_training_parity("delayed", {-1});
}

TEST_CASE("cuda: fp8 at current scales and nvfp4 train the two passes' bits at amaxes taken before") {
  // The model asks the ops that write the linears' inputs, and AdamW, for the amaxes the
  // forward's quantizers then read once (Backend's InputAmax, WeightAmax), per-tensor FP8 for
  // its one scale, NVFP4 for its tensor scale; a word taken of the wrong tensor or layer would
  // round at another scale. Three steps of a GPU model read them, three of another draw every
  // amax in two passes: the losses and the weights bit for bit.
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 100, 32);
  const int B = 4, T = 32;
  tg::Fp8Config fc;
  fc.recipe = tg::ScaleSource::Current;
  tg::RecipeOptions nv;
  nv.bf16_last = 0;  // both layers in nvfp4
  for (const tg::QuantRecipe& r : {tg::fp8_recipe(fc), tg::block_scaled_recipe("nvfp4", nv)}) {
    INFO(r.name);
    std::vector<double> losses[2];
    std::vector<float> weights[2];
    for (int k = 0; k < 2; k++) {
      tg::gpu::force_two_pass_quantizer(k == 1);
      auto gpu = tg::make_cuda_backend();
      tg::LinearQuantizers q(r, cfg.n_layer);
      tg::GPT m(cfg, *gpu, DType::BF16);
      m.set_quantizers(&q);
      m.init_random(5);
      for (int step = 1; step <= 3; step++) {
        const auto in = random_tokens(size_t(B) * T, cfg.vocab_size, 300 + step);
        const auto tgt = random_tokens(size_t(B) * T, cfg.vocab_size, 700 + step);
        q.set_rng_seed(uint64_t(step));
        m.zero_grad();
        losses[k].push_back(m.forward(in.data(), tgt.data(), B, T, 1.f));
        m.backward();
        REQUIRE(m.check_grads(1.0).finite);
        m.adamw_step({3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, step, tg::Rounding{}});
      }
      weights[k] = m.params_f32();
    }
    tg::gpu::force_two_pass_quantizer(false);
    tg::gpu::native_forget_checks();  // (the verdicts of this test's GEMMs)
    CHECK(losses[0] == losses[1]);
    CHECK(weights[0] == weights[1]);
  }
}

TEST_CASE("cuda: an fp8 model's peak memory is at most a bf16 model's (GPT-2 vocabulary)") {
  TG_REQUIRE_GPU();
  // The per-tensor linears' scratch is the quantized path's (src/precision/scaled_scratch.h:
  // operand copies and products of the largest linear) and their amaxes 12 bytes per linear:
  // no more than a bf16 model's peak plus that plan.
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 50257, 64);
  const int B = 4, T = 64;
  const auto in = random_tokens(size_t(B) * T, cfg.vocab_size, 1);
  size_t peak[2];
  for (int k = 0; k < 2; k++) {
    auto gpu = tg::make_cuda_backend();
    tg::LinearQuantizers st(tg::Fp8Config{}, cfg.n_layer);
    tg::GPT m(cfg, *gpu, DType::BF16);
    if (k == 1) m.set_quantizers(&st);
    m.init_random(1);
    for (int s = 0; s < 2; s++) {
      m.zero_grad();
      m.forward(in.data(), in.data(), B, T, 1.f);
      m.backward();
    }
    // Sampling-like passes: one row of 5 and of 37 tokens (the native GEMM cannot take N=5:
    // the portable path), logits finite.
    for (int t : {5, 37}) {
      m.forward(in.data(), nullptr, 1, t, 0.f);
      std::vector<float> lg(size_t(t) * cfg.padded_vocab_size);
      gpu->download(lg.data(), m.logits().slice(0, lg.size()));
      for (int v = 0; v < cfg.vocab_size; v++)
        REQUIRE(std::isfinite(lg[size_t(t - 1) * cfg.padded_vocab_size + v]));
    }
    gpu->synchronize();
    peak[k] = gpu->peak_bytes();
  }
  const tg::QuantRecipe r = tg::fp8_recipe(tg::Fp8Config{});
  const size_t plan = tg::plan_scaled_scratch(cfg, r, B, T, 132).portable.total();
  INFO("bf16 peak " << peak[0] << ", fp8 peak " << peak[1] << ", scratch plan " << plan);
  CHECK(peak[1] <= peak[0] + plan + (size_t(1) << 20));
}
