// The CPU backend's results depend on the number of parts (train.threads), not on how many
// threads run them, and the thread tuner picks the faster count from step times.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/parallel.h"
#include "src/base/rng.h"
#include "src/model/model.h"
#include "src/training/thread_tuner.h"

using namespace tg;

namespace {

// Five fp32 AdamW steps of a small model with `parts` parts run by `active` threads; the
// master weights afterwards.
std::vector<float> train_five_steps(int parts, int active, DType dtype) {
  cpu::set_parallelism(parts, active);
  auto be = make_cpu_backend();
  GPTConfig c = gpt_config(2, 4, 64, 256, 32);
  GPT model(c, *be, dtype);
  model.init_random(7);
  Rng r(11);
  std::vector<int32_t> in(8 * 32), tg(8 * 32);
  for (int s = 1; s <= 5; s++) {
    for (size_t i = 0; i < in.size(); i++) {
      in[i] = int32_t(r.below(256));
      tg[i] = int32_t(r.below(256));
    }
    model.zero_grad();
    model.forward(in.data(), tg.data(), 8, 32, 1.0f);
    model.backward();
    const double norm = model.check_grads(1.0).norm;
    model.adamw_step(
        {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1 ? float(1 / norm) : 1.0f, s, Rounding{}});
  }
  return model.params_f32();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("threads: the bits depend on the parts, not on the threads that run them") {
  for (DType dt : {DType::F32, DType::BF16}) {
    CAPTURE(dtype_name(dt));
    const std::vector<float> two = train_five_steps(2, 2, dt);
    CHECK(same_bits(two, train_five_steps(2, 1, dt)));
    const std::vector<float> four = train_five_steps(4, 4, dt);
    CHECK(same_bits(four, train_five_steps(4, 1, dt)));
    CHECK(same_bits(four, train_five_steps(4, 3, dt)));
  }
  cpu::set_parallelism(2, 2);
}

TEST_CASE("threads: the tuner switches to fewer threads when that is faster, and back") {
  ThreadTuner t(2, 10);
  // Alone: 2 threads take 20 ms, 1 thread 38 ms: the probes never switch.
  for (int i = 0; i < 100; i++) {
    const int n = t.next_threads();
    CHECK(t.report(n == 2 ? 0.020 : 0.038).empty());
  }
  CHECK(t.active() == 2);
  // A neighbour arrives: 2 threads 60 ms, 1 thread 36 ms; the next probe switches.
  std::string msg;
  int steps = 0;
  while (t.active() == 2 && steps++ < 30) {
    const int n = t.next_threads();
    msg = t.report(n == 2 ? 0.060 : 0.036);
  }
  CHECK(t.active() == 1);
  CHECK(steps <= 20);
  CHECK(msg.find("1 of 2") != std::string::npos);
  CHECK(msg.find("shared with another process") != std::string::npos);
  // It leaves: 2 threads are faster again; the tuner goes back.
  steps = 0;
  while (t.active() == 1 && steps++ < 30) {
    const int n = t.next_threads();
    msg = t.report(n == 2 ? 0.020 : 0.038);
  }
  CHECK(t.active() == 2);
  CHECK(msg.find("free again") != std::string::npos);
  // One part: nothing to tune.
  ThreadTuner one(1, 2);
  for (int i = 0; i < 20; i++) CHECK(one.next_threads() == 1);
}
