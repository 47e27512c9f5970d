#include "cuda_library.h"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <mutex>

#include "src/base/common.h"
#include "src/base/fileio.h"

// Null in train_gpt (the library defines it), the linked-in entry point in the test binary.
#pragma weak tg_cuda_library

namespace tg {
namespace {

const CudaLibrary* g_library = nullptr;

std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return dirname_of(buf);
}

bool dir_has_entries(const char* path) {
  DIR* d = opendir(path);
  if (!d) return false;
  bool any = false;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') any = true;
  closedir(d);
  return any;
}

const CudaLibrary* open_library() {
  if (tg_cuda_library) return tg_cuda_library();  // linked in
  const std::string path = cuda_library_path();
  // RTLD_NOW: a missing CUDA library (libcudart, libcublasLt) is reported here, by name,
  // rather than at the first call into the backend. (libnccl is opened only for several GPUs.)
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw Error(
        strf("the CUDA backend library could not be opened: %s (rebuild with `make`)", dlerror()));
  auto entry = reinterpret_cast<const CudaLibrary* (*)()>(dlsym(h, "tg_cuda_library"));
  if (!entry) throw Error(strf("%s: no entry point tg_cuda_library", path.c_str()));
  const CudaLibrary* lib = entry();
  if (lib->abi != kCudaLibraryAbi)
    throw Error(
        strf("%s is from another build of train_gpt (interface %d, this binary wants %d): "
             "rebuild with `make`",
             path.c_str(), lib->abi, kCudaLibraryAbi));
  return lib;
}

}  // namespace

bool cuda_built() {
#ifdef TG_CUDA
  return true;
#else
  return false;
#endif
}

bool nvidia_device_present() {
  if (dir_has_entries("/proc/driver/nvidia/gpus")) return true;
  for (int i = 0; i < 64; i++)
    if (access(strf("/dev/nvidia%d", i).c_str(), F_OK) == 0) return true;
  return false;
}

std::string cuda_library_path() { return join_path(executable_dir(), "libtrain_gpt_cuda.so"); }

const CudaLibrary& cuda_library() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (!cuda_built())
    throw Error("this binary was built without CUDA (rebuild with `make CUDA=1`, nvcc installed)");
  if (!g_library) g_library = open_library();
  return *g_library;
}

bool cuda_library_loaded() { return g_library != nullptr; }

std::unique_ptr<Comm> make_gpu_comm(Bootstrap& bootstrap, Backend& backend) {
  const CudaLibrary& lib = cuda_library();
  if (!lib.make_nccl_comm)
    throw Error(
        "this binary was built without NCCL, so several GPUs cannot train together (rebuild "
        "with nvcc and NCCL's headers in NCCL_HOME, or use one GPU per job)");
  return lib.make_nccl_comm(bootstrap, backend);
}

}  // namespace tg
