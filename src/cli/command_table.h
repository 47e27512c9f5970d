// command_table.h: train_gpt's commands as one table: each row's name, handler, what it does
// in one line and its synopsis. Dispatch (run_main), `train_gpt --help`, the suggestion for a
// mistyped command and the README's Commands block (`train_gpt docs`) all read it, so a new
// command is one row.
#pragma once
#include <string>
#include <vector>

namespace tg {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);  // the arguments from the command's name on
  const char* summary;                // what it does, one line
  // Its forms after "train_gpt ", one per line (prepare has two), with every option.
  const char* synopsis;
};

// Every command, in the order the manual lists them; train first (the default command).
const std::vector<Command>& command_table();
// The row called `name`; nullptr when there is none.
const Command* find_command(const std::string& name);
// `train_gpt --help`: the commands, what each does, and their forms.
std::string usage_text();
// The README's Commands block: every form of every command, as a code block.
std::string commands_md();
// "unknown command 'x'; did you mean ...; the commands are train, ..." (a UsageError's text).
std::string unknown_command_text(const std::string& name);

}  // namespace tg
