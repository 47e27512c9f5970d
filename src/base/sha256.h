// sha256.h: SHA-256 digests (OpenSSL's libcrypto), as lowercase hex.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace tg {

// An incremental digest: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();

 private:
  void* ctx_;  // EVP_MD_CTX
};

std::string sha256_hex(std::string_view data);

}  // namespace tg
