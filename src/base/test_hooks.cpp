#include "test_hooks.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tg::test_hooks {

bool auto_device_cpu() {
  const char* e = getenv("TG_TEST_AUTO_DEVICE");
  return e && strcmp(e, "cpu") == 0;
}

int fail_rank() {
  const char* e = getenv("TG_TEST_FAIL_RANK");
  return e ? atoi(e) : -1;
}

bool rejects_checkpoint(int rank, long long step) {
  const char* e = getenv("TG_TEST_REJECT_CKPT");
  int r = -1;
  long long s = -1;
  return e && sscanf(e, "%d:%lld", &r, &s) == 2 && r == rank && s == step;
}

size_t reduce_chunk() {
  const char* e = getenv("TG_TEST_REDUCE_CHUNK");
  return e ? size_t(atol(e)) : 0;
}

bool host_memory(unsigned long long* available, unsigned long long* total) {
  const char* e = getenv("TG_TEST_HOST_MEMORY");
  return e && sscanf(e, "%llu:%llu", available, total) == 2;
}

size_t host_alloc_limit() {
  const char* e = getenv("TG_TEST_HOST_ALLOC_LIMIT");
  return e ? size_t(strtoull(e, nullptr, 10)) : 0;
}

bool nccl_missing() {
  const char* e = getenv("TG_TEST_NO_NCCL");
  return e && strcmp(e, "1") == 0;
}

std::string cudnn_refuses() {
  const char* e = getenv("TG_TEST_CUDNN_REFUSE");
  if (!e || (strcmp(e, "forward") != 0 && strcmp(e, "backward") != 0 && strcmp(e, "sampling") != 0))
    return "";
  return e;
}

size_t bpe_long_piece() {
  const char* e = getenv("TG_TEST_BPE_LONG_PIECE");
  return e ? size_t(strtoull(e, nullptr, 10)) : 0;
}

}  // namespace tg::test_hooks
