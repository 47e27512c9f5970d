// stream_emulation.cpp: streams, events, copies, memsets and pinned host memory of the emulated
// CUDA runtime (tests/cuda/cuda_emulation.h), as strict as a GPU, so that a missing dependency
// between streams, or between the device and the host, shows up in the emulated tests.
//
// What the CUDA runtime documents ("Stream synchronization behavior", "API synchronization
// behavior" in its reference) and this emulates:
//   - work queued on a stream (kernel launches, async copies and memsets, cuBLAS/cuBLASLt
//     GEMMs, NCCL collectives) runs in order, and only when something waits for it:
//     cudaStreamSynchronize, cudaEventSynchronize (up to the recorded event),
//     cudaDeviceSynchronize (everything), cudaStreamWaitEvent (the waiting stream's later work
//     first runs the event's stream up to the event), cudaStreamQuery / cudaEventQuery (they
//     run the work and answer cudaErrorNotReady once: a GPU makes progress on its own, so a
//     polling loop ends, but the first answer is "not yet"), a blocking copy;
//   - the legacy default stream (0, cudaStreamLegacy): an action on it first waits for all
//     blocking streams (cudaStreamCreate, cudaStreamDefault), and blocking streams' later work
//     waits for it; streams made with cudaStreamNonBlocking do not order with it at all;
//   - cudaMemcpy: from pageable host memory to the device, the legacy stream's earlier work
//     runs, the source is staged at the call and the copy itself stays queued (the DMA "may
//     not have completed"); from pinned memory, to the host, and host to host it runs
//     through; device to device it is only queued. cudaMemset is queued (asynchronous with
//     respect to the host) unless its target is pinned host memory;
//   - cudaMemcpyAsync reads and writes its host buffer when it runs, not when it is queued;
//   - a stream destroyed with work queued finishes that work (here: at once).
// And the project's rules on top (each breach an error in emu::errors(), after which the call
// does what CUDA does, so that a test goes on and reports it):
//   - cudaMemcpyAsync only from and to pinned host memory (cudaMallocHost / cudaHostAlloc):
//     from pageable memory CUDA stages or synchronises behind the caller's back;
//   - memory is freed (cudaFree, cudaFreeHost, a test's buffer) only after the queued work that
//     uses it is known to be done: CUDA's cudaFree synchronises, but a free that relies on it
//     stalls the whole device and breaks once the memory goes to a stream-ordered or caching
//     allocator. "Uses" are the ranges each item names (copies, GEMMs, collectives: exactly;
//     a kernel: every pointer among its arguments, also inside parameter structs), so a free is
//     checked against the work that may touch it, not against unrelated queued work; the
//     emulator then runs the queued work first (as cudaFree would) and frees.
// Handles are numbers that are never reused; a destroyed or unknown handle is
// cudaErrorInvalidResourceHandle.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "traffic.h"

namespace {

struct Stream;

// One queued item: work to run, or a wait for another stream up to one of its items.
struct Item {
  uint64_t seq = 0;
  std::string what;
  std::vector<emu::Use> uses;
  std::function<void()> work;
  std::shared_ptr<Stream> wait_on;
  uint64_t wait_upto = 0;
};

struct Stream {
  uint64_t id = 0;
  bool legacy = false, blocking = true;
  std::deque<Item> queue;
  uint64_t queued = 0, done = 0;  // sequence numbers of the last queued and last run items
  bool running = false;
  uint64_t legacy_seen = 0;             // a blocking stream: legacy items it already waits for
  std::map<uint64_t, uint64_t> waited;  // the legacy stream: blocking stream id -> items waited for
  std::string name() const {
    return legacy ? std::string("the legacy default stream") : "stream " + std::to_string(id);
  }
};

struct Event {
  std::shared_ptr<Stream> stream;  // null until recorded
  uint64_t seq = 0;
};

std::recursive_mutex g_mu;
uint64_t g_next_handle = 1;
std::shared_ptr<Stream> g_legacy = [] {
  auto s = std::make_shared<Stream>();
  s->legacy = true;
  return s;
}();
std::map<cudaStream_t, std::shared_ptr<Stream>> g_streams;
std::map<cudaEvent_t, Event> g_events;
std::map<const char*, size_t> g_pinned;  // cudaMallocHost allocations: start -> bytes

template <typename H>
H next_handle() {
  return reinterpret_cast<H>(uintptr_t(g_next_handle++) << 8);
}

std::shared_ptr<Stream> stream_of(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy) return g_legacy;
  auto it = g_streams.find(h);
  return it == g_streams.end() ? nullptr : it->second;
}

uint64_t g_items_run = 0;  // work items run so far (a wait that runs none did not block)

// Runs s's items up to sequence number upto (a wait item first runs the stream it waits for).
// No cycle is possible: a wait names an item queued before the wait itself was.
void run_until(const std::shared_ptr<Stream>& s, uint64_t upto) {
  if (s->done >= upto) return;
  if (s->running) {
    emu::error(s->name() + ": waits for itself (a cycle of stream dependencies)");
    return;
  }
  s->running = true;
  while (s->done < upto && !s->queue.empty()) {
    Item it = std::move(s->queue.front());
    s->queue.pop_front();
    if (it.wait_on) {
      run_until(it.wait_on, it.wait_upto);
    } else {
      it.work();
      g_items_run++;
    }
    s->done = it.seq;
  }
  s->running = false;
}
void run_all(const std::shared_ptr<Stream>& s) { run_until(s, s->queued); }

void push(const std::shared_ptr<Stream>& s, Item it) {
  it.seq = ++s->queued;
  s->queue.push_back(std::move(it));
}
void push_wait(const std::shared_ptr<Stream>& s, const std::shared_ptr<Stream>& on, uint64_t upto) {
  Item w;
  w.what = "a wait for " + on->name();
  w.wait_on = on;
  w.wait_upto = upto;
  push(s, std::move(w));
}

// The legacy stream's implicit ordering, before an action on s: on the legacy stream, a wait
// for every blocking stream's work so far; on a blocking stream, a wait for the legacy stream's.
void order_with_legacy(const std::shared_ptr<Stream>& s) {
  if (s->legacy) {
    for (auto& [h, b] : g_streams)
      if (b->blocking && b->queued > s->waited[b->id]) {
        push_wait(s, b, b->queued);
        s->waited[b->id] = b->queued;
      }
  } else if (s->blocking && g_legacy->queued > s->legacy_seen) {
    push_wait(s, g_legacy, g_legacy->queued);
    s->legacy_seen = g_legacy->queued;
  }
}

std::map<std::string, uint64_t> g_tally;       // emu::take_work_tally()
std::map<std::string, uint64_t> g_host_tally;  // emu::take_host_tally()

// Counts a host call that waits for the device under its name in the host tally when it ran
// queued work (the host blocked), else under "<name> (nothing left to wait for)".
struct HostWait {
  const char* name;
  uint64_t before;
  explicit HostWait(const char* n) : name(n), before(g_items_run) {}
  ~HostWait() {
    g_host_tally[g_items_run > before ? std::string(name)
                                      : std::string(name) + " (nothing left to wait for)"]++;
  }
};

// Queues work on s (after its implicit waits); returns the item's sequence number.
uint64_t queue_work(const std::shared_ptr<Stream>& s, std::string what, std::vector<emu::Use> uses,
                    std::function<void()> work) {
  order_with_legacy(s);
  g_tally[what.substr(0, what.find(" of "))]++;
  Item it;
  it.what = std::move(what);
  it.uses = std::move(uses);
  it.work = std::move(work);
  push(s, std::move(it));
  return s->queued;
}

void run_everything() {
  for (bool again = true; again;) {
    again = false;
    run_all(g_legacy);
    for (auto& [h, s] : g_streams) run_all(s);
    for (auto& [h, s] : g_streams) again |= !s->queue.empty();
    again |= !g_legacy->queue.empty();
  }
}

bool is_device(const void* p) {
  cudaPointerAttributes a;
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
}
bool pinned(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  auto it = g_pinned.upper_bound(c);
  if (it == g_pinned.begin()) return false;
  --it;
  return c >= it->first && c + n <= it->first + it->second;
}

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// Which sides of a copy are host memory (cudaMemcpyDefault: what the pointers are).
void host_sides(const void* dst, const void* src, cudaMemcpyKind kind, bool* dst_host,
                bool* src_host) {
  switch (kind) {
    case cudaMemcpyHostToDevice: *dst_host = false, *src_host = true; return;
    case cudaMemcpyDeviceToHost: *dst_host = true, *src_host = false; return;
    case cudaMemcpyDeviceToDevice: *dst_host = false, *src_host = false; return;
    case cudaMemcpyHostToHost: *dst_host = true, *src_host = true; return;
    default: *dst_host = !is_device(dst), *src_host = !is_device(src);
  }
}

std::string copy_name(const char* fn, size_t n, const std::shared_ptr<Stream>& s) {
  return std::string(fn) + " of " + std::to_string(n) + " bytes on " + s->name();
}

}  // namespace

namespace emu {

void enqueue(cudaStream_t stream, std::string what, std::vector<Use> uses,
             std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const std::shared_ptr<Stream> s = stream_of(stream);
  if (!s) {
    error(what + " on an unknown or destroyed stream " + hex(stream) + ": not run");
    return;
  }
  queue_work(s, std::move(what), std::move(uses), std::move(work));
}

std::map<std::string, uint64_t> take_work_tally() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  std::map<std::string, uint64_t> t;
  t.swap(g_tally);
  return t;
}

std::map<std::string, uint64_t> take_host_tally() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  std::map<std::string, uint64_t> t;
  t.swap(g_host_tally);
  return t;
}

void note_host_call(const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_host_tally[name]++;
}

bool pinned_host(const void* p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return pinned(p, bytes);
}

std::vector<std::string> drop_queued() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  std::vector<std::string> dropped;
  auto drop = [&](const std::shared_ptr<Stream>& s) {
    for (const Item& it : s->queue)
      if (!it.wait_on) dropped.push_back(it.what);
    s->queue.clear();
    s->done = s->queued;
  };
  drop(g_legacy);
  for (auto& [h, s] : g_streams) drop(s);
  return dropped;
}

void before_free(const void* p, size_t bytes, const char* how) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const char* lo = static_cast<const char*>(p);
  const char* hi = lo + bytes;
  auto check = [&](const std::shared_ptr<Stream>& s) {
    for (const Item& it : s->queue)
      for (const Use& u : it.uses) {
        const char* a = static_cast<const char*>(u.p);
        if (a < hi && a + u.bytes > lo) {
          error(std::string(how) + " of " + hex(p) + " (" + std::to_string(bytes) +
                " bytes) while " + it.what + " queued on " + s->name() +
                " still uses it: free only after a synchronisation (stream or event) that "
                "the work is done");
          return true;
        }
      }
    return false;
  };
  bool used = check(g_legacy);
  for (auto& [h, s] : g_streams) used = used || check(s);
  if (used) run_everything();  // what cudaFree does: the device finishes first
}

}  // namespace emu

extern "C" {

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* h, unsigned flags) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto s = std::make_shared<Stream>();
  s->id = g_next_handle;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  *h = next_handle<cudaStream_t>();
  g_streams[*h] = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* h) { return cudaStreamCreateWithFlags(h, 0); }
// The device finishes a destroyed stream's work (CUDA releases it once done): here, now.
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_streams.find(h);
  if (it == g_streams.end()) return cudaErrorInvalidResourceHandle;
  const std::shared_ptr<Stream> s = it->second;
  run_all(s);
  g_streams.erase(it);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const HostWait wait("cudaStreamSynchronize");
  const std::shared_ptr<Stream> s = stream_of(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  run_all(s);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const std::shared_ptr<Stream> s = stream_of(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s->done == s->queued) return cudaSuccess;
  run_all(s);
  return cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const std::shared_ptr<Stream> s = stream_of(h);
  auto ev = g_events.find(e);
  if (!s || ev == g_events.end()) return cudaErrorInvalidResourceHandle;
  if (!ev->second.stream) return cudaSuccess;  // never recorded: nothing to wait for
  order_with_legacy(s);
  push_wait(s, ev->second.stream, ev->second.seq);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const HostWait wait("cudaDeviceSynchronize");
  run_everything();
  return cudaSuccess;
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  *e = next_handle<cudaEvent_t>();
  g_events[*e] = Event{};
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return g_events.erase(e) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
// The event marks the stream's work queued so far (on the legacy stream, after its implicit
// waits for the blocking streams).
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const std::shared_ptr<Stream> s = stream_of(h);
  auto ev = g_events.find(e);
  if (!s || ev == g_events.end()) return cudaErrorInvalidResourceHandle;
  order_with_legacy(s);
  ev->second = Event{s, s->queued};
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const HostWait wait("cudaEventSynchronize");
  auto ev = g_events.find(e);
  if (ev == g_events.end()) return cudaErrorInvalidResourceHandle;
  if (ev->second.stream) run_until(ev->second.stream, ev->second.seq);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto ev = g_events.find(e);
  if (ev == g_events.end()) return cudaErrorInvalidResourceHandle;
  const Event& x = ev->second;
  if (!x.stream || x.stream->done >= x.seq) return cudaSuccess;
  run_until(x.stream, x.seq);
  return cudaErrorNotReady;
}
// No clock: 0 ms between two completed events.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto ea = g_events.find(a), eb = g_events.find(b);
  if (ea == g_events.end() || eb == g_events.end()) return cudaErrorInvalidResourceHandle;
  for (const Event* x : {&ea->second, &eb->second})
    if (!x->stream || x->stream->done < x->seq) return cudaErrorNotReady;
  *ms = 0.f;
  return cudaSuccess;
}

// ---- pinned host memory ----

cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096 + 4096);
  if (!*p) return cudaErrorMemoryAllocation;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_pinned[static_cast<const char*>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaHostAlloc(p, n, 0); }
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_pinned.find(static_cast<const char*>(p));
  if (it == g_pinned.end()) return cudaErrorInvalidValue;
  emu::before_free(p, it->second, "cudaFreeHost");
  g_pinned.erase(it);
  std::free(p);
  return cudaSuccess;
}

// ---- copies and memsets ----

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const std::shared_ptr<Stream> s = stream_of(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  bool dst_host, src_host;
  host_sides(dst, src, kind, &dst_host, &src_host);
  const std::string what = copy_name("cudaMemcpyAsync", n, s);
  const bool src_pageable = src_host && !pinned(src, n), dst_pageable = dst_host && !pinned(dst, n);
  if (src_pageable || dst_pageable)
    emu::error(what + ": " + (src_pageable ? "from" : "to") + " pageable host memory " +
               hex(src_pageable ? src : dst) +
               " (async copies go through pinned staging buffers: cudaMallocHost)");
  const std::vector<emu::Use> uses = {{dst, n}, {src, n}};
  if (src_pageable) {  // CUDA stages pageable memory at the call
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + n);
    const uint64_t seq = queue_work(s, what, uses, [=] {
      emu::check::note_write(dst, n, what.c_str());
      std::memcpy(dst, staged->data(), n);
    });
    if (dst_host) run_until(s, seq);
    return cudaSuccess;
  }
  const uint64_t seq = queue_work(s, what, uses, [=] {
    emu::check::note_copy(dst, src, n, what.c_str());
    std::memmove(dst, src, n);
  });
  // To pageable memory or host to host: synchronous with respect to the host.
  if (dst_pageable || (dst_host && src_host)) {
    g_host_tally["cudaMemcpyAsync (to pageable memory: waits)"]++;
    run_until(s, seq);
  }
  return cudaSuccess;
}

// On the legacy default stream, with the host-side synchronisation the runtime documents.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  bool dst_host, src_host;
  host_sides(dst, src, kind, &dst_host, &src_host);
  const std::string what = copy_name("cudaMemcpy", n, g_legacy);
  const std::vector<emu::Use> uses = {{dst, n}, {src, n}};
  if (src_host && !dst_host && !pinned(src, n)) {
    // Pageable to device: the stream's earlier work runs, the source is staged, the DMA may
    // still be pending when the call returns.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + n);
    const uint64_t seq = queue_work(g_legacy, what, uses, [=] {
      emu::check::note_write(dst, n, what.c_str());
      std::memcpy(dst, staged->data(), n);
    });
    g_host_tally["cudaMemcpy (waits)"]++;
    run_until(g_legacy, seq - 1);
    return cudaSuccess;
  }
  const uint64_t seq = queue_work(g_legacy, what, uses, [=] {
    emu::check::note_copy(dst, src, n, what.c_str());
    std::memmove(dst, src, n);
  });
  if (dst_host || src_host) {  // device to device: asynchronous
    g_host_tally["cudaMemcpy (waits)"]++;
    run_until(g_legacy, seq);
  }
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const std::shared_ptr<Stream> s = stream_of(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  queue_work(s, "cudaMemsetAsync of " + std::to_string(n) + " bytes on " + s->name(), {{p, n}},
             [=] {
               emu::check::note_write(p, n, "cudaMemsetAsync");
               std::memset(p, v, n);
             });
  return cudaSuccess;
}
// Asynchronous with respect to the host, except on pinned host memory.
cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const uint64_t seq =
      queue_work(g_legacy, "cudaMemset of " + std::to_string(n) + " bytes on " + g_legacy->name(),
                 {{p, n}}, [=] {
                   emu::check::note_write(p, n, "cudaMemset");
                   std::memset(p, v, n);
                 });
  if (pinned(p, n)) run_until(g_legacy, seq);
  return cudaSuccess;
}

}  // extern "C"
