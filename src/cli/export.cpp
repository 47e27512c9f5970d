#include "export.h"

#include <cstdio>
#include <string>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/training/checkpoint.h"
#include "src/training/hf.h"

namespace tg {

int cmd_export(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"checkpoint", "checkpoint directory (or a run directory: its latest checkpoint)", ""},
      {"model", "an llm.c model file (or a Hugging Face GPT-2 directory) instead", ""},
      {"out", "output directory: model.safetensors and config.json", ""},
      {"dtype", "tensor type in the file: fp32, bf16 or fp16 (rounded to nearest even)",
       dtype_name(DType::F32)}};
  std::vector<std::pair<std::string, std::string>> ex;
  if (!config_parse_args(nullptr, argc, argv, "train_gpt export", opts, &ex)) return 0;
  auto get = [&](const char* name) {
    for (const auto& kv : ex)
      if (kv.first == name) return kv.second;
    return std::string();
  };
  const std::string ckpt = get("checkpoint"), out = get("out"), dtype = get("dtype");
  std::string model_path = get("model");
  if (ckpt.empty() == model_path.empty())
    throw UsageError("export: give exactly one of --checkpoint DIR or --model FILE");
  if (out.empty()) throw UsageError("export: --out DIR is required");
  check_export_dtype(dtype);
  if (!ckpt.empty()) model_path = checkpoint_model_file(ckpt);
  ModelFile mf = read_model(model_path);
  export_hf(mf, out, dtype);
  const GPTConfig& c = mf.cfg;
  printf(
      "wrote %s (%s, %d layers, %d heads, %d channels, vocabulary %d, %d positions) and "
      "%s\n",
      join_path(out, "model.safetensors").c_str(), dtype.c_str(), c.n_layer, c.n_head, c.n_embd,
      c.vocab_size, c.max_seq_len, join_path(out, "config.json").c_str());
  return 0;
}

}  // namespace tg
