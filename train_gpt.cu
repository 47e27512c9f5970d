// train_gpt: trains GPT-2 style transformers from tokenized shards.
// The subcommands live in src/cli/commands.cpp; this file only hands argv over.
#include "src/cli/commands.h"

int main(int argc, char** argv) { return tg::run_main(argc, argv); }
