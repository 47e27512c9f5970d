// export.cpp: `train_gpt export`: a checkpoint or model file as a Hugging Face GPT-2
// directory (src/io/hf.h) that transformers' GPT2LMHeadModel.from_pretrained loads.
#include "commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_args.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/data/data.h"
#include "src/data/prepare.h"
#include "src/data/tokenizer.h"
#include "src/io/checkpoint.h"
#include "src/io/hf.h"

namespace tg {

namespace {

// The tokenizer of a checkpoint from before the record: its run's dataset's, when its shards
// are still there (unknown otherwise).
TokenizerRecord run_data_tokenizer(const std::string& ckpt_model) {
  const nlohmann::json state = read_checkpoint_state(dirname_of(ckpt_model));
  const nlohmann::json train = state.value("config", nlohmann::json::object())
                                   .value("data", nlohmann::json::object())
                                   .value("train", nlohmann::json(""));
  if (!train.is_string() || train.get<std::string>().empty()) return {};
  try {
    const std::string pattern = train.get<std::string>();
    return dataset_tokenizer_record(read_dataset_meta(pattern),
                                    dirname_of(expand_glob(pattern, "training shard")[0]));
  } catch (const std::exception&) {
    return {};  // the shards are elsewhere now
  }
}

// The tokenizer to write beside the model: --tokenizer (a dataset folder or a vocabulary
// folder), which must be the model's when the model records one and must have the model's
// vocabulary; else the model's own record (a checkpoint's run's data for older checkpoints).
TokenizerRecord export_tokenizer(const std::string& option, const ModelFile& mf,
                                 const std::string& ckpt_model) {
  if (option.empty())
    return mf.tokenizer.known() || ckpt_model.empty() ? mf.tokenizer
                                                      : run_data_tokenizer(ckpt_model);
  return tokenizer_option_record("export", option, mf.tokenizer, "the model", mf.cfg.vocab_size,
                                 true);
}

// The GPT-2 vocabulary folder (vocab.json, merges.txt) of a record's files.
std::string vocab_dir_of(const TokenizerRecord& r) {
  const std::string meta = join_path(r.files, "meta.json");
  if (!file_exists(meta)) return r.files;  // a vocabulary folder (BpeTokenizer checks it)
  return dataset_vocab_dir(read_meta_file(meta));
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
       "the tokenizer to write beside the model, a dataset folder or a vocabulary folder; it "
       "must be the model's (default: the one the model records, or its run's dataset's)",
       ""}};
  Extras ex;
  if (!config_parse_args(nullptr, argc, argv, "train_gpt export", opts, &ex)) return 0;
  const std::string ckpt = extra(ex, "checkpoint"), out = extra(ex, "out"), dtype = extra(ex, "dtype");
  std::string model_path = extra(ex, "model");
  if (ckpt.empty() == model_path.empty())
    throw UsageError("export: give exactly one of --checkpoint DIR or --model FILE");
  if (out.empty()) throw UsageError("export: --out DIR is required");
  check_export_dtype(dtype);
  if (!ckpt.empty()) model_path = checkpoint_model_file(ckpt);
  ModelFile mf = ckpt.empty() ? read_model(model_path) : load_checkpoint_model(ckpt);
  mf.tokenizer = export_tokenizer(extra(ex, "tokenizer"), mf, ckpt.empty() ? "" : model_path);
  if (mf.tokenizer.kind == "gpt2" && mf.tokenizer.vocab_size != mf.cfg.vocab_size)
    throw UsageError(strf("export: the model's vocabulary is %d, but its tokenizer is %s",
                          mf.cfg.vocab_size, describe_tokenizer(mf.tokenizer).c_str()));
  export_hf(mf, out, dtype);
  if (mf.tokenizer.kind == "gpt2") {
    const std::string vocab = vocab_dir_of(mf.tokenizer);
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
