// commands.h: the commands of train_gpt, one handler each (command_table.h lists them with
// what they do and their options). Each takes the arguments from its name on and returns
// the exit code; errors propagate as Error (exit 1) or UsageError (exit 2), which run_main
// prints.
#pragma once

namespace tg {

int cmd_train(int argc, char** argv);    // commands.cpp
int cmd_prepare(int argc, char** argv);  // prepare_command.cpp
int cmd_sample(int argc, char** argv);   // sample_command.cpp
// A checkpoint or model file as a Hugging Face GPT-2 directory (src/io/hf.h) that
// transformers' GPT2LMHeadModel.from_pretrained loads (export.cpp).
int cmd_export(int argc, char** argv);
int cmd_compare(int argc, char** argv);  // compare_command.cpp
int cmd_report(int argc, char** argv);   // report_command.cpp
int cmd_memory(int argc, char** argv);   // memory_command.cpp
// The step time and throughput of the training step for a few model sizes on synthetic
// tokens, beside the BLAS sgemm rate that bounds them; --profile: per op (bench.cpp).
int cmd_bench(int argc, char** argv);
int cmd_docs(int argc, char** argv);  // docs.cpp

// `train_gpt ARGS...`: the command argv[1] names (train when it names none), its errors
// printed with their exit codes.
int run_main(int argc, char** argv);

}  // namespace tg
