// fuzz_model_file.cpp: libFuzzer target for the llm.c model-file reader
// (src/io/checkpoint.cpp: read_model_file).
// Input layout and what counts as a finding: fuzz_entries.h. Built by `make fuzz`.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tgfuzz::run_target(tgfuzz::fuzz_model_file, data, size);
}
