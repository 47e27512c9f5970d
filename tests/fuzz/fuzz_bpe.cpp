// fuzz_bpe.cpp: libFuzzer target for GPT-2's encoder and decoder (src/data/bpe.cpp) and the
// UTF-8 checks before them.
// Input layout and what counts as a finding: fuzz_entries.h. Built by `make fuzz`; needs
// data/gpt2/ (scripts/setup.sh --gpt2) or $TG_GPT2_VOCAB.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tgfuzz::run_target(tgfuzz::fuzz_bpe, data, size);
}
