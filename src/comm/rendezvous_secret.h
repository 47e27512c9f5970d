// rendezvous_secret.h: what makes a rendezvous trust only its own job's processes
// (src/comm/rendezvous.h): the job's secret, the proofs of it that the handshake carries, and
// the file:// rendezvous file that carries the secret when the environment does not.
//
// The secret comes from TG_RENDEZVOUS_SECRET (the same on every process; tcp:// needs it), or,
// for file://, rank 0 makes 32 random bytes and writes them, hex, into the rendezvous file
// (mode 0600, created new under a random name and renamed into place, following no symlink),
// which the others trust only when this user owns it and nobody else can read or write it.
// Every hello and go carries an HMAC-SHA256 under the secret of the nonces both sides drew
// (OpenSSL), so a process that does not know the secret can neither join as a rank nor pose
// as rank 0, and a recorded exchange cannot be replayed. What travels is not encrypted (NCCL's
// id included): a job belongs on a trusted network (docs/distributed.md).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tg {

constexpr const char* kRendezvousSecretEnv = "TG_RENDEZVOUS_SECRET";

using Nonce = std::array<unsigned char, 16>;
using Proof = std::array<unsigned char, 32>;

Nonce random_nonce();
// 32 random bytes in hex: a file:// job's secret.
std::string random_secret();
// The environment's secret, "" when unset.
std::string environment_secret();

// HMAC-SHA256 under `secret` of a label and the fields of a hello or a go.
Proof hello_proof(const std::string& secret, const Nonce& challenge, int32_t rank, int32_t world,
                  const Nonce& peer_nonce);
Proof go_proof(const std::string& secret, const Nonce& peer_nonce, int32_t rank);
// Whether two proofs are equal, in constant time.
bool same_proof(const Proof& a, const Proof& b);

// What a file:// rendezvous file holds.
struct RendezvousFileData {
  std::string host;
  int port = 0;
  std::string secret;  // hex; "-" when the environment carries it
};
// Writes `path` (mode 0600) as above; an Error naming it when it cannot.
void write_rendezvous_file(const std::string& path, const RendezvousFileData& d);
// Reads it; port 0 while it is absent, incomplete or not written for this job's user (then
// *why says what, for the error at the timeout).
RendezvousFileData read_rendezvous_file(const std::string& path, std::string* why);

}  // namespace tg
