// The command table (src/cli/command_table.h): dispatch, --help, the suggestion for a mistyped
// command and the README's Commands block read it, and each row's synopsis names exactly the
// options its command takes (its own --help), so the one table cannot drift from the code.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <string>

#include "src/cli/command_table.h"
#include "tests/test_util.h"

namespace {

// The long options a text names: --name tokens (in --help, only where a line declares one),
// but for config keys (--section.key) and the options every command has (--help, --config).
std::set<std::string> own_options(const std::string& text, bool help) {
  std::set<std::string> out;
  static const std::regex in_form("--([a-z][a-z0-9_]*)([.a-z0-9_]*)");
  static const std::regex in_help("\\n *(?:-[a-z], )?--([a-z][a-z0-9_]*)([.a-z0-9_]*)");
  const std::regex& opt = help ? in_help : in_form;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), opt); it != std::sregex_iterator();
       ++it) {
    const std::string name = (*it)[1], rest = (*it)[2];
    if (rest.empty() && name != "help" && name != "config") out.insert(name);
  }
  return out;
}

// One form's words before its first option: "prepare toy" of "prepare toy [--out ...]";
// "[train] --config ..." is the train command.
std::string form_command(const std::string& form) {
  const std::string head = form.substr(0, form.find_first_of("[-"));
  if (head.empty()) return "train";
  return head.substr(0, head.find_last_not_of(' ') + 1);
}

}  // namespace

TEST_CASE("command table: each form's options are the ones its command's --help lists") {
  for (const tg::Command& c : tg::command_table()) {
    const std::string synopsis = c.synopsis;
    for (size_t pos = 0; pos <= synopsis.size();) {
      size_t end = synopsis.find('\n', pos);
      if (end == std::string::npos) end = synopsis.size();
      const std::string form = synopsis.substr(pos, end - pos);
      pos = end + 1;
      const std::string cmd = form_command(form);
      INFO(cmd);
      std::string help;
      REQUIRE(tgt::run_binary(cmd + " --help", &help) == 0);
      const std::set<std::string> in_form = own_options(form, false),
                                  in_help = own_options(help, true);
      std::string missing, extra;  // from the form; in the form but not taken
      for (const std::string& o : in_help)
        if (!in_form.count(o)) missing += " --" + o;
      for (const std::string& o : in_form)
        if (!in_help.count(o)) extra += " --" + o;
      INFO("not in the form:" << missing << "; not taken:" << extra);
      CHECK(in_form == in_help);
    }
  }
}

TEST_CASE("command table: dispatch, --help and a mistyped command read it") {
  std::string out;
  REQUIRE(tgt::run_binary("--help", &out) == 0);
  for (const tg::Command& c : tg::command_table()) {
    INFO(c.name);
    CHECK(out.find(std::string("  ") + c.name + " ") != std::string::npos);
    CHECK(out.find(c.summary) != std::string::npos);
    CHECK(tg::find_command(c.name) == &c);
  }
  CHECK(tg::find_command("comprae") == nullptr);
  CHECK(tgt::run_binary("comprae", &out) == 2);
  CHECK(out.find("unknown command 'comprae' (did you mean 'compare'?); the commands are train, "
                 "prepare, sample, export, compare, report, memory, bench and docs") !=
        std::string::npos);
  // The README's Commands block is the table's (train_gpt docs writes it).
  CHECK(tgt::slurp("README.md").find(tg::commands_md()) != std::string::npos);
}
