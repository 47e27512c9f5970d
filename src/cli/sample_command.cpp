// sample_command.cpp: `train_gpt sample`: text generated from a checkpoint, an llm.c model file
// or a Hugging Face GPT-2 directory, decoded with the tokenizer the model records.
#include "commands.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_args.h"
#include "src/base/common.h"
#include "src/base/rng.h"
#include "src/config/config.h"
#include "src/data/tokenizer.h"
#include "src/io/checkpoint.h"
#include "src/io/hf.h"
#include "src/model/model.h"
#include "src/model/sample.h"
#include "src/training/backend_factory.h"

namespace tg {

namespace {
// sample's threads: as asked, else one for a small model (a token's forward is too little work
// to split: on 2 shared cores 40 tokens of the toy model took 7-21 s on both threads against 0.4 s
// on one) and all (0) for a larger one.
int sample_threads(const GPTConfig& c, int asked) {
  if (asked > 0) return asked;
  return num_parameters(c) < 5000000 ? 1 : 0;
}

// The threads sample ran on and why, on stderr after the text (which stays alone on stdout).
void say_sample_threads(const GPTConfig& c, int asked, int threads) {
  fflush(stdout);
  fprintf(stderr, "sample: %s thread%s (%s; --threads sets them)\n",
          threads > 0 ? std::to_string(threads).c_str() : "all", threads == 1 ? "" : "s",
          asked > 0 ? "asked" : strf("a model of %zu parameters", num_parameters(c)).c_str());
}
}  // namespace

namespace {
// sample's tokenizer: the one the model records, or --tokenizer when it is the same; a model
// that records none (a checkpoint from before the record, an llm.c file) decodes bytes, or
// --tokenizer, as before, and says so.
Tokenizer sample_tokenizer(const std::string& option, const ModelFile& mf,
                           const std::string& model) {
  if (option.empty()) {
    if (mf.tokenizer.known()) return tokenizer_of_record(mf.tokenizer);
    fprintf(stderr,
            "sample: %s names no tokenizer (an llm.c file, or a checkpoint from before "
            "they recorded one): decoding bytes; --tokenizer DIR names its data's\n",
            model.c_str());
    return Tokenizer();
  }
  return tokenizer_of_record(
      tokenizer_option_record("sample", option, mf.tokenizer, model, mf.cfg.vocab_size, false));
}
}  // namespace

int cmd_sample(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"checkpoint", "checkpoint directory (or a run directory: its latest checkpoint)", ""},
      {"model", "an llm.c model file or a Hugging Face GPT-2 directory instead of a checkpoint",
       ""},
      {"tokenizer",
       "a dataset folder (its meta.json's tokenizer), a GPT-2 vocabulary folder or llm.c's "
       "gpt2_tokenizer.bin (decoding only); it must be the model's. Default: the one the model "
       "records (bytes for a model that records none)",
       ""},
      {"prompt", "prompt text", ""},
      int_option("tokens", "tokens to generate", "256", 1, 1 << 20),
      number_option("temperature", "softmax temperature (0: greedy)", "1.0", 0, 100),
      int_option("top_k", "sample from the k most likely tokens (0: all)", "0", 0, 1 << 24),
      int_option("seed", "sampling seed", "1337", 0, 9.007199254740992e15),
      int_option("threads",
                 "CPU threads (0: one for a model under 5M parameters, whose per-token work is "
                 "too small to split, else all)",
                 "0", 0, 4096),
      {"logits",
       "instead of generating, write the prompt's logits to this file (fp32, "
       "prompt tokens x vocab_size, row-major)",
       ""}};
  Extras ex;
  if (!config_parse_args(nullptr, argc, argv, "train_gpt sample", opts, &ex)) return 0;
  Config cfg;
  std::string ckpt = extra(ex, "checkpoint"), model_path = extra(ex, "model");
  if (ckpt.empty() == model_path.empty())
    throw UsageError("sample: give exactly one of --checkpoint DIR or --model FILE");
  ModelFile mf = ckpt.empty() ? read_model(model_path) : load_checkpoint_model(ckpt);
  cfg.train.device = DeviceChoice::Cpu;
  const int asked = int(to_int("threads", extra(ex, "threads")));
  cfg.train.threads = sample_threads(mf.cfg, asked);
  auto be = make_backend(cfg);
  GPT model(mf.cfg, *be);
  model.set_params(mf.params);
  const Tokenizer tok =
      sample_tokenizer(extra(ex, "tokenizer"), mf, ckpt.empty() ? model_path : ckpt);
  std::vector<int32_t> prompt;
  std::string prompt_text = extra(ex, "prompt");
  if (!prompt_text.empty())
    prompt = tok.encode(prompt_text);
  else
    prompt = {tok.byte_level() ? int32_t('\n') : mf.cfg.vocab_size - 1};  // newline / <|endoftext|>
  for (int32_t id : prompt)
    if (id >= mf.cfg.vocab_size)
      throw UsageError(strf("prompt token %d is outside the model's vocabulary", id));
  if (!extra(ex, "logits").empty()) {
    write_prompt_logits(model, prompt, extra(ex, "logits"));
    return 0;
  }
  Rng rng(uint64_t(to_int("seed", extra(ex, "seed"))));
  std::vector<int32_t> out = generate(model, prompt, int(to_int("tokens", extra(ex, "tokens"))),
                                      to_double("temperature", extra(ex, "temperature")),
                                      int(to_int("top_k", extra(ex, "top_k"))), rng);
  std::string text;
  for (int32_t id : out) text += tok.decode(id);
  printf("%s\n", printable(text).c_str());
  say_sample_threads(mf.cfg, asked, cfg.train.threads);
  return 0;
}

}  // namespace tg
