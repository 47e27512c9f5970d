// compare_command.cpp: `train_gpt compare`: its command line into a CompareRequest, run by
// src/report/compare.h (every mode x state x seed, then the report).
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "src/base/common.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/report/compare.h"

namespace tg {

namespace {

// The non-empty entries of a comma-separated list.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0, next; pos <= text.size(); pos = next + 1) {
    next = text.find(',', pos);
    if (next == std::string::npos) next = text.size();
    if (next > pos) out.push_back(text.substr(pos, next - pos));
  }
  return out;
}

// The command line into *r; false when --help was printed.
bool parse_compare_args(int argc, char** argv, CompareRequest* r) {
  std::vector<ExtraOption> opts = {
      {"modes", "comma-separated: " + compare_mode_names_text(), compare_default_modes()},
      {"states",
       "comma-separated state choices, each run with every mode (empty: the config's "
       "precision.state.*): " +
           compare_state_names_text(),
       ""},
      {"out", "output directory", "runs/compare"},
      int_option("seeds", "runs per mode, seeds train.seed, train.seed+1, ...", "3", 1, 1000),
      number_option("quality",
                    "time-to-quality target: within this fraction of the loss floor "
                    "(datasets with a floor)",
                    "0.02", 0, 10),
      number_option("quality_loss",
                    "time-to-quality target as a val loss (datasets without a "
                    "floor; 0: none)",
                    "0", 0, 1e6)};
  Extras ex;
  if (!config_parse_args(&r->base, argc, argv, "train_gpt compare", opts, &ex)) return false;
  r->out = extra(ex, "out");
  r->nseeds = int(to_int("seeds", extra(ex, "seeds")));
  r->quality = to_double("quality", extra(ex, "quality"));
  r->quality_loss = to_double("quality_loss", extra(ex, "quality_loss"));
  for (const std::string& m : split_list(extra(ex, "modes"))) {
    check_compare_mode(m);
    r->modes.push_back(m);
  }
  if (r->modes.empty()) throw UsageError("compare: --modes is empty");
  for (const std::string& st : split_list(extra(ex, "states"))) {
    check_compare_state(st);
    r->states.push_back(st);
  }
  return true;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  // Under mpirun every rank runs the same runs together (the trainer's data parallelism);
  // rank 0 alone speaks and writes the report.
  if (comm_rank() != 0 && !freopen("/dev/null", "w", stdout))
    throw Error("compare: cannot silence rank " + std::to_string(comm_rank()) + "'s output");
  CompareRequest r;
  if (!parse_compare_args(argc, argv, &r)) return 0;
  run_compare(r);
  return 0;
}

}  // namespace tg
