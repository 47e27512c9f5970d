// The whole model on the GPU against the CPU: gradients of one step, ten training steps, and
// the binary's training runs (GPU vs CPU losses, bit-exact resume on the GPU, checkpoints
// moving between devices), in every precision mode (fp8: both recipes; the fp8 model-level
// cases are in test_fp8_backend.cu).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cuda_test_util.h"
#include "src/backends/cuda/launch.h"
#include "src/io/checkpoint.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/numerics/state_format.h"
#include "tests/test_util.h"

using namespace tgc;

namespace {

// Head size 32.
tg::GPTConfig small_gpt() { return tg::gpt_config(2, 2, 64, 100, 32); }

struct Batch {
  std::vector<int32_t> in, tgt;
};
Batch batch(int B, int T, int V, uint64_t seed) {
  return {random_tokens(size_t(B) * T, V, seed), random_tokens(size_t(B) * T, V, seed + 1000)};
}

double rel(const std::vector<double>& a, const std::vector<double>& b, size_t off, size_t n) {
  double num = 0, den = 0;
  for (size_t i = off; i < off + n; i++) {
    if (!std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Tolerances for whole-model comparisons: every op's difference compounds through the
// layers, and 16-bit activations round differently wherever an input differs by an ulp.
double model_tol(DType t) { return t == DType::F32 ? 1e-4 : 3e-2; }

std::vector<nlohmann::json> read_train_metrics(const std::string& path) {
  return tgt::read_metrics(path, "train");
}

const std::string& toy_data() { return tgt::toy_dir(); }

std::string train_args(const std::string& out_dir, const std::string& device,
                       const std::string& mode) {
  const std::string& d = toy_data();
  return "train --model.n_layer=2 --model.n_head=4 --model.n_embd=64 --model.max_seq_len=64 "
         "--data.seq_len=64 --data.batch_size=8 --data.train='" +
         d + "/toy_train_*.bin' --data.val='" + d +
         "/toy_val_*.bin' --eval.batches=2 --eval.every=0 --sample.tokens=0 --train.threads=2 "
         "--optim.warmup_steps=2 --optim.lr=3e-3 --train.device=" +
         device + " --precision.mode=" + mode + " --train.out_dir=" + out_dir +
         // The cuBLAS attention against the CPU's reference, as the tolerances were set for
         // (auto would take cuDNN on the GPU in bf16 and fp16: test_attention_cudnn.cu).
         " --cuda.attention=cublas";
}

}  // namespace

TEST_CASE("cuda: full-model gradients match the CPU") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = small_gpt();
  const int B = 2, T = 16;
  Batch bt = batch(B, T, cfg.vocab_size, 7);
  // The default paths, then the forced GEMM fallback and the GELU epilogue (cuDNN's path
  // against the CPU's lse twin: test_attention_cudnn.cu).
  for (const char* path : {"default", "gemm fallback", "gelu epilogue"})
    for (DType t : kAllTypes) {
      INFO(name(t) << " " << path);
      const std::string p = path;
      tg::BackendOptions o;
      o.gemm_fallback = p == "gemm fallback";
      o.gelu_epilogue = p == "gelu epilogue";
      auto cpu = tg::make_cpu_backend(o);
      auto gpu = tg::make_cuda_backend(0, o);
      tg::GPT mc(cfg, *cpu, t), mg(cfg, *gpu, t);
      CHECK_FALSE(mc.attention_lse());
      CHECK_FALSE(mg.attention_lse());
      mc.init_random(42);
      mg.init_random(42);
      CHECK(mc.params_f64() == mg.params_f64());
      mc.zero_grad();
      mg.zero_grad();
      const double lc = mc.forward(bt.in.data(), bt.tgt.data(), B, T, 1.f);
      const double lg = mg.forward(bt.in.data(), bt.tgt.data(), B, T, 1.f);
      CHECK(std::fabs(lg / lc - 1) < (t == DType::F32 ? 1e-5 : 1e-2));
      mc.backward();
      mg.backward();
      auto gc = mc.grads_f64(), gg = mg.grads_f64();
      auto sizes = tg::param_sizes(cfg);
      size_t off = 0;
      for (int i = 0; i < tg::kNumParamTensors; i++) {
        INFO("grad of " << tg::param_name(i));
        CHECK(rel(gc, gg, off, sizes[i]) < model_tol(t));
        off += sizes[i];
      }
      CHECK(rel(gc, gg, 0, gc.size()) < model_tol(t));
      const double nc = mc.grad_norm(), ng = mg.grad_norm();
      CHECK(std::fabs(ng / nc - 1) < model_tol(t));
    }
}

// The lm_head's backward in the compute type (src/model/model.cpp GPT::backward): 16-bit dlogits in
// the fp32 logits' rows times 16-bit operands, as every other linear, on both backends. A
// 16-bit training step (bf16, fp16 with its loss scale, fp8, whose lm_head is bf16) widens no
// GEMM operand to fp32: the backend's widening slots stay empty (at GPT-2 124M with 8 x 1024
// tokens they held 343 MiB, and the lm_head's two fp32 GEMMs took ~25 ms of a bf16 step). Its
// loss and gradients are the CPU's within the 16-bit whole-model tolerance.
TEST_CASE("cuda: a 16-bit step's lm_head backward runs in the compute type, as on the CPU") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = small_gpt();
  const int B = 2, T = 16;
  Batch bt = batch(B, T, cfg.vocab_size, 11);
  for (const std::string m : {"bf16", "fp16", "fp8"}) {
    INFO(m);
    const DType t = m == "fp16" ? DType::F16 : DType::BF16;
    auto cpu = tg::make_cpu_backend();
    auto gpu = tg::make_cuda_backend();
    tg::LinearQuantizers sc(tg::Fp8Config{}, cfg.n_layer), sg(tg::Fp8Config{}, cfg.n_layer);
    tg::GPT mc(cfg, *cpu, t), mg(cfg, *gpu, t);
    if (m == "fp8") {
      mc.set_quantizers(&sc);
      mg.set_quantizers(&sg);
    }
    mc.init_random(21);
    mg.init_random(21);
    const float scale = t == DType::F16 ? 1024.f : 1.f;  // fp16 trains with a loss scale
    double loss[2];
    tg::GPT* ms[2] = {&mc, &mg};
    for (int k = 0; k < 2; k++) {
      ms[k]->zero_grad();
      loss[k] = ms[k]->forward(bt.in.data(), bt.tgt.data(), B, T, scale);
      ms[k]->backward();
    }
    gpu->synchronize();
    for (int s : {tg::gpu::kScratchWideA, tg::gpu::kScratchWideB, tg::gpu::kScratchWideC,
                  tg::gpu::kScratchWideOut}) {
      INFO("widening slot " << s - tg::gpu::kScratchWideA);
      CHECK(tg::cuda_scratch_bytes(*gpu, s) == 0);
    }
    CHECK(std::fabs(loss[1] / loss[0] - 1) < 1e-2);
    if (m == "fp8") {
      // An ulp of difference moves E4M3 / E5M2 codes by 6-12%, so the block linears' gradients
      // differ by up to ~10% tensor by tensor before this change as after: the norm, as the
      // fp8 training parity test (test_fp8_backend.cu) compares it.
      CHECK(std::fabs(mg.grad_norm() / mc.grad_norm() - 1) < 5e-2);
      continue;
    }
    const auto gc = mc.grads_f64(), gg = mg.grads_f64();
    const auto sizes = tg::param_sizes(cfg);
    size_t off = 0;
    for (int i = 0; i < tg::kNumParamTensors; i++) {
      INFO("grad of " << std::string(tg::param_name(i)));
      CHECK(rel(gc, gg, off, sizes[i]) < model_tol(t));
      off += sizes[i];
    }
  }
}

TEST_CASE("cuda: ten training steps follow the CPU") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = small_gpt();
  const int B = 4, T = 32;
  for (DType t : kAllTypes) {
    INFO(name(t));
    auto cpu = tg::make_cpu_backend();
    auto gpu = tg::make_cuda_backend();
    tg::GPT mc(cfg, *cpu, t), mg(cfg, *gpu, t);
    mc.init_random(3);
    mg.init_random(3);
    for (int step = 1; step <= 10; step++) {
      Batch bt = batch(B, T, cfg.vocab_size, 100 + step);
      double loss[2], norm[2];
      tg::GPT* ms[2] = {&mc, &mg};
      for (int k = 0; k < 2; k++) {
        ms[k]->zero_grad();
        loss[k] = ms[k]->forward(bt.in.data(), bt.tgt.data(), B, T, 1.f);
        ms[k]->backward();
        tg::GradCheck gc = ms[k]->check_grads(1.0);
        REQUIRE(gc.finite);
        norm[k] = gc.norm;
        const float clip = norm[k] > 1.0 ? float(1.0 / norm[k]) : 1.f;
        ms[k]->adamw_step(
            {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, clip, step, tg::Rounding{t != DType::F32, 555, 0}});
      }
      INFO("step " << step);
      CHECK(std::fabs(loss[1] / loss[0] - 1) < model_tol(t));
      CHECK(std::fabs(norm[1] / norm[0] - 1) < 10 * model_tol(t));
    }
    auto pc = mc.params_f64(), pg = mg.params_f64();
    CHECK(rel(pc, pg, 0, pc.size()) < model_tol(t));
  }
}

TEST_CASE(
    "cuda: the backend's AdamW keeps the CPU's master weights and moment codes, every "
    "state format") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = small_gpt();
  const int B = 4, T = 32;
  using SF = tg::StateFormat;
  // fp8 moments with a scale per block (the model updates its whole shard in one call, the
  // weight decay per tensor by ranges): the codes and every block's meta too.
  const std::pair<SF, SF> formats[] = {{SF::BF16, SF::FP16},    {SF::BF16SR, SF::BF16SR},
                                       {SF::FP16, SF::FP32},    {SF::FP8E4M3, SF::FP8E4M3},
                                       {SF::FP8E4M3, SF::FP16}, {SF::FP32, SF::FP8E5M2}};
  const tg::MomentBlocking blocking{32, tg::MomentScale::E8M0, tg::MomentExpand::Coat};
  auto bytes_of = [](tg::Backend& be, tg::Tensor t) {
    std::vector<char> h(t.bytes());
    be.download(h.data(), t);
    return h;
  };
  for (DType t : {DType::F32, DType::BF16})
    for (const auto& f : formats) {
      const SF fm = f.first, fv = f.second;  // not a structured binding: INFO captures them
      INFO(name(t) << " m " << tg::state_format_name(fm) << " v " << tg::state_format_name(fv));
      auto cpu = tg::make_cpu_backend();
      auto gpu = tg::make_cuda_backend();
      const tg::MomentFormats mf = tg::moment_formats(fm, fv, blocking);
      tg::GPT mc(cfg, *cpu, t, {}, mf), mg(cfg, *gpu, t, {}, mf);
      mc.init_random(3);
      mg.init_random(3);
      // The CPU's gradients on both, so that the update alone is compared.
      Batch bt = batch(B, T, cfg.vocab_size, 7);
      mc.zero_grad();
      mc.forward(bt.in.data(), bt.tgt.data(), B, T, 1.f);
      mc.backward();
      const std::vector<char> g = bytes_of(*cpu, mc.grads());
      gpu->upload(mg.grads(), g.data());
      for (int step = 1; step <= 3; step++) {
        tg::AdamWArgs a{3e-3f, 0.9f, 0.95f, 1e-8f,
                        0.1f,  0.5f, step,  tg::Rounding{t != DType::F32, 555, 0}};
        a.m_seed = 100 + step;
        a.v_seed = 200 + step;
        mc.adamw_step(a);
        mg.adamw_step(a);
      }
      CHECK(mg.adam_m().dtype == tg::moment_dtype(t, mf.m));
      CHECK(bytes_of(*cpu, mc.adam_m()) == bytes_of(*gpu, mg.adam_m()));
      CHECK(bytes_of(*cpu, mc.adam_v()) == bytes_of(*gpu, mg.adam_v()));
      for (bool second : {false, true}) {
        const tg::Tensor a = second ? mc.adam_v_meta() : mc.adam_m_meta(),
                         b = second ? mg.adam_v_meta() : mg.adam_m_meta();
        CHECK(bool(a) == tg::moment_is_blocked(second ? mf.v : mf.m));
        if (a) CHECK(bytes_of(*cpu, a) == bytes_of(*gpu, b));
      }
      CHECK(bytes_of(*cpu, mc.master()) == bytes_of(*gpu, mg.master()));
      CHECK(bytes_of(*cpu, mc.params()) == bytes_of(*gpu, mg.params()));
    }
}

TEST_CASE("cuda: training runs of the binary: GPU vs CPU losses, bit-exact resume") {
  TG_REQUIRE_GPU_BINARY();
  // mode, extra options, and the GPU-vs-CPU loss tolerance; fp8 quantizes, so an ulp of
  // difference in an activation can move a code (fp8 twice: delayed and current recipe).
  struct Case {
    const char* mode;
    const char* extra;
    double tol;
  };
  for (Case cs : {Case{"fp32", "", 1e-4}, Case{"bf16", "", 3e-2}, Case{"fp16", "", 3e-2},
                  Case{"bf16", " --precision.stochastic_rounding=true", 3e-2},
                  Case{"fp8", "", 5e-2}, Case{"fp8", " --precision.fp8.recipe=current", 5e-2}}) {
    const char* mode = cs.mode;
    auto train_args = [&](const std::string& dir, const std::string& dev, const char* m) {
      return ::train_args(dir, dev, m) + cs.extra;
    };
    INFO(std::string(mode) << cs.extra);
    tgt::TempDir gpu_full, gpu_part, cpu_full, cross;
    std::string out;
    REQUIRE(tgt::run_binary(train_args(gpu_full.path, "cuda", mode) + " --train.steps=12", &out) ==
            0);
    CHECK(out.find("device: cuda") != std::string::npos);
    if (std::string(mode) == "fp8") {  // the path is said at start
      INFO(out);
      CHECK(out.find("path: ") != std::string::npos);
    }
    REQUIRE(tgt::run_binary(train_args(cpu_full.path, "cpu", mode) + " --train.steps=12", &out) ==
            0);
    auto g = read_train_metrics(gpu_full / "metrics.jsonl");
    auto c = read_train_metrics(cpu_full / "metrics.jsonl");
    REQUIRE(g.size() == 12);
    REQUIRE(c.size() == 12);
    for (size_t i = 0; i < g.size(); i++) {
      INFO("step " << i + 1);
      CHECK(std::fabs(g[i]["loss"].get<double>() / c[i]["loss"].get<double>() - 1) < cs.tol);
    }
    // Stop the GPU run at step 6, resume it on the GPU: bit-identical to the full run.
    REQUIRE(tgt::run_binary(train_args(gpu_part.path, "cuda", mode) +
                                " --train.steps=12 --train.stop_at_step=6",
                            &out) == 0);
    int rc = tgt::run_binary(
        train_args(gpu_part.path, "cuda", mode) + " --train.steps=12 --checkpoint.resume=true",
        &out);
    INFO(out);
    REQUIRE(rc == 0);
    auto p = read_train_metrics(gpu_part / "metrics.jsonl");
    REQUIRE(p.size() == 12);
    for (size_t i = 0; i < 12; i++) CHECK(p[i]["loss"].get<double>() == g[i]["loss"].get<double>());
    CHECK(tg::read_model_file(gpu_full / "ckpt_00000012/model.bin").params ==
          tg::read_model_file(gpu_part / "ckpt_00000012/model.bin").params);
    // A GPU checkpoint resumes on the CPU (and continues close to the GPU run).
    REQUIRE(tgt::run_binary(
                train_args(cross.path, "cuda", mode) + " --train.steps=12 --train.stop_at_step=6",
                &out) == 0);
    rc = tgt::run_binary(
        train_args(cross.path, "cpu", mode) + " --train.steps=12 --checkpoint.resume=true", &out);
    REQUIRE(rc == 0);
    CHECK(out.find("resumed from") != std::string::npos);
    auto x = read_train_metrics(cross / "metrics.jsonl");
    REQUIRE(x.size() == 12);
    CHECK(std::fabs(x[11]["loss"].get<double>() / g[11]["loss"].get<double>() - 1) <
          std::max(cs.tol, 3e-2));
  }
}

// precision.loss_scale.on_device: the loss-scale decision on the device gives the host decision's
// run bit for bit (fp16, dynamic scaling with a short growth interval and hysteresis, one injected
// non-finite step, clipping).
TEST_CASE("cuda: the loss-scale decision on the device matches the host's") {
  TG_REQUIRE_GPU_BINARY();
  const std::string extra =
      " --train.steps=10 --precision.loss_scale.growth_interval=3 "
      "--precision.loss_scale.hysteresis=2 --precision.inject_nonfinite_step=4 "
      "--optim.grad_clip=0.5";
  tgt::TempDir host, dev;
  std::string out;
  REQUIRE(tgt::run_binary(train_args(host.path, "cuda", "fp16") + extra, &out) == 0);
  const int rc = tgt::run_binary(
      train_args(dev.path, "cuda", "fp16") + extra + " --precision.loss_scale.on_device=true",
      &out);
  REQUIRE(rc == 0);
  CHECK(out.find("loss scale: decided on the device") != std::string::npos);
  auto h = read_train_metrics(host / "metrics.jsonl"),
       d = read_train_metrics(dev / "metrics.jsonl");
  REQUIRE(h.size() == 10);
  REQUIRE(d.size() == 10);
  for (size_t i = 0; i < h.size(); i++) {
    INFO("step " << i + 1);
    CHECK(h[i]["loss"] == d[i]["loss"]);
    CHECK(h[i]["loss_scale"] == d[i]["loss_scale"]);
    CHECK(h[i]["skipped"] == d[i]["skipped"]);
    CHECK(h[i]["grad_norm"] == d[i]["grad_norm"]);
  }
}

TEST_CASE("cuda: a CPU checkpoint resumes on the GPU") {
  TG_REQUIRE_GPU_BINARY();
  tgt::TempDir run, ref;
  std::string out;
  REQUIRE(tgt::run_binary(
              train_args(run.path, "cpu", "bf16") + " --train.steps=8 --train.stop_at_step=4",
              &out) == 0);
  int rc = tgt::run_binary(
      train_args(run.path, "cuda", "bf16") + " --train.steps=8 --checkpoint.resume=true", &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("resumed from") != std::string::npos);
  REQUIRE(tgt::run_binary(train_args(ref.path, "cpu", "bf16") + " --train.steps=8", &out) == 0);
  auto a = read_train_metrics(run / "metrics.jsonl"), b = read_train_metrics(ref / "metrics.jsonl");
  REQUIRE(a.size() == 8);
  REQUIRE(b.size() == 8);
  CHECK(std::fabs(a[7]["loss"].get<double>() / b[7]["loss"].get<double>() - 1) < 3e-2);
}

TEST_CASE("cuda: fp8 trains at shapes the native FP8 GEMMs cannot take (the portable path)") {
  TG_REQUIRE_GPU_BINARY();
  tgt::TempDir run;
  std::string out;
  const int rc = tgt::run_binary(
      train_args(run.path, "cuda", "fp8") + " --model.n_embd=40 --train.steps=2", &out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(read_train_metrics(run / "metrics.jsonl").size() == 2);
}
