// symbols_emulation.cpp: names for the checks' reports (tests/cuda/memory_check.h): which
// kernel, which shared array, which source line. The executable's own symbol table (.symtab of
// /proc/self/exe, read once) names functions and thread-local objects (the emulation's
// __shared__ arrays are thread_local statics); binutils' addr2line, run on demand, gives the
// file and line of a code address from the debug information (inlined frames included). A
// report without them still names raw addresses.
#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "memory_check.h"

namespace emu::check {

namespace {

struct Sym {
  uintptr_t addr;  // run-time address (functions), or offset in the TLS segment (TLS)
  size_t size;
  std::string name;  // mangled
};

struct Symbols {
  uintptr_t bias = 0;  // load bias of the executable (position-independent: its base)
  std::string exe;
  std::vector<Sym> funcs, tls;  // sorted by addr
};

int first_object(dl_phdr_info* info, size_t, void* out) {
  *static_cast<uintptr_t*>(out) = info->dlpi_addr;
  return 1;  // the first object is the executable
}

void read_symtab(Symbols& s) {
  const int fd = open(s.exe.c_str(), O_RDONLY);
  if (fd < 0) return;
  struct stat st;
  void* map = fstat(fd, &st) == 0 ? mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0)
                                  : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return;
  const auto* base = static_cast<const char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const auto* sym = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
    const char* str = base + sh[sh[i].sh_link].sh_offset;
    for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); k++) {
      const int type = ELF64_ST_TYPE(sym[k].st_info);
      if (sym[k].st_size == 0 || sym[k].st_shndx == SHN_UNDEF) continue;
      if (type == STT_FUNC)
        s.funcs.push_back({sym[k].st_value + s.bias, sym[k].st_size, str + sym[k].st_name});
      else if (type == STT_TLS)
        s.tls.push_back({sym[k].st_value, sym[k].st_size, str + sym[k].st_name});
    }
  }
  munmap(map, size_t(st.st_size));
  for (auto* v : {&s.funcs, &s.tls})
    std::sort(v->begin(), v->end(), [](const Sym& a, const Sym& b) { return a.addr < b.addr; });
}

Symbols& symbols() {
  static Symbols* s = [] {
    auto* x = new Symbols;
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    x->exe = n > 0 ? std::string(path, size_t(n)) : "/proc/self/exe";
    dl_iterate_phdr(first_object, &x->bias);
    read_symtab(*x);
    return x;
  }();
  return *s;
}

const Sym* find(const std::vector<Sym>& v, uintptr_t a) {
  auto it =
      std::upper_bound(v.begin(), v.end(), a, [](uintptr_t x, const Sym& s) { return x < s.addr; });
  if (it == v.begin()) return nullptr;
  --it;
  return a < it->addr + it->size ? &*it : nullptr;
}

// The demangled name without its parameter lists: "ns::f<int>(int*)::tile" -> "ns::f<int>::tile"
// (a parenthesis after a name or a template's '>' opens one; "(anonymous namespace)" stays).
std::string readable(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  const std::string full = status == 0 && d ? d : mangled;
  std::free(d);
  std::string out;
  int angle = 0, paren = 0;
  for (char c : full) {
    if (paren == 0 && c == '<') angle++;
    if (paren == 0 && c == '>') angle--;
    const bool opens = !out.empty() && (std::isalnum(static_cast<unsigned char>(out.back())) ||
                                        out.back() == '_' || out.back() == '>');
    if (angle == 0 && c == '(' && (paren > 0 || opens)) paren++;
    if (paren == 0) out += c;
    if (angle == 0 && c == ')' && paren > 0) paren--;
  }
  // A template function's name starts with its return type ("void ns::f<int>"): drop it.
  size_t name = 0;
  int depth = 0;
  for (size_t i = 0; i < out.size(); i++) {
    depth += out[i] == '<' || out[i] == '(' ? 1 : out[i] == '>' || out[i] == ')' ? -1 : 0;
    if (depth == 0 && out[i] == ' ') name = i + 1;
  }
  return out.substr(name);
}

// "file:line (function)" of the innermost inlined frame at pc, by addr2line; "" if unknown.
std::string source_line(uintptr_t pc) {
  const Symbols& s = symbols();
  char cmd[4400];
  std::snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' 0x%zx 2>/dev/null", s.exe.c_str(),
                size_t(pc - s.bias));
  FILE* f = popen(cmd, "r");
  if (!f) return "";
  char func[4096] = "", file[4096] = "";
  const bool ok = std::fgets(func, sizeof func, f) && std::fgets(file, sizeof file, f);
  pclose(f);
  if (!ok || file[0] == '?' || std::strstr(file, ":?") || std::strstr(file, ":0\n")) return "";
  std::string fn(func), loc(file);
  fn.erase(fn.find_last_not_of('\n') + 1);
  loc.erase(loc.find_last_not_of('\n') + 1);
  const size_t disc = loc.find(" (discriminator");
  if (disc != std::string::npos) loc.erase(disc);
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) {
    const std::string prefix = std::string(cwd) + "/";
    if (loc.compare(0, prefix.size(), prefix) == 0) loc.erase(0, prefix.size());
  }
  return loc + " (" + readable(fn) + ")";
}

}  // namespace

std::string symbolize(const void* pc, bool line) {
  static std::mutex mu;
  static std::map<std::pair<const void*, bool>, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({pc, line});
  if (it != cache.end()) return it->second;
  const uintptr_t a = reinterpret_cast<uintptr_t>(pc);
  // A return address (line lookups): the call instruction is the byte before it.
  std::string out = line && a ? source_line(a - 1) : "";
  if (out.empty()) {
    const Sym* f = find(symbols().funcs, line && a ? a - 1 : a);
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%zx", size_t(a));
    out = f ? readable(f->name) + (line ? "+" + std::to_string(a - f->addr) : "") : hex;
  }
  return cache[{pc, line}] = out;
}

// The thread-local object at `offset` of the executable's TLS segment (a __shared__ array of
// the emulation) and the offset in it: "tg::gpu::classifier_kernel::shared + 12".
std::string tls_object(size_t offset) {
  const Sym* o = find(symbols().tls, offset);
  if (!o) return "TLS offset " + std::to_string(offset);
  return readable(o->name) + " + " + std::to_string(offset - o->addr);
}

}  // namespace emu::check
