// fuzz_config.cpp: libFuzzer target for the config readers (src/config/config.cpp:
// config_load_file, config_apply_json, config_set, config_parse_args) and config_validate.
// Input layout and what counts as a finding: fuzz_entries.h. Built by `make fuzz`.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tgfuzz::run_target(tgfuzz::fuzz_config, data, size);
}
