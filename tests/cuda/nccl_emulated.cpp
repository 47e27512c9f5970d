// nccl_emulated.cpp: the NCCL communicator (src/backends/cuda/nccl_comm.cu) and the model's use of
// it (GPT::sync_grads, GPT::gather_params) on the CUDA backend, over the emulated NCCL of
// tests/cuda/nccl_emulation.cpp: a world of two ranks whose peer contributes this rank's data,
// so that an all-reduce doubles the gradients and an all-gather copies this rank's shard into
// every slot. The runtime runs queued work only when it is waited for
// (tests/cuda/stream_emulation.cpp), so a collective that does not wait for the backend's
// stream sums gradients the backward has not written yet, and the sums differ.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#ifdef TG_NCCL
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda_test_util.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/comm/comm.h"
#include "src/model/model.h"

namespace {

// The bootstrap of rank `rank` in an emulated world of `world` ranks, whose NCCL peers hold
// this rank's data (tests/cuda/nccl_emulation.cpp): the NCCL unique id it hands over stays as
// rank 0 made it, and no process ever goes.
class EmulatedWorld final : public tg::Bootstrap {
 public:
  EmulatedWorld(int rank, int world) : rank_(rank), world_(world) {}
  std::string name() const override { return "emulated world"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void share_from_rank0(void*, size_t) override {}
  int gone_rank() override { return -1; }
  [[noreturn]] void abort(int code) override {
    throw tg::Error(tg::strf("emulated world: abort(%d)", code));
  }

 private:
  int rank_, world_;
};

constexpr int kWorld = 2, kB = 2, kT = 8;

tg::GPTConfig tiny_gpt() { return tg::gpt_config(1, 2, 32, 64, 16); }

// The model's gradients (or compute weights) as doubles, read through the backend.
std::vector<double> read(tg::Backend& be, tg::Tensor t) {
  std::vector<char> b(t.bytes());
  be.download(b.data(), t);
  return tgc::decode(b, t.dtype, t.numel);
}

// One forward and backward of m on fixed tokens.
void backward_step(tg::GPT& m) {
  const std::vector<int32_t> in = tgc::random_tokens(kB * kT, 64, 5),
                             tgt = tgc::random_tokens(kB * kT, 64, 6);
  m.zero_grad();
  m.forward(in.data(), tgt.data(), kB, kT, 1.0f);
  m.backward();
}

}  // namespace

TEST_CASE("emulated: GPT::sync_grads over NCCL sums the finished gradients (2 ranks)") {
  auto be = tg::make_cuda_backend();
  for (tg::DType t : {tg::DType::F32, tg::DType::BF16}) {
    const std::string type = tg::dtype_name(t);
    CAPTURE(type);
    // The single-rank step: each rank's own gradients.
    tg::GPT alone(tiny_gpt(), *be, t, tg::DataParallel{});
    alone.init_random(7);
    backward_step(alone);
    const std::vector<double> g = read(*be, alone.grads());
    for (bool zero : {false, true})
      for (int rank = 0; rank < kWorld; rank++) {
        CAPTURE(zero);
        CAPTURE(rank);
        EmulatedWorld world(rank, kWorld);
        std::unique_ptr<tg::Comm> nccl = tg::make_nccl_comm(world, *be);
        tg::DataParallel dp;
        dp.comm = nccl.get();
        dp.zero = zero;
        dp.chunk = 1000;  // several staging chunks for the 16-bit gradients
        tg::GPT m(tiny_gpt(), *be, t, dp);
        m.init_random(7);
        backward_step(m);
        m.sync_grads();
        const std::vector<double> s = read(*be, m.grads());
        // Summed: everything, or under ZeRO-1 this rank's shard (the rest stays its own).
        const size_t lo = m.shard_begin(), hi = std::min(s.size(), lo + m.shard_size());
        REQUIRE(lo < hi);
        size_t wrong = 0, first = hi;
        for (size_t i = lo; i < hi; i++)
          if (s[i] != kWorld * g[i]) {
            wrong++;
            first = std::min(first, i);
          }
        INFO("first wrong gradient " << first << ": " << (first < hi ? s[first] : 0.0)
                                     << " instead of " << (first < hi ? kWorld * g[first] : 0.0));
        CHECK(wrong == 0);
      }
  }
  emu_test::check_emu();
}

namespace {
// The CPU's twin of the emulated NCCL world on host memory: rank `rank` of `world`, whose peers
// hold this rank's data (the collectives the gradient wire uses).
class MirrorComm final : public tg::Comm {
 public:
  MirrorComm(int rank, int world) : rank_(rank), world_(world) {}
  std::string name() const override { return "mirror"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce_sum(float* x, size_t n) override {
    for (size_t i = 0; i < n; i++) x[i] *= float(world_);
  }
  void all_reduce_sum(double* x, size_t n) override {
    for (size_t i = 0; i < n; i++) x[i] *= world_;
  }
  void all_reduce_max(float*, size_t) override {}
  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    const char* mine = in ? static_cast<const char*>(in) : static_cast<char*>(out) + rank_ * bytes;
    std::vector<char> copy(mine, mine + bytes);
    for (int r = 0; r < world_; r++)
      memcpy(static_cast<char*>(out) + r * bytes, copy.data(), bytes);
  }
  void all_to_all_bytes(const void* in, void* out, size_t bytes) override {
    all_gather_bytes(static_cast<const char*>(in) + rank_ * bytes, out, bytes);
  }
  void reduce_scatter_sum(const float*, float*, size_t) override { throw tg::Error("unused"); }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { throw tg::Error(tg::strf("abort(%d)", code)); }

 private:
  int rank_, world_;
};
}  // namespace

TEST_CASE("emulated: gradients in bf16 and fp8 on the wire over NCCL equal the CPU's (2 ranks)") {
  auto gpu = tg::make_cuda_backend();
  auto cpu = tg::make_cpu_backend();
  for (tg::DType t : {tg::DType::F32, tg::DType::BF16})
    for (tg::WireFormat f :
         {tg::WireFormat::BF16, tg::WireFormat::FP8E4M3, tg::WireFormat::FP8E5M2})
      for (bool zero : {false, true})
        for (int rank = 0; rank < kWorld; rank++) {
          const std::string type = tg::dtype_name(t), wire = tg::wire_format_name(f);
          CAPTURE(type);
          CAPTURE(wire);
          CAPTURE(zero);
          CAPTURE(rank);
          EmulatedWorld world(rank, kWorld);
          std::unique_ptr<tg::Comm> nccl = tg::make_nccl_comm(world, *gpu);
          MirrorComm mirror(rank, kWorld);
          std::vector<std::vector<double>> out;
          for (tg::Backend* be : {gpu.get(), cpu.get()}) {
            tg::DataParallel dp;
            dp.comm = be == gpu.get() ? nccl.get() : static_cast<tg::Comm*>(&mirror);
            dp.zero = zero;
            dp.chunk = 1000;  // several chunks, parts padded, FP8 blocks cut at part ends
            dp.grad_wire = f;
            tg::GPT m(tiny_gpt(), *be, t, dp);
            // The same gradients on both backends, an outlier and a tiny block among them.
            std::vector<float> g = tgc::randn(m.grads().numel, 3);
            for (size_t i = 0; i < g.size(); i++) g[i] *= i % 700 < 128 ? 1e-6f : 1e-2f;
            g[4321 % g.size()] = 30.f;
            be->upload(m.grads(), tgc::encode(g, t).data());
            m.sync_grads();
            out.push_back(read(*be, m.grads()));
            CHECK(m.take_comm_bytes() > 0);
          }
          size_t wrong = 0;
          for (size_t i = 0; i < out[0].size(); i++)
            wrong += !(out[0][i] == out[1][i] || (std::isnan(out[0][i]) && std::isnan(out[1][i])));
          CHECK(wrong == 0);
        }
  emu_test::check_emu();
}

TEST_CASE("emulated: ZeRO-1 weights gathered in fp8 over NCCL equal the CPU's (2 ranks)") {
  auto gpu = tg::make_cuda_backend();
  auto cpu = tg::make_cpu_backend();
  for (int rank = 0; rank < kWorld; rank++) {
    CAPTURE(rank);
    EmulatedWorld world(rank, kWorld);
    std::unique_ptr<tg::Comm> nccl = tg::make_nccl_comm(world, *gpu);
    MirrorComm mirror(rank, kWorld);
    std::vector<std::vector<double>> out;
    for (tg::Backend* be : {gpu.get(), cpu.get()}) {
      tg::DataParallel dp;
      dp.comm = be == gpu.get() ? nccl.get() : static_cast<tg::Comm*>(&mirror);
      dp.zero = true;
      dp.fp8_weights = true;
      tg::GPT m(tiny_gpt(), *be, tg::DType::BF16, dp);
      m.init_random(7);
      // The same gradients on both backends, one update of this rank's shard, then the gather
      // of every shard in fp8 (adamw_step's end).
      be->upload(m.grads(),
                 tgc::encode(tgc::randn(m.grads().numel, 4, 1e-2f), tg::DType::BF16).data());
      m.adamw_step({1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1, tg::Rounding{}});
      out.push_back(read(*be, m.params()));
      CHECK(m.take_comm_bytes() > 0);
    }
    CHECK(out[0] == out[1]);
  }
  emu_test::check_emu();
}

TEST_CASE("emulated: GPT::gather_params over NCCL gathers the updated shards (2 ranks)") {
  auto be = tg::make_cuda_backend();
  for (tg::DType t : {tg::DType::F32, tg::DType::BF16})
    for (int rank = 0; rank < kWorld; rank++) {
      const std::string type = tg::dtype_name(t);
      CAPTURE(type);
      CAPTURE(rank);
      EmulatedWorld world(rank, kWorld);
      std::unique_ptr<tg::Comm> nccl = tg::make_nccl_comm(world, *be);
      tg::DataParallel dp;
      dp.comm = nccl.get();
      dp.zero = true;
      tg::GPT m(tiny_gpt(), *be, t, dp);
      m.init_random(7);
      backward_step(m);  // (this rank's own gradients: the case is about the gather)
      const std::vector<double> before = read(*be, m.params());
      // The update of this rank's shard, then the all-gather in place (adamw_step's end).
      m.adamw_step({1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1, tg::Rounding{}});
      const std::vector<double> after = read(*be, m.params());
      const size_t S = m.shard_size(), mine = m.shard_begin(), n = after.size();
      size_t changed = 0, wrong = 0;
      for (size_t i = 0; i < S && mine + i < n; i++) changed += after[mine + i] != before[mine + i];
      // Every slot now holds this rank's updated shard (the emulated peer's is the same).
      for (int r = 0; r < kWorld; r++)
        for (size_t i = 0; i < S && size_t(r) * S + i < n && mine + i < n; i++)
          wrong += after[size_t(r) * S + i] != after[mine + i];
      CHECK(changed > S / 2);
      CHECK(wrong == 0);
    }
  emu_test::check_emu();
}

TEST_CASE("emulated: NCCL collectives on host buffers, staged through pinned memory (2 ranks)") {
  auto be = tg::make_cuda_backend();
  for (int rank = 0; rank < kWorld; rank++) {
    CAPTURE(rank);
    EmulatedWorld world(rank, kWorld);
    std::unique_ptr<tg::Comm> c = tg::make_nccl_comm(world, *be);
    const std::vector<float> x = tgc::randn(3000, 11);
    std::vector<float> h = x, want(x.size());
    c->all_reduce_sum(h.data(), h.size());
    for (size_t i = 0; i < x.size(); i++) want[i] = x[i] + x[i];
    CHECK(h == want);
    h = x;
    c->all_reduce_max(h.data(), h.size());
    CHECK(h == x);
    double d = 2.5;
    c->all_reduce_sum(&d, 1);
    CHECK(d == 5.0);
    // reduce-scatter: this rank's part of the input, summed over both ranks
    std::vector<float> part(x.size() / kWorld);
    c->reduce_scatter_sum(x.data(), part.data(), part.size());
    for (size_t i = 0; i < part.size(); i++) want[i] = 2 * x[rank * part.size() + i];
    CHECK(std::equal(part.begin(), part.end(), want.begin()));
    // all-gather: this rank's part (the peer's is the same) in every slot
    std::vector<float> all(part.size() * kWorld);
    c->all_gather(part.data(), all.data(), part.size());
    for (int r = 0; r < kWorld; r++)
      CHECK(std::equal(part.begin(), part.end(), all.begin() + r * part.size()));
    // all-to-all: the peer's part for this rank is this rank's own part (same data)
    std::vector<float> swapped(x.size());
    c->all_to_all_bytes(x.data(), swapped.data(), part.size() * sizeof(float));
    for (int r = 0; r < kWorld; r++)
      CHECK(std::equal(swapped.begin() + r * part.size(), swapped.begin() + (r + 1) * part.size(),
                       x.begin() + rank * part.size()));
    h = x;
    c->broadcast(h.data(), h.size() * sizeof(float), 1 - rank);
    CHECK(h == x);
    c->barrier();
  }
  emu_test::check_emu();
}

TEST_CASE("emulated: without libnccl, several GPUs are an error that says how to get it") {
  auto be = tg::make_cuda_backend();
  EmulatedWorld world(0, kWorld);
  setenv("TG_TEST_NO_NCCL", "1", 1);  // the loader's not-found path, as on a machine without it
  std::string msg;
  try {
    tg::make_nccl_comm(world, *be);
  } catch (const tg::Error& e) {
    msg = e.what();
  }
  unsetenv("TG_TEST_NO_NCCL");
  INFO(msg);
  CHECK(msg.find("libnccl.so.2") != std::string::npos);
  CHECK(msg.find("nvidia-nccl-cu13") != std::string::npos);
  CHECK(msg.find("LD_LIBRARY_PATH") != std::string::npos);
  CHECK(msg.find("NCCL_HOME") != std::string::npos);
  // Found again once the library is there (here: the emulated binary's own functions).
  CHECK(tg::make_nccl_comm(world, *be)->world() == kWorld);
  emu_test::check_emu();
}

#endif  // TG_NCCL
