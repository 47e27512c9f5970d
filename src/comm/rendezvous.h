// rendezvous.h: GPU processes launched without MPI meeting to hand NCCL's unique id from rank 0
// to every rank, then watching each other for as long as the job runs.
//
// Only the id travels here (NCCL connects the GPUs itself and carries every collective), so
// this is no communicator: it joins, shares rank 0's bytes once, and afterwards only tells
// whether a process has gone and ends the job. Several CPU processes need MPI instead.
#pragma once
#include <memory>
#include <string>

#include "comm.h"

namespace tg {

// Rank `rank` of `world` processes meeting at `where`:
//   tcp://HOST:PORT   rank 0 listens on HOST:PORT, the others connect to it;
//   file:///PATH      rank 0 listens on a free port and writes "HOST PORT" to PATH (a
//                     filesystem every rank sees; TG_RENDEZVOUS_HOST overrides the host it
//                     advertises); the others read it and connect. Rank 0 removes the file once
//                     everyone has arrived.
// Returns once every process has arrived; an Error naming `where` when they have not within
// timeout_s (rank 0 waits for the others, the others for rank 0), a UsageError for a malformed
// `where`. Each rank keeps its connection to rank 0 open: a closed one is a process that has
// gone, which gone_rank() reports and abort() passes on.
std::unique_ptr<Bootstrap> join_rendezvous(int rank, int world, const std::string& where,
                                           int timeout_s);

}  // namespace tg
