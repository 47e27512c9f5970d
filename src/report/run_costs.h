// run_costs.h: what a precision report says about where its runs ran and what their cost
// figures are: the device line, each run's machine load (summary.json's "machine", written by
// src/base/cpu_load.h's measure), the speed of a group from the runs that had their cores to
// themselves, and the memory a GPU run of a group's config plans (the memory planner), beside
// the CPU's measured peak.
#pragma once
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "report.h"

namespace tg {

// The runs' device in one paragraph: on the CPU, that the formats are emulated bit-faithfully
// and that speed and memory are this CPU's; on a GPU, which one.
std::string device_md(const std::vector<RunGroup>& groups);

// A run's load from its summary: "shared" (other processes took more than
// kSharedMachineShare of its cores' time), "own" (they did not) or "unknown" (not recorded).
std::string run_load(const nlohmann::json& summary);

// A group's speed: the mean tokens/s of its runs that had the cores to themselves (or whose
// load is unknown), or, where every run was shared, of all of them, flagged.
struct GroupSpeed {
  double tokens_per_second = NAN;
  int runs = 0, shared = 0, unknown = 0;
  bool from_shared = false;  // every run with a speed was shared
};
GroupSpeed group_speed(const nlohmann::json& runs);

// The planned GPU memory of the first run in `runs` whose config reads (0 if none).
size_t planned_gpu_bytes_of_runs(const nlohmann::json& runs);

// What GPT-2 1.5B (gpt2-xl: 48 layers, 25 heads, 1600 channels, vocabulary 50257) keeps per
// process in weights, master weights, gradients and Adam moments, in the mode and state
// formats (precision.state.*) of the first run in `runs` whose config reads (0 if none):
// the part of the memory the state formats change, at the size where it fills a GPU.
// Activations (which depend on the batch) are not in it; one process, no ZeRO-1.
size_t state_bytes_gpt2_xl_of_runs(const nlohmann::json& runs);
// Bytes one rank sends per step at GPT-2 1.5B with the first run's mode, ZeRO stage, state
// formats and gradient wire format over its number of ranks (summary.json's ranks): what
// GPT::take_comm_bytes would count (plan_comm_bytes); 0 when no run says, or for one rank.
uint64_t comm_bytes_gpt2_xl_of_runs(const nlohmann::json& runs);

// The paragraph under the table on the speed and memory columns: which runs were shared.
std::string costs_note_md(int shared_runs, int unknown_runs, int all_runs);

}  // namespace tg
