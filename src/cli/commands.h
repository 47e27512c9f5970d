// commands.h: the subcommands of train_gpt. Each takes the arguments after its name and
// returns the exit code; errors propagate as Error (exit 1) or UsageError (exit 2).
#pragma once

namespace tg {

int cmd_train(int argc, char** argv);
int cmd_prepare(int argc, char** argv);
int cmd_sample(int argc, char** argv);
int cmd_memory(int argc, char** argv);
int run_main(int argc, char** argv);

}  // namespace tg
