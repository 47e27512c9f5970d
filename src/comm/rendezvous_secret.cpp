// rendezvous_secret.cpp: the rendezvous's secret, proofs and file (see rendezvous_secret.h).
#include "rendezvous_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "src/base/common.h"

namespace tg {

namespace {

void random_bytes(unsigned char* p, size_t n) {
  if (RAND_bytes(p, int(n)) != 1) throw Error("rendezvous: OpenSSL could not draw random bytes");
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* const digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// HMAC-SHA256 of the concatenated parts.
Proof mac(const std::string& secret, const std::vector<std::pair<const void*, size_t>>& parts) {
  std::vector<unsigned char> msg;
  for (const auto& [p, n] : parts) {
    const auto* b = static_cast<const unsigned char*>(p);
    msg.insert(msg.end(), b, b + n);
  }
  Proof out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), int(secret.size()), msg.data(), msg.size(), out.data(),
            &len) ||
      len != out.size())
    throw Error("rendezvous: OpenSSL could not compute an HMAC");
  return out;
}

}  // namespace

Nonce random_nonce() {
  Nonce n{};
  random_bytes(n.data(), n.size());
  return n;
}

std::string random_secret() {
  unsigned char b[32];
  random_bytes(b, sizeof(b));
  return hex(b, sizeof(b));
}

std::string environment_secret() {
  const char* e = getenv(kRendezvousSecretEnv);
  return e ? e : "";
}

Proof hello_proof(const std::string& secret, const Nonce& challenge, int32_t rank, int32_t world,
                  const Nonce& peer_nonce) {
  return mac(secret, {{"hello", 5},
                      {challenge.data(), challenge.size()},
                      {&rank, sizeof(rank)},
                      {&world, sizeof(world)},
                      {peer_nonce.data(), peer_nonce.size()}});
}

Proof go_proof(const std::string& secret, const Nonce& peer_nonce, int32_t rank) {
  return mac(secret, {{"go", 2}, {peer_nonce.data(), peer_nonce.size()}, {&rank, sizeof(rank)}});
}

bool same_proof(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void write_rendezvous_file(const std::string& path, const RendezvousFileData& d) {
  const std::string text = strf("%s %d %s\n", d.host.c_str(), d.port, d.secret.c_str());
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
    tmp = path + "." + random_secret().substr(0, 12) + ".tmp";
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0)
    throw Error(strf("rendezvous file %s: cannot create %s: %s", path.c_str(), tmp.c_str(),
                     strerror(errno)));
  const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size()) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  // rename replaces whatever is at `path`, a symlink included, without following it.
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = strerror(ok ? errno : err);
    unlink(tmp.c_str());
    throw Error(strf("rendezvous file %s: cannot write it: %s", path.c_str(), e.c_str()));
  }
}

RendezvousFileData read_rendezvous_file(const std::string& path, std::string* why) {
  RendezvousFileData d;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP ? path + " is a symlink, not rank 0's file" : "";
    return d;
  }
  struct stat st {};
  char buf[512] = {};
  const bool stat_ok = fstat(fd, &st) == 0;
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (!stat_ok || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    *why = strf(
        "%s is not a file only this user (uid %u) can read and write: not written by "
        "this job's rank 0",
        path.c_str(), unsigned(geteuid()));
    return d;
  }
  char host[256] = {}, secret[129] = {};
  int port = 0;
  if (n <= 0 || sscanf(buf, "%255s %d %128s", host, &port, secret) != 3 || port < 1 || port > 65535)
    return d;  // being written, or an older version's: read again
  d.host = host;
  d.port = port;
  d.secret = secret;
  why->clear();
  return d;
}

}  // namespace tg
