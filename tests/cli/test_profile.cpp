// `train_gpt bench --profile` (src/cli/profile.cpp) on the CPU backend: every op of a step
// timed and set against its floor, the ops covering the step, the markdown and CSV written.
#include <doctest/doctest.h>

#include <set>
#include <sstream>

#include "src/backends/cpu/cpu_backend.h"
#include "src/cli/profile.h"
#include "tests/cli/cli_helpers.h"

using namespace tg;
using namespace tgt;

namespace {

const BenchCase kTiny = {"tiny (L2 C32)", 2, 32, 4, 96, 32, 4, 32};

size_t count_fields(const std::string& line) {
  size_t n = 1;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    if (c == ',' && !quoted) n++;
  }
  return n;
}

}  // namespace

TEST_CASE("profile: every op of a CPU step, timed, against measured ceilings") {
  auto be = make_cpu_backend();
  BenchArgs a;
  a.cfg.train.threads = 1;
  const ModeProfile p = profile_mode(*be, kTiny, bench_config(a, Mode::BF16), 1, 3);
  CHECK(p.mode == "bf16");
  CHECK(p.device == "cpu");
  CHECK(p.ceilings.copy_bytes_per_s > 1e8);   // any CPU copies more than 100 MB/s
  CHECK(p.ceilings.gemm_flops_per_s > 1e8);
  REQUIRE(!p.rows.empty());
  // The ops are inside the step and cover most of it (the rest: host work between ops).
  CHECK(p.ops_ms() <= p.profiled_ms * 1.0001);
  CHECK(p.ops_ms() >= 0.5 * p.profiled_ms);
  std::set<std::string> ops;
  for (const ProfileRow& r : p.rows) {
    ops.insert(r.op);
    CHECK(r.calls >= 1);
    if (r.kind == OpKind::Gemm) {
      CHECK(r.flops > 0);
      CHECK(floor_ms(r, p.ceilings) > 0);
    }
  }
  for (const char* op : {"encoder_forward", "layernorm_forward", "matmul_forward",
                         "attention_forward", "matmul_gelu_forward", "residual_layernorm_forward",
                         "classifier", "lm_head_backward", "matmul_backward", "gelu_backward",
                         "attention_backward", "layernorm_backward", "encoder_backward",
                         "unscale_check_norm", "adamw"})
    CHECK_MESSAGE(ops.count(op) == 1, op);
  // Over layers: one row per op, phase and shape, slowest first.
  const std::vector<ProfileRow> rows = rows_over_layers(p);
  REQUIRE(rows.size() < p.rows.size());
  for (size_t i = 1; i < rows.size(); i++) CHECK(rows[i - 1].ms >= rows[i].ms);
  const std::string md = profile_markdown(p, 5);
  CHECK(has(md, "### tiny (L2 C32), bf16, cpu"));
  CHECK(has(md, "| op | phase | shape |"));
  CHECK(has(md, "more rows; every op of every layer in profile.csv"));
  std::istringstream csv(profile_csv_header() + profile_csv_rows(p));
  std::string line;
  size_t lines = 0;
  while (std::getline(csv, line)) {
    CHECK(count_fields(line) == 17);
    lines++;
  }
  CHECK(lines == p.rows.size() + 1);
}

TEST_CASE("profile: train_gpt bench --profile writes profile.md and profile.csv") {
  TempDir d;
  std::string out;
  const int rc = run_binary("bench --profile --model toy --modes fp32,fp16 --iters 3 --threads 2 "
                            "--out " + d.path,
                            &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(has(out, "### toy default (L2 C64), fp32, cpu"));
  CHECK(has(out, "### toy default (L2 C64), fp16, cpu"));
  const std::string md = slurp(d / "profile.md"), csv = slurp(d / "profile.csv");
  CHECK(has(md, "not covered by any op"));
  CHECK(has(csv, "toy default (L2 C64),fp16,cpu,matmul_backward,gemm,backward,1,"));
}

TEST_CASE("profile: a bad --out is an error naming the folder") {
  std::string out;
  const int rc = run_binary("bench --profile --model toy --modes fp32 --iters 3 --threads 1 "
                            "--out /proc/no/such",
                            &out);
  CHECK(rc == 1);
  CHECK(has(out, "/proc/no/such"));
}
