// key_aliases.h: the names users of PyTorch, Hugging Face's Trainer, nanoGPT and llm.c type for
// train_gpt's config keys (`--learning_rate`, `max_steps`, `block_size`, ...), so that an
// unknown key or option that is one of them names the key it means rather than a near spelling.
#pragma once
#include <string>

namespace tg {

// " (did you mean 'PREFIXkey'? ...)" when `name`, or its last dotted part, is a known alias
// (`optim.learning_rate` and `--learning_rate` both name optim.lr); "" otherwise. `prefix` is
// put before the key ("--" on the command line).
std::string alias_hint(const std::string& name, const std::string& prefix);

}  // namespace tg
