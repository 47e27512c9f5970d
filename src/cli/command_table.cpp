// command_table.cpp: the rows of command_table.h and the texts made from them.
#include "command_table.h"

#include "commands.h"
#include "src/base/common.h"
#include "src/base/suggest.h"

namespace tg {

namespace {

// Each form on its own line, prefixed.
std::string forms(const Command& c, const std::string& prefix) {
  std::string out, s = c.synopsis;
  for (size_t pos = 0; pos <= s.size();) {
    size_t end = s.find('\n', pos);
    if (end == std::string::npos) end = s.size();
    out += prefix + s.substr(pos, end - pos) + "\n";
    pos = end + 1;
  }
  return out;
}

}  // namespace

const std::vector<Command>& command_table() {
  static const std::vector<Command> table = {
      {"train", cmd_train, "train from a JSON config (the default command)",
       "[train] --config FILE [--section.key=value ...]"},
      {"prepare", cmd_prepare, "write token shards: the synthetic task, or the bytes or GPT-2 "
       "tokens of text",
       "prepare toy [--out data/toy] [--seed N] [--train_tokens N] [--val_tokens N] "
       "[--record_len 16]\n"
       "prepare text --input FILE|DIR|FILE.jsonl [--tokenizer byte|gpt2] [--out DIR] "
       "[--name NAME] [--val_fraction 0.1] [--shard_tokens N] [--threads N] "
       "[--vocab_dir data/gpt2] [--errors strict|replace] [--split none|paragraphs]"},
      {"sample", cmd_sample, "generate text from a checkpoint or a model file",
       "sample --checkpoint DIR|--model FILE [--prompt TEXT] [--tokens N] [--temperature T] "
       "[--top_k K] [--seed N] [--threads N] [--tokenizer DATA_DIR|VOCAB_DIR|gpt2_tokenizer.bin] "
       "[--logits FILE]"},
      {"export", cmd_export, "write a Hugging Face GPT-2 directory",
       "export --checkpoint DIR|--model FILE --out DIR [--dtype fp32|bf16|fp16] "
       "[--tokenizer DATA_DIR]"},
      {"compare", cmd_compare, "train each precision mode over several seeds, then report",
       "compare --config FILE [--modes fp32,bf16,fp16,fp16-noscale,fp8] "
       "[--states fp32,master-bf16sr,...] [--seeds 3] [--out runs/compare] [--quality 0.02] "
       "[--quality_loss L] [--section.key=value ...]"},
      {"report", cmd_report, "the comparison report of any runs",
       "report RUN_DIR... [--out report] [--reference MODE] [--quality 0.02] [--quality_loss L]"},
      {"memory", cmd_memory, "the memory plan per mode, and whether it fits this machine",
       "memory [--config FILE] [--preset gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--modes ...] "
       "[--zero_ranks N] [--states all|lean,...] [--section.key=value ...]"},
      {"bench", cmd_bench, "time the training step per model and mode (--profile: per op)",
       "bench [--threads N] [--iters N] [--repeats N] [--device cpu|cuda] "
       "[--model small|toy|l4|gpt2|gpt2-medium] [--modes ...] [--batch B] [--seq T] "
       "[--fp8_recipe delayed|current] [--fp8_fast_accum true|false] [--profile [--out DIR]]"},
      {"docs", cmd_docs, "rewrite (or --check) the manual's generated tables",
       "docs [--check] [--root DIR]"},
  };
  return table;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : command_table())
    if (name == c.name) return &c;
  return nullptr;
}

std::string usage_text() {
  std::string out =
      "train_gpt: train GPT-2 style transformers in mixed precision (CPU backend; CUDA "
      "backend)\n\ncommands:\n";
  for (const Command& c : command_table()) out += strf("  %-8s %s\n", c.name, c.summary);
  out += "\nusage:\n";
  for (const Command& c : command_table()) out += forms(c, "  train_gpt ");
  out +=
      "\n`train_gpt <command> --help` lists that command's options; `train_gpt train --help`\n"
      "lists every config key with its default.\n";
  return out;
}

std::string commands_md() {
  std::string out = "```\n";
  for (const Command& c : command_table()) out += forms(c, "train_gpt ");
  return out + "```\n";
}

std::string unknown_command_text(const std::string& name) {
  std::vector<std::string> names;
  std::string list;
  const auto& table = command_table();
  for (size_t i = 0; i < table.size(); i++) {
    names.push_back(table[i].name);
    list += (i == 0 ? "" : i + 1 == table.size() ? " and " : ", ") + std::string(table[i].name);
  }
  return strf("unknown command '%s'%s; the commands are %s (--help)", name.c_str(),
              did_you_mean(name, names).c_str(), list.c_str());
}

}  // namespace tg
