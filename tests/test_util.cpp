#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "src/fileio.h"

namespace tgt {

TempDir::TempDir() {
  char tmpl[] = "/tmp/tg_test_XXXXXX";
  char* p = mkdtemp(tmpl);
  if (!p) abort();
  path = p;
}

TempDir::~TempDir() { tg::remove_tree(path); }

int run_binary(const std::string& args, std::string* output) {
  const char* bin = getenv("TG_BIN");
  std::string cmd = std::string(bin ? bin : "./train_gpt") + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace tgt
