// Seeds of the random tests (docs/testing.md). Each random stream of a test has a fixed seed
// of its own, so every run (CI's included) draws the same steps. LINMETA_TEST_SEED=N (an
// unsigned integer) draws other steps: each stream's seed is then a hash of N and its fixed
// seed, so the streams of one run stay distinct and the same N repeats the same run. A test
// reports its seed on failure through SCOPED_TRACE(seed_note(seed)).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace linmeta::testing {

/// LINMETA_TEST_SEED, or nothing when it is unset or empty; anything but an unsigned integer
/// throws (the test then fails naming the variable).
inline std::optional<uint64_t> env_test_seed() {
  const char* v = std::getenv("LINMETA_TEST_SEED");
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 0);
  if (*end != '\0' || errno != 0 || v[0] == '-')
    throw std::invalid_argument(std::string("LINMETA_TEST_SEED=") + v +
                                ": expected an unsigned integer");
  return static_cast<uint64_t>(n);
}

/// The seed of a random stream whose fixed seed is `fixed`: `fixed` itself unless
/// LINMETA_TEST_SEED is set, else a hash (splitmix64) of both.
inline uint32_t test_seed(uint32_t fixed) {
  const auto n = env_test_seed();
  if (!n) return fixed;
  uint64_t z = *n * 0x9E3779B97F4A7C15ULL + fixed + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

/// For failure messages: the seed, and how to draw the same steps again.
inline std::string seed_note(uint32_t seed) {
  const auto n = env_test_seed();
  return "random seed " + std::to_string(seed) +
         (n ? " (LINMETA_TEST_SEED=" + std::to_string(*n) + " repeats this run)"
            : " (the fixed seed; LINMETA_TEST_SEED=N draws other steps)");
}

}  // namespace linmeta::testing
