// Names other trainers use for train_gpt's keys (src/config/key_aliases.h): an unknown key or
// option that is one of them names the key it means.
#include <doctest/doctest.h>

#include <string>

#include "src/base/common.h"
#include "src/config/config.h"
#include "src/config/key_aliases.h"
#include "tests/test_util.h"

TEST_CASE("config: common names of other trainers point at train_gpt's keys") {
  CHECK(tg::alias_hint("learning_rate", "--") ==
        " (did you mean '--optim.lr'? train_gpt's name for learning_rate)");
  CHECK(tg::alias_hint("optim.learning_rate", "").find("'optim.lr'") != std::string::npos);
  CHECK(tg::alias_hint("train.max_steps", "").find("'train.steps'") != std::string::npos);
  CHECK(tg::alias_hint("Batch_Size", "").find("'data.batch_size'") != std::string::npos);
  CHECK(tg::alias_hint("gradient_accumulation_steps", "").find("total_batch_tokens") !=
        std::string::npos);
  CHECK(tg::alias_hint("warmup", "").find("'optim.warmup_steps'") != std::string::npos);
  CHECK(tg::alias_hint("optim.lrr", "").empty());  // a misspelling: the near names' business
  // Through the config reader: a JSON key and a command-line key.
  tg::Config c;
  const std::string e = tgt::error_of([&] { tg::config_set(c, "optim.learning_rate", "0.1"); });
  CHECK(e.find("unknown config key 'optim.learning_rate'") != std::string::npos);
  CHECK(e.find("did you mean '--optim.lr'?") != std::string::npos);
}

TEST_CASE("cli: --learning_rate and --max_steps are refused naming the keys they mean") {
  std::string out;
  CHECK(tgt::run_binary("train --learning_rate=3e-4", &out) == 2);
  CHECK(out.find("did you mean '--optim.lr'?") != std::string::npos);
  CHECK(tgt::run_binary("train --train.max_steps=10", &out) == 2);
  CHECK(out.find("did you mean '--train.steps'?") != std::string::npos);
}
