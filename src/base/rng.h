// rng.h: a small deterministic random generator (xoshiro256**, seeded by splitmix64).
//
// Everything random in a run (init, shuffling, sampling, toy data) comes from these, so
// a run is a pure function of its seed, and the state (four words) goes into checkpoints.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace tg {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Rng {
  uint64_t s[4];

  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s) w = splitmix64(x);
  }
  // A generator for a named sub-stream: independent of the others, same for a given seed.
  static Rng derive(uint64_t seed, uint64_t a, uint64_t b = 0) {
    uint64_t x = seed ^ 0x6A09E667F3BCC908ull;
    uint64_t h = splitmix64(x) ^ (a * 0xD1B54A32D192ED03ull);
    h = splitmix64(h) ^ (b * 0x8CB92BA72F3D8DD7ull);
    return Rng(splitmix64(h));
  }
  uint64_t next() {
    auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
  // Uniform in [0, n) without modulo bias.
  uint64_t below(uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = next();
    while (r >= limit);
    return r % n;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller; uses two uniforms per call so the stream stays simple).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// 0..n-1 shuffled (Fisher-Yates) by rng.
inline std::vector<uint64_t> random_permutation(uint64_t n, Rng& rng) {
  std::vector<uint64_t> p(n);
  for (uint64_t i = 0; i < n; i++) p[i] = i;
  for (uint64_t i = n; i > 1; i--) {
    uint64_t j = rng.below(i);
    uint64_t t = p[i - 1];
    p[i - 1] = p[j];
    p[j] = t;
  }
  return p;
}

}  // namespace tg
