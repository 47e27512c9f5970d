#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

int run_shell(const std::string& script, std::string* output) {
  FILE* p = popen(("{ " + script + "; } 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string binary() {
  const char* bin = getenv("TG_BIN");
  return bin ? bin : "./train_gpt";
}

int run_binary(const std::string& args, std::string* output) {
  return run_shell(binary() + " " + args, output);
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

}  // namespace tgt
