// prepare_command.cpp: `train_gpt prepare toy|text`: the synthetic task, or the bytes or GPT-2
// tokens of text, as token shards; it ends with the train command for what it wrote.
#include "commands.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_args.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/data/bpe.h"
#include "src/data/prepare.h"
#include "src/data/prepare_gpt2.h"

namespace tg {

namespace {

// The shard name: --name, else the input's file name without its extension.
std::string dataset_name(const Extras& ex, const std::string& input) {
  std::string name = extra(ex, "name");
  if (name.empty()) {
    std::string base = input;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    name = base.substr(base.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
    if (name.empty()) name = "text";
  }
  return name;
}

// The commands that train on what `prepare text` wrote and sample from the run: the config of
// a model for that tokenizer (configs/shakespeare.json for bytes, shakespeare_gpt2.json for
// GPT-2's tokens) with the data's shards and a run directory of its own, runs/<out's name>;
// where that config is not at hand (run from another directory), the program's defaults with
// the vocabulary size. `sample` finds the tokenizer in the checkpoint, which records it.
void print_train_command(const std::string& out, const std::string& name, bool gpt2) {
  const std::string config = gpt2 ? "configs/shakespeare_gpt2.json" : "configs/shakespeare.json";
  std::string run = out;
  while (run.size() > 1 && run.back() == '/') run.pop_back();
  run = "runs/" + run.substr(run.find_last_of('/') + 1);
  const std::string model = file_exists(config)
                                ? "--config " + config
                                : strf("--model.vocab_size %d", gpt2 ? kGpt2VocabSize : 256);
  printf(
      "train on it: ./train_gpt train %s --data.train '%s/%s_train_*.bin' --data.val "
      "'%s/%s_val_*.bin' --train.out_dir %s\n"
      "then sample: ./train_gpt sample --checkpoint %s --tokens 200 --prompt 'Your prompt'\n",
      model.c_str(), out.c_str(), name.c_str(), out.c_str(), name.c_str(), run.c_str(),
      run.c_str());
}

// `prepare text`: bytes (vocabulary 256) or GPT-2's BPE; ends with the train command for it.
int prepare_text_command(int argc, char** argv) {
  std::vector<ExtraOption> opts = {
      {"input", "text file; with --tokenizer gpt2 also a folder or a .jsonl file", ""},
      {"out", "output directory (default data/<name>)", ""},
      {"name", "shard name prefix (default: the input's name)", ""},
      {"tokenizer", "byte (vocabulary 256) or gpt2 (GPT-2's BPE, vocabulary 50257)", "byte"},
      {"vocab_dir", "gpt2: the folder of vocab.json and merges.txt", "data/gpt2"},
      {"errors", "gpt2: invalid UTF-8 is an error (strict) or U+FFFD (replace)", "strict"},
      {"split",
       "gpt2: a text file is one document (none) or one per paragraph, at blank lines "
       "(paragraphs); each document starts with <|endoftext|>",
       "none"},
      number_option("val_fraction", "fraction of the text kept for validation", "0.1", 0, 0.99),
      int_option("shard_tokens", "tokens per shard", "100000000", 1, 2e9),
      int_option("threads", "gpt2: tokenizer threads (0: all)", "0", 0, 4096)};
  Extras ex;
  if (!config_parse_args(nullptr, argc, argv, "train_gpt prepare text", opts, &ex)) return 0;
  const std::string input = extra(ex, "input"), tokenizer = extra(ex, "tokenizer");
  if (input.empty()) throw UsageError("prepare text: --input FILE is required");
  if (tokenizer != "byte" && tokenizer != "gpt2")
    throw UsageError(
        strf("prepare text: --tokenizer is byte or gpt2, not '%s'", tokenizer.c_str()));
  const std::string name = dataset_name(ex, input);
  std::string out = extra(ex, "out", "");
  if (out.empty()) out = "data/" + name;
  const double val_fraction = to_double("val_fraction", extra(ex, "val_fraction"));
  const int64_t shard_tokens = to_int("shard_tokens", extra(ex, "shard_tokens"));
  if (tokenizer == "byte") {
    if (extra(ex, "split") != "none")
      throw UsageError(
          "prepare text: --split needs --tokenizer gpt2 (bytes have no <|endoftext|> to "
          "separate documents)");
    prepare_text(input, out, name, val_fraction, shard_tokens);
    printf("wrote %s/%s_{train,val}_*.bin and meta.json\n", out.c_str(), name.c_str());
  } else {
    Gpt2PrepareOptions o;
    o.input = input;
    o.out_dir = out;
    o.name = name;
    o.vocab_dir = extra(ex, "vocab_dir");
    o.errors = extra(ex, "errors");
    o.split = extra(ex, "split");
    o.val_fraction = val_fraction;
    o.shard_tokens = shard_tokens;
    o.threads = int(to_int("threads", extra(ex, "threads")));
    const Gpt2PrepareResult r = prepare_text_gpt2(o);
    printf(
        "wrote %s/%s_train_*.bin (%d shard(s), %lld documents, %lld tokens), %s_val_*.bin (%d, "
        "%lld, %lld), gpt2_tokenizer.bin and meta.json; %.3f tokens per byte\n",
        out.c_str(), name.c_str(), r.train_shards, (long long)r.train_docs,
        (long long)r.train_tokens, name.c_str(), r.val_shards, (long long)r.val_docs,
        (long long)r.val_tokens, double(r.train_tokens + r.val_tokens) / double(r.bytes));
  }
  print_train_command(out, name, tokenizer == "gpt2");
  return 0;
}

}  // namespace

int cmd_prepare(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
      printf("usage: train_gpt prepare toy|text [options]  (see --help of each)\n");
      return 0;
    }
    throw UsageError("prepare: say what to prepare: toy or text");
  }
  std::string what = argv[1];
  Extras ex;
  if (what == "toy") {
    std::vector<ExtraOption> opts = {
        {"out", "output directory", "data/toy"},
        int_option("seed", "generator seed", "1337", 0, 9.007199254740992e15),
        int_option("train_tokens", "training tokens", "1048576", 1, 2e9),
        int_option("val_tokens", "validation tokens", "65536", 1, 2e9),
        int_option("record_len", "tokens per record (even; rows should hold whole records)", "16",
                   2, 1 << 20)};
    if (!config_parse_args(nullptr, argc - 1, argv + 1, "train_gpt prepare toy", opts, &ex))
      return 0;
    std::string out = extra(ex, "out");
    prepare_toy(out, uint64_t(to_int("seed", extra(ex, "seed"))),
                to_int("train_tokens", extra(ex, "train_tokens")),
                to_int("val_tokens", extra(ex, "val_tokens")),
                int(to_int("record_len", extra(ex, "record_len"))));
    printf("wrote %s/toy_train_000000.bin, toy_val_000000.bin and meta.json (loss floor %.4f)\n",
           out.c_str(), toy_loss_floor(int(to_int("record_len", extra(ex, "record_len")))));
    return 0;
  }
  if (what == "text") return prepare_text_command(argc - 1, argv + 1);
  throw UsageError(strf("prepare: unknown dataset kind '%s' (toy or text)", what.c_str()));
}

}  // namespace tg
