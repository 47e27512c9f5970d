// traffic.h: what each kernel launch moves through global memory, for the cost model
// (tests/cuda/cost_model_checked.cpp, docs/gpu.md "The cost model"). In the kernels_checked
// binary, memory_check.cpp hands every device-memory access a running kernel makes to
// note_access while counting is on; nothing is counted otherwise (the other checked tests run
// at their usual speed), and kernels_emulated, which is not instrumented, never calls it.
//
// Per launch it counts:
//   requested bytes  the sizes of the accesses summed (what the threads ask for);
//   unique bytes     the distinct bytes read and the distinct bytes written (what a perfect
//                    cache would leave to DRAM);
//   sectors          for each warp-wide access, the distinct 32-byte sectors its lanes span,
//                    summed: what a GPU moves between L2 and the SMs, and from DRAM when
//                    nothing is cached. "The same access" of a warp's lanes is the k-th
//                    execution, by each lane, of one access site (the instrumented call's
//                    return address, read and write apart): the SIMT model of structured code,
//                    where a warp runs a loop's k-th iteration together, and the lanes that
//                    left a loop early (a ragged tail) simply take no part in its last access.
//                    A 16-byte pack (common.cuh's load16 / store16), which GCC splits into its
//                    elements, each its own site, counts as the one access nvcc makes of it: a
//                    lane's access to unvisited bytes of an aligned 16-byte chunk among the
//                    last four it touched, in the same direction from another site than the
//                    chunk's last access, continues it.
//   warp accesses    the warp-wide accesses themselves: the memory instructions the warps
//                    issue, which a kernel of scalar 2-byte accesses needs 8 times as many of
//                    as one of 16-byte packs for the same bytes.
// Limits: code whose lanes reach one site a different number of times before it in
// unstructured ways (data-dependent branches inside a loop) is grouped by count, not by the
// GPU's reconvergence; two scalar loads of neighbouring elements from two sites count as one
// access, as a vector load would (nvcc may or may not merge them); host code's accesses (the
// cuBLAS(Lt) stand-ins) are not counted (GEMMs are counted analytically); no cache is
// modelled between accesses (a warp's re-read of a row counts again; a broadcast read counts
// a sector per warp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace emu::traffic {

struct LaunchTraffic {
  const void* kernel = nullptr;
  uint64_t blocks = 0;                       // the grid's
  uint64_t read_bytes = 0, write_bytes = 0;  // requested
  uint64_t unique_read = 0, unique_written = 0;
  uint64_t read_sectors = 0, write_sectors = 0;
  uint64_t read_accesses = 0, write_accesses = 0;  // warp-wide: a warp's memory instructions
  uint64_t bytes() const { return read_bytes + write_bytes; }
  uint64_t unique() const { return unique_read + unique_written; }
  uint64_t sector_bytes() const { return 32 * (read_sectors + write_sectors); }
  uint64_t accesses() const { return read_accesses + write_accesses; }
};

// Counting on or off (off at start). The launches counted wait until take().
void set_counting(bool on);
extern bool counting;

// The hooks (memory_check.cpp): a launch of blocks of `threads` threads starts, a block
// starts, thread `tid` of the running block accesses n device bytes at address a from code
// address pc, the launch ends.
void launch_begin(const void* kernel, unsigned threads);
void block_begin();
void note_access(uintptr_t a, size_t n, bool write, unsigned tid, const void* pc);
void launch_end();

// The launches counted since the last call, in launch order (then cleared).
std::vector<LaunchTraffic> take();

}  // namespace emu::traffic

namespace emu {
// The work queued on the emulated streams since the last call (stream_emulation.cpp), counted
// by kind: its description up to the first " of " ("a kernel launch", "cublasLtMatmul",
// "cudaMemsetAsync", "cudaMemcpyAsync", ...). Cleared by the call.
std::map<std::string, uint64_t> take_work_tally();
// The host's calls that cost it time but queue nothing, counted by name since the last call
// (then cleared): the waits for the device (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, the synchronous cudaMemcpy and cudaMemset) and cuBLASLt's descriptor
// creations (cublaslt_emulation.cpp). What "one host wait per step" and "descriptors cached per
// shape" are checked against.
std::map<std::string, uint64_t> take_host_tally();
void note_host_call(const char* name);
}  // namespace emu
