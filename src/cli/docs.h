// docs.h: the manual's tables that are facts of the code, generated from it so that they
// cannot drift: every config key with its type, default and meaning (docs/training.md), the
// config files in configs/ (README.md), what configs/default.json sets differently from
// the defaults (docs/training.md), and the commands' forms (README.md, from command_table.h). Each lies between two markers,
//   <!-- BEGIN generated: NAME (train_gpt docs) -->  ...  <!-- END generated: NAME -->
// `train_gpt docs` rewrites them; `train_gpt docs --check` changes nothing and exits 1 naming
// every file whose table differs (a make-test case runs it, so a new key or an edited config
// fails the tests until the manual follows).
#pragma once
#include <string>

namespace tg {

// The markdown of each block, from the code and from the config files under root/configs.
std::string config_keys_md();
std::string config_files_md(const std::string& root);
std::string default_config_md(const std::string& root);

// text with the block NAME replaced by `body`; UsageError when its markers are missing.
std::string replace_generated(const std::string& text, const std::string& name,
                              const std::string& body, const std::string& file);


}  // namespace tg
