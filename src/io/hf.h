// hf.h: Hugging Face interop: our GPT as a transformers GPT2LMHeadModel directory.
//
// The directory holds model.safetensors (src/io/safetensors.h; __metadata__ {"format": "pt"},
// which transformers requires) and config.json (model_type gpt2). The tensors are named
// transformer.wte.weight, transformer.wpe.weight, transformer.h.<l>.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight,bias}, transformer.ln_f.{weight,bias};
// lm_head.weight is tied to wte and not stored. GPT-2's linears are Conv1D modules whose
// weight is [in, out], the transpose of our (out, in) matmul weights, so the four linear
// weights of each block are transposed on the way out and back on the way in. wte keeps
// only the vocabulary's V rows (our padding to Vp is an implementation detail); reading
// pads it again with zero rows.
//
// Reading also accepts what transformers and the hub write for GPT-2: names without the
// "transformer." prefix (GPT2Model), the attn.bias / attn.masked_bias buffers of older
// files (ignored), an lm_head.weight equal to wte, and F32, BF16 or F16 tensors (widened to
// fp32 exactly). Anything else is an error naming the file, the tensor and the problem.
#pragma once
#include <string>
#include <vector>

#include "checkpoint.h"

namespace tg {

// dtype: "fp32", "bf16" or "fp16" (rounded to nearest even; fp16 refuses values beyond
// its range). Writes out_dir/model.safetensors and out_dir/config.json.
// config.json's key of the tokenizer record (src/data/tokenizer.h) that export_hf writes.
constexpr const char* kHfTokenizerKey = "train_gpt_tokenizer";
void export_hf(const ModelFile& mf, const std::string& out_dir, const std::string& dtype);
// GPT-2's tokenizer beside an export, for AutoTokenizer.from_pretrained: vocab.json and
// merges.txt (the files of the vocabulary folder vocab_dir, checked by BpeTokenizer),
// tokenizer_config.json and special_tokens_map.json (<|endoftext|> as bos, eos and unk).
void export_hf_tokenizer(const std::string& out_dir, const std::string& vocab_dir, int max_seq_len);
// Throws a UsageError unless `dtype` is one export_hf writes.
void check_export_dtype(const std::string& dtype);

// The model of a config.json text and a safetensors file's bytes; `where` names them in
// messages (the directory). The parsing half of read_hf_model, for tests and fuzzing.
ModelFile parse_hf_model(const std::string& config_text, const std::vector<char>& safetensors,
                         const std::string& where);
// A Hugging Face GPT-2 directory, or its model.safetensors file (config.json beside it).
ModelFile read_hf_model(const std::string& path);
// Whether a path names a Hugging Face model (a directory or a .safetensors file) rather than
// an llm.c model file.
bool is_hf_model_path(const std::string& path);
// What model.init_from and `sample --model` accept: an llm.c model file or a Hugging Face
// GPT-2 directory.
ModelFile read_model(const std::string& path);

}  // namespace tg
