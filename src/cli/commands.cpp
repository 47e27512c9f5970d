// commands.cpp: the entrance: run_main dispatches to the command command_table.h names and
// turns its errors into messages and exit codes; and `train`, the default command.
#include "commands.h"

#include <cstdio>
#include <new>
#include <string>

#include "command_table.h"
#include "src/base/common.h"
#include "src/base/host_memory.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/training/signals.h"
#include "src/training/train.h"

namespace tg {

int cmd_train(int argc, char** argv) {
  Config cfg;
  if (!config_parse_args(&cfg, argc, argv, "train_gpt train", {}, nullptr)) return 0;
  run_training(cfg);
  return 0;
}

namespace {
// Prints the error; in a multi-process job, names the rank and ends every process so that
// none waits forever in a collective, unless every rank agreed to stop here (each prints its
// own error and exits plainly: an abort from the first could cut off another's message).
int fail(int code, const char* what) {
  if (comm_is_distributed()) {
    fprintf(stderr, "train_gpt: error (rank %d): %s\n", comm_rank(), what);
    fflush(stderr);
    if (!comm_stop_agreed()) comm_abort(code);
    comm_wait_for_all();
    return code;
  }
  fprintf(stderr, "train_gpt: error: %s\n", what);
  return code;
}
}  // namespace

namespace {
// After "out of host memory allocating N bytes for X": what to run and which keys shrink it.
std::string out_of_memory_advice(const std::string& purpose) {
  const std::string keys =
      purpose.find("activations") != std::string::npos
          ? "data.batch_size or data.seq_len (data.total_batch_tokens keeps the tokens per step), "
            "or the model (model.n_layer, model.n_embd)"
          : "the model (model.n_layer, model.n_embd), data.batch_size or data.seq_len, or shard "
            "the optimizer over ranks (train.zero_stage=1)";
  return "; `train_gpt memory` with this run's --config and --section.key options shows what "
         "the run needs and whether it fits this machine; to need less, shrink " +
         keys;
}
}  // namespace

int run_main(int argc, char** argv) {
  std::string sub = argc > 1 ? argv[1] : "";
  try {
    if (sub == "-h" || sub == "--help" || sub == "help") {
      printf("%s", usage_text().c_str());
      return 0;
    }
    if (sub.empty() || sub[0] == '-') return cmd_train(argc, argv);
    const Command* c = find_command(sub);
    if (!c) throw UsageError(unknown_command_text(sub));
    return c->run(argc - 1, argv + 1);
  } catch (const StoppedBySignal& e) {
    // The checkpoint is written and every rank stopped after the same step: a plain exit.
    if (comm_rank() == 0)
      printf("%s\nto continue: %s\n", e.what(), continue_command(argc, argv).c_str());
    fflush(stdout);
    return 128 + e.signal;
  } catch (const UsageError& e) {
    return fail(2, e.what());
  } catch (const OutOfMemory& e) {
    return fail(1, (e.what() + out_of_memory_advice(e.purpose)).c_str());
  } catch (const std::bad_alloc&) {
    return fail(1, ("out of host memory (std::bad_alloc)" + out_of_memory_advice("")).c_str());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}

}  // namespace tg

