// nccl_emulation.cpp: host stand-ins for the NCCL calls of src/backends/cuda/nccl_comm.cu, for the
// emulated tests (tests/cuda/cuda_emulation.h; the binary links no libnccl and exports these,
// so that nccl_comm.cu's loader finds them with dlsym(RTLD_DEFAULT, ...)).
//
// The world: a communicator of nranks ranks, of which this process is one (rank), whose peers
// contribute the same data as this rank, each from its own buffers at the same addresses.
// With one rank an in-place collective is the identity and no ordering bug can show; with
// several, a collective changes the data in a way the tests can predict:
//   AllReduce       recv = op over the ranks of send: sum N x (added in rank order, in the
//                   element type), max / min x, prod x^N, avg N x / N
//   ReduceScatter   recv = op over the ranks of send[rank * count, + count)
//   AllGather       recv[r * count, + count) = send for every r
//   Broadcast       recv = send (the root's, which is this rank's)
//   Send / Recv     only inside ncclGroupStart / ncclGroupEnd (how nccl_comm.cu's all-to-all
//                   uses them); at ncclGroupEnd each receive from peer p gets what p sends to
//                   this rank, which (same data at the same addresses) is what this rank's
//                   send to itself holds: a group without that send is ncclInvalidUsage.
// Each collective checks its arguments at the call (ncclInvalidArgument, as NCCL does) and is
// queued on its stream (tests/cuda/stream_emulation.cpp): it reads and writes the buffers when
// the stream is waited for, not when it is called. Element types: the ones nccl_comm.cu uses
// (ncclFloat, ncclDouble, ncclUint8; ncclInt8 and ncclInt32 besides); others are refused.
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct EmuComm {
  int nranks = 0, rank = 0;
};
EmuComm* emu_comm(ncclComm_t c) { return reinterpret_cast<EmuComm*>(c); }

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclFloat: return 4;
    case ncclDouble: return 8;
    default: return 0;  // not emulated
  }
}

// x reduced over n ranks that all contribute x, in the element type (sums added in rank order).
template <typename T>
T reduce_same(T x, int n, ncclRedOp_t op) {
  T acc = x;
  for (int r = 1; r < n; r++) {
    if (op == ncclSum || op == ncclAvg) acc = T(acc + x);
    if (op == ncclProd) acc = T(acc * x);
  }
  if (op == ncclAvg) acc = T(acc / T(n));
  return acc;
}
template <typename T>
void reduce_into(void* recv, const void* send, size_t count, int n, ncclRedOp_t op) {
  for (size_t i = 0; i < count; i++) {
    T x;
    std::memcpy(&x, static_cast<const char*>(send) + i * sizeof(T), sizeof(T));
    const T y = reduce_same(x, n, op);
    std::memcpy(static_cast<char*>(recv) + i * sizeof(T), &y, sizeof(T));
  }
}
void reduce(void* recv, const void* send, size_t count, ncclDataType_t t, ncclRedOp_t op, int n) {
  switch (t) {
    case ncclInt8: return reduce_into<int8_t>(recv, send, count, n, op);
    case ncclUint8: return reduce_into<uint8_t>(recv, send, count, n, op);
    case ncclInt32: return reduce_into<int32_t>(recv, send, count, n, op);
    case ncclFloat: return reduce_into<float>(recv, send, count, n, op);
    default: return reduce_into<double>(recv, send, count, n, op);
  }
}

bool valid_op(ncclRedOp_t op) {
  return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
}

// Queues a collective on `stream` over the buffers it names.
ncclResult_t queue(const char* what, cudaStream_t stream, const void* send, size_t send_bytes,
                   const void* recv, size_t recv_bytes, std::function<void()> work) {
  emu::enqueue(stream, std::string(what) + " of an emulated NCCL communicator",
               {{send, send_bytes}, {recv, recv_bytes}}, std::move(work));
  return ncclSuccess;
}

// The sends and receives of the open group (ncclGroupStart .. ncclGroupEnd), on one stream.
struct PeerOp {
  const void* buf;
  size_t bytes;
  int peer;
};
struct Group {
  int depth = 0;
  bool bad = false;  // an op on another communicator or stream than the group's first
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<PeerOp> sends, recvs;
};
Group& group() {
  static thread_local Group g;
  return g;
}
ncclResult_t add_peer_op(bool send, const void* buf, size_t count, ncclDataType_t t, int peer,
                         ncclComm_t comm, cudaStream_t stream) {
  const size_t e = type_bytes(t);
  Group& g = group();
  if (!comm || !e || peer < 0 || peer >= emu_comm(comm)->nranks) return ncclInvalidArgument;
  if (g.depth == 0) return ncclInvalidUsage;  // emulated inside a group only
  if (g.sends.empty() && g.recvs.empty()) g.comm = comm, g.stream = stream;
  g.bad |= comm != g.comm || stream != g.stream;
  (send ? g.sends : g.recvs).push_back({buf, count * e, peer});
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGroupStart() {
  group().depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  Group& g = group();
  if (g.depth == 0) return ncclInvalidUsage;
  if (--g.depth > 0) return ncclSuccess;
  Group done = std::move(g);
  g = Group{};
  if (done.recvs.empty() && done.sends.empty()) return ncclSuccess;
  if (done.bad) return ncclInvalidUsage;
  const int me = emu_comm(done.comm)->rank;
  const PeerOp* self = nullptr;
  for (const PeerOp& op : done.sends)
    if (op.peer == me) self = &op;
  std::vector<emu::Use> uses;
  for (const auto* ops : {&done.sends, &done.recvs})
    for (const PeerOp& op : *ops) {
      if (!self || op.bytes != self->bytes) return ncclInvalidUsage;
      uses.push_back({op.buf, op.bytes});
    }
  const PeerOp from = *self;
  std::vector<PeerOp> recvs = done.recvs;
  emu::enqueue(done.stream, "a group of ncclSend / ncclRecv of an emulated NCCL communicator",
               std::move(uses), [from, recvs] {
                 for (const PeerOp& r : recvs)
                   if (r.buf != from.buf) std::memmove(const_cast<void*>(r.buf), from.buf, r.bytes);
               });
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return add_peer_op(true, send, count, t, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return add_peer_op(false, recv, count, t, peer, comm, stream);
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    default: return "emulated NCCL error";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::strcpy(id->internal, "emulated NCCL");
  return ncclSuccess;
}

// The emulated world needs no rendezvous: the id (rank 0's, which the bootstrap hands to the
// others) is not read.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* c = new EmuComm;
  c->nranks = nranks;
  c->rank = rank;
  *comm = reinterpret_cast<ncclComm_t>(c);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete emu_comm(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (!comm) return ncclInvalidArgument;
  *async = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t e = type_bytes(t);
  if (!comm || !e || !valid_op(op)) return ncclInvalidArgument;
  const int n = emu_comm(comm)->nranks;
  return queue("ncclAllReduce", stream, send, count * e, recv, count * e,
               [=] { reduce(recv, send, count, t, op, n); });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t e = type_bytes(t);
  if (!comm || !e || !valid_op(op)) return ncclInvalidArgument;
  const EmuComm c = *emu_comm(comm);
  const char* mine = static_cast<const char*>(send) + size_t(c.rank) * recvcount * e;
  return queue("ncclReduceScatter", stream, send, size_t(c.nranks) * recvcount * e, recv,
               recvcount * e, [=] { reduce(recv, mine, recvcount, t, op, c.nranks); });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t e = type_bytes(t);
  if (!comm || !e) return ncclInvalidArgument;
  const int n = emu_comm(comm)->nranks;
  const size_t bytes = sendcount * e;
  return queue("ncclAllGather", stream, send, bytes, recv, size_t(n) * bytes, [=] {
    for (int r = 0; r < n; r++) {
      char* slot = static_cast<char*>(recv) + size_t(r) * bytes;
      if (slot != send) std::memmove(slot, send, bytes);
    }
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t e = type_bytes(t);
  if (!comm || !e || root < 0 || root >= emu_comm(comm)->nranks) return ncclInvalidArgument;
  return queue("ncclBroadcast", stream, send, count * e, recv, count * e, [=] {
    if (recv != send) std::memmove(recv, send, count * e);
  });
}

}  // extern "C"
