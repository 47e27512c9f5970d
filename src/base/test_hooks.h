// test_hooks.h: switches that exist only for the test suite, read from TG_TEST_*
// environment variables (behaviour a user chooses is always a config key).
//   TG_TEST_AUTO_DEVICE=cpu   train.device=auto stays on the CPU (CPU-only tests on a GPU machine)
//   TG_TEST_FAIL_RANK=R       rank R throws at step 2 (a failing rank ends the whole job)
//   TG_TEST_REJECT_CKPT=R:S   rank R rejects the checkpoint of step S at the end of its checks
//                             (a rank-local failure found late in resume's verification)
//   TG_TEST_REDUCE_CHUNK=N    the gradient reduction's staging chunk, in elements
//   TG_TEST_HOST_MEMORY=A:T   this machine has A bytes of memory available of T (host_memory())
//   TG_TEST_HOST_ALLOC_LIMIT=N the CPU backend's allocations fail past N bytes in use
//   TG_TEST_BPE_LONG_PIECE=N  GPT-2 pieces longer than N bytes take the long-piece merge
//                             (src/data/bpe_long_piece.h) instead of past 64 KiB
//   TG_TEST_NO_NCCL=1         NCCL cannot be loaded (src/backends/cuda/nccl_comm.cu: the error
//                             a machine without libnccl.so.2 gives)
//   TG_TEST_CUDNN_REFUSE=G    the CUDA backend finds a loaded cuDNN that refuses its G graph
//                             (forward or backward) at start-up (settle_attention: a graph the
//                             GPU's cuDNN has no engine for; src/backends/cuda/attention_paths.cu);
//                             G sampling: one that builds start-up's graphs and refuses the
//                             forward graph of every shape after (sampling's B 1 x T t)
#pragma once
#include <cstddef>
#include <string>

namespace tg::test_hooks {

bool auto_device_cpu();
int fail_rank();  // -1: none
bool rejects_checkpoint(int rank, long long step);
size_t reduce_chunk();  // 0: the default
bool nccl_missing();
std::string cudnn_refuses();  // "forward", "backward", "sampling" or "" (unset, another value)
// TG_TEST_HOST_MEMORY: false when unset; else *available and *total from it.
bool host_memory(unsigned long long* available, unsigned long long* total);
size_t host_alloc_limit();  // 0: none
size_t bpe_long_piece();    // 0: the default

}  // namespace tg::test_hooks
