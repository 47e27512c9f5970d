#include "key_aliases.h"

#include <cctype>

namespace tg {

namespace {

struct KeyAlias {
  const char* alias;  // lower case, as other trainers spell it
  const char* key;    // train_gpt's key
  const char* note;   // how the two differ, when they do ("" when they mean the same)
};

// One row per name: what it is called elsewhere, and the key that holds it here.
const KeyAlias kAliases[] = {
    {"learning_rate", "optim.lr", ""},
    {"lr", "optim.lr", ""},
    {"max_lr", "optim.lr", ""},
    {"min_lr", "optim.final_lr_frac", "the final learning rate as a fraction of optim.lr"},
    {"warmup", "optim.warmup_steps", ""},
    {"warmup_steps", "optim.warmup_steps", ""},
    {"warmup_iters", "optim.warmup_steps", ""},
    {"lr_scheduler_type", "optim.schedule", ""},
    {"weight_decay", "optim.weight_decay", ""},
    {"max_grad_norm", "optim.grad_clip", ""},
    {"grad_clip", "optim.grad_clip", ""},
    {"adam_beta1", "optim.beta1", ""},
    {"adam_beta2", "optim.beta2", ""},
    {"adam_epsilon", "optim.eps", ""},
    {"batch_size", "data.batch_size", "rows per micro-batch"},
    {"per_device_train_batch_size", "data.batch_size", "rows per micro-batch and rank"},
    {"micro_batch_size", "data.batch_size", ""},
    {"gradient_accumulation_steps", "data.total_batch_tokens",
     "the tokens per optimizer step; micro-steps = total_batch_tokens / (batch_size x seq_len x "
     "ranks)"},
    {"total_batch_size", "data.total_batch_tokens", "in tokens"},
    {"block_size", "data.seq_len", "the model's longest sequence is model.max_seq_len"},
    {"sequence_length", "data.seq_len", ""},
    {"max_seq_length", "data.seq_len", ""},
    {"max_steps", "train.steps", ""},
    {"max_iters", "train.steps", ""},
    {"num_iterations", "train.steps", ""},
    {"seed", "train.seed", ""},
    {"output_dir", "train.out_dir", ""},
    {"out_dir", "train.out_dir", ""},
    {"eval_interval", "eval.every", ""},
    {"eval_steps", "eval.every", ""},
    {"eval_iters", "eval.batches", ""},
    {"val_loss_every", "eval.every", ""},
    {"dtype", "precision.mode", "fp32, bf16, fp16, fp8 or a recipe"},
    {"mixed_precision", "precision.mode", "fp32, bf16, fp16, fp8 or a recipe"},
    {"save_steps", "checkpoint.every", ""},
    {"checkpoint_every", "checkpoint.every", ""},
    {"resume_from_checkpoint", "checkpoint.resume", ""},
    {"init_from", "model.init_from", "an llm.c model file"},
    {"device", "train.device", ""},
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string alias_hint(const std::string& name, const std::string& prefix) {
  const size_t dot = name.rfind('.');
  const std::string leaf = lower(dot == std::string::npos ? name : name.substr(dot + 1));
  for (const KeyAlias& a : kAliases) {
    if (leaf != a.alias || lower(name) == a.key) continue;
    const std::string note = *a.note ? std::string("; ") + a.note : "";
    return " (did you mean '" + prefix + a.key + "'? train_gpt's name for " + a.alias + note + ")";
  }
  return "";
}

}  // namespace tg
