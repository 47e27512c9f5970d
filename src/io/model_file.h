// model_file.h: llm.c's GPT-2 model file (model.bin in a checkpoint, or a file of llm.c's
// own): the bytes train_gpt writes (fp32, version 3) and a checked read of either width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/data/tokenizer.h"
#include "src/model/model.h"

namespace tg {

constexpr int32_t kModelMagic = 20240326;

// The file's bytes for these fp32 parameters (a header, then the weights).
std::vector<char> model_file_bytes(const GPTConfig& cfg, const std::vector<float>& p);
void write_model_file(const std::string& path, const GPTConfig& cfg, const std::vector<float>& p);
struct ModelFile {
  GPTConfig cfg;
  std::vector<float> params;
  TokenizerRecord tokenizer;  // a checkpoint's or an export's; unknown for llm.c files
};
// Reads and checks a model file: magic, version, a buildable shape, the size it implies, every
// weight finite (bf16 files widened to fp32, exactly).
ModelFile read_model_file(const std::string& path);
// The same checks on a file's bytes already in memory; `path` is for messages.
ModelFile parse_model_file(const std::string& path, const std::vector<char>& bytes);
// The architecture fields of a model-file header (h[2..7]), unchecked.
GPTConfig model_header_config(const int32_t h[8]);
// Whether a shape read from a file is one this program can build: positive sizes, heads
// dividing the channels, Vp >= V, and bounds that keep the parameter count's arithmetic safe.
bool model_config_valid(const GPTConfig& c);

}  // namespace tg
