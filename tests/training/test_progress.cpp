// What a run prints as it goes: one line of config, and an estimate of the time left that
// waits for a few timed steps and leaves the warm-up out.
#include <doctest/doctest.h>

#include <string>

#include "src/config/config.h"
#include "src/training/progress.h"

using namespace tg;

TEST_CASE("progress: the config in one line, pointing at the full config.json") {
  Config c;
  c.train.out_dir = "runs/x";
  c.train.steps = 250;
  c.precision.mode = Mode::BF16;
  c.data.batch_size = 8;
  c.data.seq_len = 32;
  GPTConfig mc;
  mc.n_layer = 3;
  mc.n_head = 4;
  mc.n_embd = 48;
  mc.vocab_size = 256;
  const std::string line = config_line(c, mc, 1);
  INFO(line);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.rfind("config: bf16 | 250 steps", 0) == 0);
  CHECK(line.find("3 layers x 48 channels, 4 heads") != std::string::npos);
  CHECK(line.find("batch 8 x 32 |") != std::string::npos);
  CHECK(line.find("full config: runs/x/config.json") != std::string::npos);
  CHECK(config_line(c, mc, 2).find("batch 8 x 32 x 2 ranks") != std::string::npos);
}

TEST_CASE("progress: no ETA before five timed steps after the first; then the recent mean") {
  EtaClock eta;
  eta.add(9.0);  // the first step: warm-up, never counted
  for (int i = 0; i < 4; i++) {
    eta.add(0.1);
    CHECK(!eta.ready());
  }
  eta.add(0.1);
  REQUIRE(eta.ready());
  CHECK(eta.seconds_left(100) == doctest::Approx(10.0));
  // The mean of the last kWindow steps: older ones drop out.
  for (size_t i = 0; i < EtaClock::kWindow; i++) eta.add(0.2);
  CHECK(eta.seconds_left(10) == doctest::Approx(2.0));
}

TEST_CASE("progress: slow warm-up steps right after the first are left out, later slow ones kept") {
  EtaClock warm;
  warm.add(5.0);
  warm.add(4.0);  // the second step, still warming up (over 10x the median)
  for (int i = 0; i < 5; i++) warm.add(0.01);
  CHECK(warm.seconds_left(100) == doctest::Approx(1.0));
  EtaClock steady;
  steady.add(5.0);
  for (int i = 0; i < 5; i++) steady.add(0.01);
  steady.add(1.0);  // a slow step later on is real time
  CHECK(steady.seconds_left(6) == doctest::Approx(1.05));
}
