// fuzz_checkpoint.cpp: libFuzzer target for the checkpoint loader (src/io/checkpoint.cpp:
// load_checkpoint), fed a whole directory (state.json, model.bin, optimizer files) through
// fuzz_load_checkpoint_dir.
// Input layout and what counts as a finding: fuzz_entries.h. Built by `make fuzz`.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tgfuzz::run_target(tgfuzz::fuzz_checkpoint, data, size);
}
