// fuzz_hf_model.cpp: libFuzzer target for the Hugging Face GPT-2 reader (src/io/hf.cpp:
// read_hf_model, over src/io/safetensors.cpp) and its config.json checks.
// Input layout and what counts as a finding: fuzz_entries.h. Built by `make fuzz`.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tgfuzz::run_target(tgfuzz::fuzz_hf_model, data, size);
}
