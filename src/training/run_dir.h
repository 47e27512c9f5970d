// run_dir.h: what a run directory (train.out_dir) may hold, so that two runs never mix.
//
// A fresh run refuses a directory that already holds another run's checkpoints, metrics or
// summary, and names the ways out: --checkpoint.resume=true to continue that run, another
// --train.out_dir, or --train.overwrite=true, which moves the old files into
// <out_dir>/old_run_<k>/ (nothing is deleted). A resumed run cuts metrics.jsonl and
// samples.txt back to the step of its checkpoint, so every step appears once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

// The files of an earlier run found in out_dir (checkpoints, metrics.jsonl, summary.json,
// samples.txt), by name; empty when there are none.
std::vector<std::string> earlier_run_files(const std::string& out_dir);

// Makes out_dir ready for a fresh run: UsageError when it holds another run (see above),
// unless `overwrite`, which moves that run's files aside; returns where they went ("" when
// nothing was moved).
std::string claim_fresh_run_dir(const std::string& out_dir, bool overwrite);

// Rewrites out_dir's metrics.jsonl and samples.txt without the records of steps after
// `step` (atomically; absent files are left absent).
void truncate_run_logs(const std::string& out_dir, int64_t step);

}  // namespace tg
