// common.h: errors, element types and small helpers shared by all host code.
//
// Errors are exceptions so that a bad file or key unwinds cleanly to main(), which
// prints one line and picks the exit code: UsageError -> 2 (bad command line or
// config), Error -> 1 (everything else: files, data, checkpoints, disks).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tg {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// printf-style formatting into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "4m05s", or "1h02m" from an hour on.
std::string fmt_duration(double seconds);
// A rate with a k or M suffix: "950", "12.3k", "1.25M".
std::string fmt_rate(double x);
// Seconds on the monotonic clock (differences only).
double now_seconds();

// Element types of tensors. F64 exists only on the CPU backend, for fp64
// finite-difference gradient checks of the whole model; I32 holds token ids.
enum class DType : uint8_t { F32 = 0, BF16 = 1, F16 = 2, E4M3 = 3, E5M2 = 4, F64 = 5, I32 = 6 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

}  // namespace tg
