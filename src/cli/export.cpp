#include "export.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/data/prepare.h"
#include "src/data/tokenizer.h"
#include "src/training/checkpoint.h"
#include "src/training/hf.h"

namespace tg {

namespace {

// The GPT-2 vocabulary folder of the dataset whose shards match `pattern` ("" when it is not
// GPT-2's, or its meta.json is not at hand).
std::string shards_vocab_dir(const std::string& pattern) {
  try {
    return dataset_vocab_dir(read_dataset_meta(pattern));
  } catch (const std::exception&) {
    return "";  // the shards are elsewhere now
  }
}

// --tokenizer (a dataset folder or a vocabulary folder), else the checkpoint's run's dataset.
std::string export_vocab_dir(const std::string& option, const std::string& model_path,
                             bool from_checkpoint) {
  if (!option.empty()) {
    if (file_exists(join_path(option, "meta.json"))) {
      const std::string v = shards_vocab_dir(join_path(option, "*.bin"));
      if (v.empty())
        throw UsageError(
            strf("export: --tokenizer %s: its meta.json names no GPT-2 tokenizer", option.c_str()));
      return v;
    }
    return option;  // vocab.json + merges.txt (BpeTokenizer says so if not)
  }
  if (!from_checkpoint) return "";
  const nlohmann::json state = read_checkpoint_state(dirname_of(model_path));
  const nlohmann::json train = state.value("config", nlohmann::json::object())
                                   .value("data", nlohmann::json::object())
                                   .value("train", nlohmann::json(""));
  return train.is_string() && !train.get<std::string>().empty()
             ? shards_vocab_dir(train.get<std::string>())
             : "";
}

}  // namespace

int cmd_export(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"checkpoint", "checkpoint directory (or a run directory: its latest checkpoint)", ""},
      {"model", "an llm.c model file (or a Hugging Face GPT-2 directory) instead", ""},
      {"out", "output directory: model.safetensors and config.json", ""},
      {"dtype", "tensor type in the file: fp32, bf16 or fp16 (rounded to nearest even)",
       dtype_name(DType::F32)},
      {"tokenizer",
       "GPT-2's tokenizer files beside the model, from a dataset folder or a vocabulary folder "
       "(default: the checkpoint's dataset, when it is GPT-2's)",
       ""}};
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
  ModelFile mf = ckpt.empty() ? read_model(model_path) : load_checkpoint_model(ckpt);
  export_hf(mf, out, dtype);
  const std::string vocab = export_vocab_dir(get("tokenizer"), model_path, !ckpt.empty());
  if (!vocab.empty()) {
    export_hf_tokenizer(out, vocab, mf.cfg.max_seq_len);
    printf("wrote GPT-2's tokenizer (vocab.json, merges.txt, tokenizer_config.json) from %s\n",
           vocab.c_str());
  }
  const GPTConfig& c = mf.cfg;
  printf(
      "wrote %s (%s, %d layers, %d heads, %d channels, vocabulary %d, %d positions) and "
      "%s\n",
      join_path(out, "model.safetensors").c_str(), dtype.c_str(), c.n_layer, c.n_head, c.n_embd,
      c.vocab_size, c.max_seq_len, join_path(out, "config.json").c_str());
  return 0;
}

}  // namespace tg
