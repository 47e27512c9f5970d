// fuzz_shard.cpp: libFuzzer target for the token-shard reader (src/data/data.cpp:
// shard_num_tokens, read_shard) and the DataLoader over the shard, including a restored
// position.
// Input layout and what counts as a finding: fuzz_entries.h. Built by `make fuzz`.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tgfuzz::run_target(tgfuzz::fuzz_shard, data, size);
}
