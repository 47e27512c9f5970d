// traffic.cpp: the cost model's counts of a launch's global-memory traffic (traffic.h).
// A block's warp-wide accesses are gathered while it runs (its lanes run one after another
// as fibers, so a warp's k-th access at a site is complete only when the block ends) and
// reduced to sectors at the block's end; the distinct bytes of the whole launch are kept as a
// read mask and a write mask per 32-byte sector.
#include "traffic.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace emu::traffic {

bool counting = false;

namespace {

constexpr uint64_t kSector = 32;

// One warp-wide access: the k-th execution of a site by the lanes of a warp.
struct GroupKey {
  uintptr_t site;  // code address * 2 + write
  uint32_t warp, k;
  bool operator==(const GroupKey& o) const { return site == o.site && warp == o.warp && k == o.k; }
};
struct GroupKeyHash {
  size_t operator()(const GroupKey& g) const {
    return std::hash<uint64_t>()(g.site * 0x9E3779B97F4A7C15ull ^ (uint64_t(g.warp) << 32 | g.k));
  }
};
struct Group {
  bool write = false;
  std::vector<uint64_t> sectors;  // may repeat until the block ends
};

// A 16-byte chunk a thread has touched lately, and which of its bytes, in one direction.
struct Open {
  uint64_t chunk = ~0ull;
  uintptr_t site = 0;  // of the last access to it
  bool write = false;
  uint16_t bytes = 0;
};
constexpr int kOpen = 4;  // chunks remembered per thread

struct Running {
  bool on = false;
  unsigned threads = 0;
  LaunchTraffic t;
  std::vector<Open> open;          // [thread * kOpen + i]
  std::vector<uint8_t> next_open;  // per thread: the entry to replace next
  // Per site, how many times each thread of the block has executed it.
  std::unordered_map<uintptr_t, std::vector<uint32_t>> runs;
  std::unordered_map<GroupKey, size_t, GroupKeyHash> group_of;
  std::vector<Group> groups;
  std::unordered_map<uint64_t, uint64_t> masks;  // sector -> read bits | write bits << 32
};

Running g;
std::vector<LaunchTraffic> g_done;

// The block's warp accesses reduced to their distinct sectors.
void finish_block() {
  for (Group& gr : g.groups) {
    std::sort(gr.sectors.begin(), gr.sectors.end());
    const uint64_t n =
        uint64_t(std::unique(gr.sectors.begin(), gr.sectors.end()) - gr.sectors.begin());
    (gr.write ? g.t.write_sectors : g.t.read_sectors) += n;
    (gr.write ? g.t.write_accesses : g.t.read_accesses)++;
  }
  g.runs.clear();
  g.group_of.clear();
  g.groups.clear();
  g.open.assign(size_t(g.threads) * kOpen, Open{});
  g.next_open.assign(g.threads, 0);
}

// Whether thread tid's access at `site` continues a vector access: GCC splits a 16-byte pack
// (common.cuh's load16 / store16) into its elements, each its own site, where nvcc issues
// one 16-byte access. So an access to bytes of an aligned 16-byte chunk the thread touched
// lately in the same direction, none of them twice, from another site than the last one there
// (a loop's next element is the same site again: a load of its own), is part of that access.
// Otherwise the chunk is opened anew.
bool continues_vector(uintptr_t a, size_t n, bool write, unsigned tid, uintptr_t site) {
  const uint64_t chunk = a / 16;
  if (n > 16 || (a + n - 1) / 16 != chunk) return false;
  const uint16_t bits = uint16_t(((1u << n) - 1) << (a % 16));
  Open* mine = &g.open[size_t(tid) * kOpen];
  for (int i = 0; i < kOpen; i++)
    if (mine[i].chunk == chunk && mine[i].write == write && !(mine[i].bytes & bits) &&
        mine[i].site != site) {
      mine[i].bytes |= bits;
      mine[i].site = site;
      return true;
    }
  uint8_t& next = g.next_open[tid];
  mine[next] = Open{chunk, site, write, bits};
  next = uint8_t((next + 1) % kOpen);
  return false;
}

// Bits [lo, hi) of a 32-bit mask (0 <= lo < hi <= 32).
uint64_t bit_range(uint64_t lo, uint64_t hi) {
  return (hi - lo == 32 ? 0xffffffffull : ((1ull << (hi - lo)) - 1)) << lo;
}

}  // namespace

void set_counting(bool on) { counting = on; }

void launch_begin(const void* kernel, unsigned threads) {
  g.on = counting;
  if (!g.on) return;
  g.t = LaunchTraffic{};
  g.t.kernel = kernel;
  g.threads = threads;
  g.masks.clear();
  g.open.assign(size_t(threads) * kOpen, Open{});
  g.next_open.assign(threads, 0);
}

void block_begin() {
  if (!g.on) return;
  if (g.t.blocks > 0) finish_block();
  g.t.blocks++;
}

void note_access(uintptr_t a, size_t n, bool write, unsigned tid, const void* pc) {
  if (!g.on || n == 0) return;
  (write ? g.t.write_bytes : g.t.read_bytes) += n;
  const int shift = write ? 32 : 0;
  const uintptr_t site = reinterpret_cast<uintptr_t>(pc) * 2 + (write ? 1 : 0);
  if (continues_vector(a, n, write, tid, site)) {
    g.masks[a / kSector] |= bit_range(a % kSector, a % kSector + n) << shift;
    return;
  }
  std::vector<uint32_t>& runs = g.runs[site];
  if (runs.empty()) runs.assign(g.threads, 0);
  const GroupKey key{site, tid / 32, runs[tid]++};
  auto [it, fresh] = g.group_of.try_emplace(key, g.groups.size());
  if (fresh) g.groups.push_back(Group{write, {}});
  std::vector<uint64_t>& sectors = g.groups[it->second].sectors;
  for (uint64_t s = a / kSector; s <= (a + n - 1) / kSector; s++) {
    if (sectors.empty() || sectors.back() != s) sectors.push_back(s);
    const uint64_t lo = std::max<uint64_t>(a, s * kSector) - s * kSector;
    const uint64_t hi = std::min<uint64_t>(a + n, (s + 1) * kSector) - s * kSector;
    g.masks[s] |= bit_range(lo, hi) << shift;
  }
}

void launch_end() {
  if (!g.on) return;
  if (g.t.blocks > 0) finish_block();
  for (const auto& [sector, m] : g.masks) {
    g.t.unique_read += uint64_t(std::popcount(m & 0xffffffffull));
    g.t.unique_written += uint64_t(std::popcount(m >> 32));
  }
  g.masks.clear();
  g_done.push_back(g.t);
  g.on = false;
}

std::vector<LaunchTraffic> take() {
  std::vector<LaunchTraffic> out;
  out.swap(g_done);
  return out;
}

}  // namespace emu::traffic
