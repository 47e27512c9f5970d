// The NCCL communicator with world size 1 (one GPU), bootstrapped over the single-process
// communicator: every collective on device buffers (in place, as training uses them) and on
// host buffers (staged through the GPU), plus ZeRO-1 and plain data-parallel training of the
// CUDA backend through it, which must equal a run without a communicator. Several GPUs need
// several processes (mpirun -np N on a multi-GPU machine); scripts/gpu/gpu_check.sh says so.
#include "cuda_test_util.h"

#ifdef TG_NCCL
#include "src/comm/comm.h"
#include "src/model/model.h"

namespace {

// x on the backend's device, op applied there in place, read back.
std::vector<float> on_device_roundtrip(tg::Backend& be, tg::Comm& c, const std::vector<float>& x,
                                       void (*op)(tg::Comm&, float*, size_t)) {
  tg::Tensor d = be.alloc(tg::DType::F32, x.size());
  be.upload(d, x.data());
  op(c, d.as<float>(), x.size());
  std::vector<float> out(x.size());
  be.download(out.data(), d);
  be.free(d);
  return out;
}

}  // namespace

TEST_CASE("cuda: nccl every collective with one GPU, on device and host buffers") {
  TG_REQUIRE_GPU();
  // A single-process bootstrap (not the process-wide communicator, which tests leave alone).
  std::unique_ptr<tg::Comm> single = tg::make_single_comm();
  std::unique_ptr<tg::Bootstrap> boot = tg::make_comm_bootstrap(*single);
  auto be = tg::make_cuda_backend();
  std::unique_ptr<tg::Comm> c = tg::make_nccl_comm(*boot, *be);
  CHECK(c->world() == 1);
  CHECK(c->rank() == 0);
  CHECK(c->device_memory());
  const std::vector<float> x = tgc::randn(3000, 11);
  // Device memory, in place.
  CHECK(on_device_roundtrip(*be, *c, x,
                            [](tg::Comm& k, float* p, size_t n) { k.all_reduce_sum(p, n); }) == x);
  CHECK(on_device_roundtrip(*be, *c, x,
                            [](tg::Comm& k, float* p, size_t n) { k.all_reduce_max(p, n); }) == x);
  CHECK(on_device_roundtrip(*be, *c, x, [](tg::Comm& k, float* p, size_t n) {
          k.all_gather_bytes(nullptr, p, n * sizeof(float));
        }) == x);
  CHECK(on_device_roundtrip(*be, *c, x, [](tg::Comm& k, float* p, size_t n) {
          k.broadcast(p, n * sizeof(float), 0);
        }) == x);
  // Host memory, staged.
  std::vector<float> h = x;
  c->all_reduce_sum(h.data(), h.size());
  CHECK(h == x);
  double d = 2.5;
  c->all_reduce_sum(&d, 1);
  CHECK(d == 2.5);
  std::vector<float> out(x.size());
  c->reduce_scatter_sum(x.data(), out.data(), x.size());
  CHECK(out == x);
  c->all_gather(x.data(), out.data(), x.size());
  CHECK(out == x);
  c->barrier();
}

TEST_CASE("cuda: nccl a bf16 step through NCCL (plain and ZeRO-1) equals one without") {
  TG_REQUIRE_GPU();
  // A single-process bootstrap (not the process-wide communicator, which tests leave alone).
  std::unique_ptr<tg::Comm> single = tg::make_single_comm();
  std::unique_ptr<tg::Bootstrap> boot = tg::make_comm_bootstrap(*single);
  tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 256, 64);
  auto be = tg::make_cuda_backend();
  std::unique_ptr<tg::Comm> c = tg::make_nccl_comm(*boot, *be);
  const int B = 4, T = 64;
  std::vector<int32_t> in = tgc::random_tokens(B * T, 256, 5),
                       targets = tgc::random_tokens(B * T, 256, 6);
  std::vector<std::vector<float>> finals;
  for (int variant = 0; variant < 3; variant++) {
    tg::DataParallel dp;
    if (variant > 0) dp.comm = c.get();
    dp.zero = variant == 2;
    dp.chunk = 1000;  // many staging chunks
    tg::GPT m(cfg, *be, tg::DType::BF16, dp);
    m.init_random(42);
    for (int step = 1; step <= 3; step++) {
      m.zero_grad();
      m.forward(in.data(), targets.data(), B, T, 1.0f);
      m.backward();
      m.sync_grads();
      tg::GradCheck g = m.check_grads(1.0);
      REQUIRE(g.finite);
      m.adamw_step({1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step, tg::Rounding{}});
    }
    finals.push_back(m.params_f32());
  }
  // World size 1: the collectives are identities, so every variant is bit-identical.
  CHECK(finals[1] == finals[0]);
  CHECK(finals[2] == finals[0]);
}

#endif  // TG_NCCL
