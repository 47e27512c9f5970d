#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "src/base/fileio.h"

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

bool oracles_required() {
  const char* v = getenv("TG_REQUIRE_ORACLES");
  return v && std::string(v) == "1";
}

std::string binary() {
  const char* bin = getenv("TG_BIN");
  return bin ? bin : "./train_gpt";
}

int start_binary(const std::string& args, const std::string& log) {
  const std::string cmd = "exec " + binary() + " " + args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

bool wait_for_steps(const std::string& out_dir, int pid, size_t n) {
  int status = 0;
  while (read_metrics(out_dir + "/metrics.jsonl", "train").size() < n) {
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    usleep(1000);
  }
  return true;
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

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> read_metrics(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == kind) out.push_back(j);
  }
  return out;
}

const std::string& toy_dir() {
  static TempDir dir;
  static bool made = false;
  if (!made) {
    std::string out;
    if (run_binary("prepare toy --out " + dir.path +
                       " --train_tokens 65536 --val_tokens 4096 --record_len 32",
                   &out) != 0) {
      fprintf(stderr, "prepare toy failed:\n%s\n", out.c_str());
      abort();
    }
    made = true;
  }
  return dir.path;
}

std::string gpt2_vocab_dir() {
  // The repository root: the tests run from it, and this file's path is relative to it.
  const std::string dir = tg::join_path(tg::dirname_of(tg::dirname_of(__FILE__)), "data/gpt2");
  return tg::file_exists(tg::join_path(dir, "vocab.json")) ? dir : "";
}

std::string tiny_args(const std::string& out_dir) {
  const std::string& d = toy_dir();
  return "train --model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.max_seq_len=32 "
         "--data.seq_len=32 --data.batch_size=4 --data.train='" +
         d + "/toy_train_*.bin' --data.val='" + d +
         "/toy_val_*.bin' --eval.batches=2 --eval.every=5 "
         "--sample.tokens=8 --train.threads=2 --optim.warmup_steps=3 --train.out_dir=" +
         out_dir;
}

}  // namespace tgt
