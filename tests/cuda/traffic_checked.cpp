// traffic_checked.cpp: the cost model's counter (tests/cuda/traffic.h) on small kernels whose
// traffic is known by hand: a coalesced warp read spans 4 sectors of 32 bytes, a read with a
// lane every 32 bytes 32 sectors, one address read by every lane 1, a warp of 8 lanes 1; a
// 16-byte pack per lane (split by GCC into its elements) 16 sectors per warp, as nvcc's one
// 16-byte access would; a lane re-reading the same element in a loop counts each read; unique
// bytes count each byte once; a warp-wide access (a memory instruction of the warp) counts once
// whatever it spans. tests/cuda/cost_model_checked.cpp measures the real kernels.
#include "checked_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <vector>

using namespace emu_test;

namespace {

// out[i] = in[i * stride] (stride 0: every lane reads in[0]).
__global__ void strided_kernel(float* out, const float* in, int stride) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  out[i] = in[size_t(i) * size_t(stride)];
}

// out[i] = in[i] as 16-byte packs of 4 floats.
__global__ void pack_kernel(float* out, const float* in) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  gpu::store16(out + 4 * i, gpu::load16(in + 4 * i));
}

// out[i] = the sum of `times` reads of in[i] (volatile: the compiler keeps every read, as it
// would a re-read after a store that may alias).
__global__ void reread_kernel(float* out, const float* in, int times) {
  const int i = int(threadIdx.x);
  const volatile float* v = in;
  float s = 0;
  for (int k = 0; k < times; k++) s += v[i];
  out[i] = s;
}

// The one launch f() makes, counted.
template <typename F>
emu::traffic::LaunchTraffic one_launch(F&& f) {
  const std::vector<emu::traffic::LaunchTraffic> l = counted_launches(f);
  REQUIRE(l.size() == 1);
  return l[0];
}

TEST_CASE("traffic: sectors of coalesced, strided, broadcast and ragged warp accesses") {
  Dev<float> in(std::vector<float>(64 * 32, 1.f)), out(64);
  struct Case {
    int threads, stride;
    uint64_t read_sectors, unique_read;
  };
  // 64 threads (2 warps) or 40 (a warp and 8 lanes); each writes one float of out.
  for (const Case& c : {Case{64, 1, 2 * 4, 256}, Case{64, 8, 2 * 32, 256}, Case{64, 0, 2 * 1, 4},
                        Case{40, 1, 4 + 1, 160}}) {
    INFO("threads " << c.threads << ", stride " << c.stride);
    const auto t = one_launch([&] {
      gpu::launch(strided_kernel, 1, unsigned(c.threads), 0, nullptr, out.p, in.p, c.stride);
    });
    CHECK(t.read_bytes == uint64_t(4 * c.threads));
    CHECK(t.write_bytes == uint64_t(4 * c.threads));
    CHECK(t.read_sectors == c.read_sectors);
    CHECK(t.write_sectors == uint64_t(c.threads == 64 ? 8 : 5));
    CHECK(t.unique_read == c.unique_read);
    CHECK(t.unique_written == uint64_t(4 * c.threads));
    CHECK(t.read_accesses == 2);  // a warp-wide access per warp, however many sectors it spans
    CHECK(t.write_accesses == 2);
  }
}

TEST_CASE("traffic: a 16-byte pack per lane is one access; a re-read in a loop counts again") {
  Dev<float> in(std::vector<float>(256, 1.f)), out(256);
  const auto p = one_launch([&] { gpu::launch(pack_kernel, 1, 64, 0, nullptr, out.p, in.p); });
  CHECK(p.read_bytes == 1024);
  CHECK(p.read_sectors == 2 * 16);  // 512 bytes a warp
  CHECK(p.write_sectors == 2 * 16);
  CHECK(p.read_accesses == 2);  // one 16-byte access per lane: one instruction per warp
  CHECK(p.write_accesses == 2);
  const auto r = one_launch([&] { gpu::launch(reread_kernel, 1, 32, 0, nullptr, out.p, in.p, 3); });
  CHECK(r.read_sectors == 3 * 4);  // one warp, 128 bytes, read three times
  CHECK(r.unique_read == 128);
  CHECK(r.write_sectors == 4);
  CHECK(r.read_accesses == 3);
}

}  // namespace
