// test_layout.cpp: the shape of src/ that docs/architecture.md describes, checked on the
// source files themselves so that it cannot drift.
//
// - src/ has at most 12 top-level entries, one folder per subsystem.
// - Includes point down or sideways: each folder names the folders it may include (kAllowed
//   below, in the order of the layers); an include of src/<folder>/... from a folder not
//   allowed to see it fails, naming the file, the line and the include.
// - The Trainer (trainer.h/.cpp) does not include the loop's header (train.h), which once
//   made the two include each other.
// - No function in src/ is over 80 lines, the config key table excepted (a table of rows,
//   one per key, read as data); no file over 600.
// - A precision mode's name is spelled in the registry only (src/numerics/precision_mode.cpp):
//   no other file has a string literal equal to a mode name, except the storage types' own
//   names (fp32, bf16, fp16) where they name storage types: dtype_name in src/base/common.cpp
//   and the registries of optimizer-state, master, wire and element formats
//   (src/numerics/{state,master,wire}_format.cpp, elem_format.h), and "auto",
//   which is also a value of other keys (train.device, loss scaling, cpu.gemm...); and no file
//   compares a mode read as a string.
// - Only src/precision/ and src/config/ read the precision.* keys (cfg.precision): the rest of
//   src/ reads PrecisionSpec, the keys read once (src/precision/precision.h).
//
// The function scan relies on the code's format (clang-format, Google style, `make format`):
// a function defined at namespace scope starts at column 0 and its body closes with a "}" at
// column 0; functions defined inside a class body are indented and not scanned (a class's
// inline members are its short accessors).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/numerics/precision_mode.h"

namespace fs = std::filesystem;

namespace {

fs::path repo_root() {
  fs::path p = fs::path(__FILE__).parent_path().parent_path();
  return p.empty() ? fs::path(".") : p;
}

// Which src/ folders each folder may include, lowest layer first. A folder may always include
// its own files.
const std::map<std::string, std::set<std::string>>& allowed_includes() {
  static const std::map<std::string, std::set<std::string>> kAllowed = {
      {"base", {}},
      {"comm", {"base"}},
      {"numerics", {"base"}},
      {"data", {"base"}},
      {"backends", {"base", "comm", "numerics"}},
      {"config", {"base", "numerics"}},
      {"model", {"base", "comm", "numerics", "backends", "config"}},
      {"io", {"base", "numerics", "data", "model"}},
      {"precision", {"base", "comm", "numerics", "backends", "model", "config", "data", "io"}},
      {"training",
       {"base", "comm", "numerics", "backends", "model", "config", "data", "io", "precision"}},
      {"report",
       {"base", "comm", "numerics", "backends", "model", "config", "data", "io", "precision",
        "training"}},
      {"cli",
       {"base", "comm", "numerics", "backends", "model", "config", "data", "io", "precision",
        "training", "report"}},
  };
  return kAllowed;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cpp" || e == ".cu" || e == ".cuh";
}

// Every source file under src/, as paths relative to the repository root.
std::vector<fs::path> src_files() {
  std::vector<fs::path> files;
  const fs::path root = repo_root();
  for (const auto& e : fs::recursive_directory_iterator(root / "src"))
    if (e.is_regular_file() && is_source(e.path())) files.push_back(fs::relative(e.path(), root));
  std::sort(files.begin(), files.end());
  return files;
}

// The folder of src/ a repository path lies in ("" for none).
std::string src_folder(const fs::path& p) {
  auto it = p.begin();
  if (it == p.end() || *it != "src") return "";
  ++it;
  return it == p.end() ? "" : it->string();
}

// The target of `#include "..."` on `line`, as a repository path (the includes are written
// from the repository root, or relative to the including file's folder).
std::string include_target(const std::string& line, const fs::path& file) {
  const size_t h = line.find_first_not_of(" \t");
  if (h == std::string::npos || line.compare(h, 8, "#include") != 0) return "";
  const size_t a = line.find('"'), b = line.rfind('"');
  if (a == std::string::npos || b <= a) return "";
  const std::string inc = line.substr(a + 1, b - a - 1);
  const fs::path beside = (file.parent_path() / inc).lexically_normal();
  if (fs::exists(repo_root() / beside)) return beside.string();
  return fs::path(inc).lexically_normal().string();
}

// A line that opens a function body at column 0: the end of a signature (its first line at
// column 0, the rest indented) that ends in "{" and is not a type, namespace or initializer.
bool opens_type_or_data(const std::string& first) {
  for (const char* k : {"namespace", "struct ", "class ", "enum ", "union ", "extern \"C\""})
    if (first.rfind(k, 0) == 0) return true;
  return first.find(" = ") != std::string::npos || first.find("= {") != std::string::npos;
}

struct LongFunction {
  std::string where;
  int lines;
};

// The functions of `file` longer than `limit` lines (signature to closing brace).
std::vector<LongFunction> long_functions(const fs::path& file, int limit) {
  const std::vector<std::string> lines = read_lines(repo_root() / file);
  std::vector<LongFunction> found;
  int start = -1;  // first line of the current signature, -1 when none
  bool in_body = false;
  for (int i = 0; i < int(lines.size()); i++) {
    const std::string& l = lines[i];
    const bool col0 = !l.empty() && l[0] != ' ' && l[0] != '#' && l[0] != '/';
    if (in_body) {
      if (!l.empty() && l[0] == '}') {
        const int n = i - start + 1;
        if (n > limit)
          found.push_back(
              {file.string() + ":" + std::to_string(start + 1) + " " + lines[start], n});
        in_body = false;
        start = -1;
      }
      continue;
    }
    if (start < 0 && col0 && l[0] != '}' && l.rfind("template", 0) != 0) start = i;
    if (start < 0) continue;
    const size_t last = l.find_last_not_of(" \t");
    if (last == std::string::npos) {
      start = -1;
      continue;
    }
    if (l[last] == ';' || l[last] == '}') {
      start = -1;
      continue;
    }
    if (l[last] == '{') {
      if (opens_type_or_data(lines[start]))
        start = -1;
      else
        in_body = true;
    }
  }
  return found;
}

// A C++ source split into its code (comments dropped, each literal left as empty quotes) and
// its string literals, in order (escapes kept as written; no raw strings in src/).
struct ScannedCode {
  std::string code;
  std::vector<std::string> literals;
};

ScannedCode scan_code(const std::string& text) {
  ScannedCode out;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == std::string::npos) break;
      out.code += '\n';
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i = text.find("*/", i + 2);
      if (i == std::string::npos) break;
      i++;
    } else if (c == '"' || c == '\'') {
      std::string lit;
      size_t j = i + 1;
      for (; j < text.size() && text[j] != c; j++) {
        if (text[j] == '\\') lit += text[j++];
        lit += text[j];
      }
      if (c == '"') out.literals.push_back(lit);
      out.code += std::string(2, c);
      i = j;
    } else {
      out.code += c;
    }
  }
  return out;
}

std::vector<std::string> string_literals(const std::string& code) {
  return scan_code(code).literals;
}

// The lines of `file` whose code (not a comment, not a string) reads the precision.* keys:
// `.precision` or `->precision` as a member.
std::vector<int> precision_key_reads(const std::string& text) {
  const std::string code = scan_code(text).code;
  std::vector<int> lines;
  for (const std::string member : {".precision", "->precision"}) {
    for (size_t at = code.find(member); at != std::string::npos;
         at = code.find(member, at + 1)) {
      const size_t end = at + member.size();
      const bool whole = end == code.size() || !(isalnum((unsigned char)code[end]) || code[end] == '_');
      if (whole) lines.push_back(1 + int(std::count(code.begin(), code.begin() + long(at), '\n')));
    }
  }
  return lines;
}

std::string slurp_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("layout: src/ has at most 12 top-level entries") {
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(repo_root() / "src"))
    entries.push_back(e.path().filename().string());
  INFO("src/ holds: " << [&] {
    std::string s;
    for (const auto& e : entries) s += e + " ";
    return s;
  }());
  CHECK(entries.size() <= 12);
  for (const auto& [folder, deps] : allowed_includes())
    CHECK_MESSAGE(fs::is_directory(repo_root() / "src" / folder), "src/" << folder);
}

TEST_CASE("layout: includes in src/ point down or sideways") {
  const auto& allowed = allowed_includes();
  int files = 0, includes = 0;
  for (const fs::path& f : src_files()) {
    const std::string from = src_folder(f);
    REQUIRE_MESSAGE(allowed.count(from), f << " lies in a folder the layering does not name");
    files++;
    const std::vector<std::string> lines = read_lines(repo_root() / f);
    for (size_t i = 0; i < lines.size(); i++) {
      const std::string target = include_target(lines[i], f);
      const std::string to = src_folder(target);
      if (to.empty() || to == from) continue;
      includes++;
      CHECK_MESSAGE(allowed.at(from).count(to), f.string() << ":" << i + 1 << " includes " << target
                                                           << " (src/" << from
                                                           << " may not include src/" << to << ")");
    }
  }
  CHECK(files > 100);
  CHECK(includes > 100);
}

TEST_CASE("layout: the training loop and the Trainer do not include each other") {
  // run_training (train.cpp) drives a Trainer, so it includes trainer.h; nothing of the
  // Trainer reaches back into the loop.
  auto includes = [](const fs::path& f, const std::string& header) {
    for (const std::string& l : read_lines(repo_root() / f))
      if (include_target(l, f) == header) return true;
    return false;
  };
  for (const char* f : {"src/training/trainer.cpp", "src/training/trainer.h"})
    CHECK_MESSAGE(!includes(f, "src/training/train.h"), f << " includes train.h");
  CHECK_FALSE(includes("src/training/train.h", "src/training/trainer.h"));
}

TEST_CASE("layout: no function in src/ is over 80 lines (the config key table excepted)") {
  const std::string table = "src/config/config.cpp";
  int scanned = 0;
  for (const fs::path& f : src_files()) {
    scanned++;
    for (const LongFunction& lf : long_functions(f, 80)) {
      if (f == table && lf.where.find("table()") != std::string::npos) continue;
      const std::string what = lf.where + ": " + std::to_string(lf.lines) + " lines";
      FAIL_CHECK(what);
    }
  }
  CHECK(scanned > 100);
}

TEST_CASE("layout: no file in src/ is over 600 lines") {
  // No exceptions: the key table (src/config/config.cpp) is under it since its readers moved out.
  int scanned = 0;
  for (const fs::path& f : src_files()) {
    scanned++;
    const size_t n = read_lines(repo_root() / f).size();
    if (n > 600) FAIL_CHECK(f.string() << ": " << n << " lines (split it along its seams)");
  }
  CHECK(scanned > 100);
}

TEST_CASE("layout: the function scan finds a long function and ignores types and tables") {
  const fs::path tmp = fs::path("build") / "layout_probe.cpp";
  fs::create_directories(repo_root() / "build");
  std::ofstream out(repo_root() / tmp);
  out << "namespace tg {\nstruct S {\n  int a;\n};\nconst int kT[] = {\n";
  for (int i = 0; i < 100; i++) out << "    " << i << ",\n";
  out << "};\nint long_one(int x,\n             int y) {\n";
  for (int i = 0; i < 85; i++) out << "  x += y;\n";
  out << "  return x;\n}\nint short_one() {\n  return 1;\n}\n}  // namespace tg\n";
  out.close();
  const std::vector<LongFunction> found = long_functions(tmp, 80);
  REQUIRE(found.size() == 1);
  CHECK(found[0].where.find("long_one") != std::string::npos);
  CHECK(found[0].lines == 89);
  fs::remove(repo_root() / tmp);
}

TEST_CASE("layout: a precision mode's name is spelled in the registry only") {
  const std::string registry = "src/numerics/precision_mode.cpp", types = "src/base/common.cpp",
                    state_formats = "src/numerics/state_format.cpp",
                    master_formats = "src/numerics/master_format.cpp",
                    wire_formats = "src/numerics/wire_format.cpp",
                    elem_formats = "src/numerics/elem_format.h";
  std::set<std::string> modes;
  for (const tg::ModeInfo& m : tg::precision_modes()) modes.insert(m.name);
  REQUIRE(modes.size() >= 10);
  int spelled_in_registry = 0;
  for (const fs::path& f : src_files()) {
    const std::string code = slurp_file(repo_root() / f);
    for (const std::string& lit : string_literals(code)) {
      if (!modes.count(lit)) continue;
      if (f == registry) {
        spelled_in_registry++;
        continue;
      }
      const bool storage_type = lit == "fp32" || lit == "bf16" || lit == "fp16";
      if (lit == "auto" ||
          (storage_type && (f == types || f == state_formats || f == master_formats ||
                            f == wire_formats || f == elem_formats)))
        continue;
      FAIL_CHECK(f.string() << " spells the mode name \"" << lit << "\" (use Mode and mode_name)");
    }
    // A mode read back as a string and compared: precision.mode == "..." and the like.
    for (const char* p : {"mode == \"", "mode != \"", "mode) == \"", "mode) != \""})
      CHECK_MESSAGE(code.find(p) == std::string::npos, f << " compares a mode string: " << p);
  }
  CHECK(spelled_in_registry == int(modes.size()));
}

TEST_CASE("layout: only src/precision/ and src/config/ read the precision keys") {
  // Everything else reads PrecisionSpec (src/precision/precision.h), the keys read once. No
  // exceptions.
  int files = 0;
  for (const fs::path& f : src_files()) {
    const std::string folder = src_folder(f);
    if (folder == "precision" || folder == "config") continue;
    files++;
    for (int line : precision_key_reads(slurp_file(repo_root() / f)))
      FAIL_CHECK(f.string() << ":" << line
                            << " reads cfg.precision (read PrecisionSpec: precision_spec(cfg))");
  }
  CHECK(files > 100);
}

TEST_CASE("layout: the precision-key scan finds a member read, not a comment or a string") {
  const std::vector<int> lines = precision_key_reads(
      "// cfg.precision.mode in a comment\nf(\"precision.mode\", c.precision_bits);\n"
      "Mode m = cfg.precision.mode;\nauto& s = p->precision;\n/* x.precision */\n");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == 3);
  CHECK(lines[1] == 4);
}

TEST_CASE("layout: the literal scan skips comments and finds every string") {
  const std::vector<std::string> lits = string_literals(
      "// \"fp8\" in a comment\nconst char* a = \"nvfp4\"; /* \"mxfp4\" */ char q = '\"';\n"
      "f(\"esc \\\" quote\", \"tcp://x\");  // \"bf16\"\n");
  REQUIRE(lits.size() == 3);
  CHECK(lits[0] == "nvfp4");
  CHECK(lits[1] == "esc \\\" quote");
  CHECK(lits[2] == "tcp://x");
}
