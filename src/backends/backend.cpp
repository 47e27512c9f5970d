// backend.cpp: the Backend operations with a default made of other operations: gradients on the
// wire (src/numerics/wire_format.h) through host copies and the host encoding; the profile's
// time marks on the host clock.
#include "backend.h"

#include <chrono>

namespace tg {

namespace {
std::vector<uint8_t> to_host(Backend& be, Tensor t) {
  std::vector<uint8_t> h(t.bytes());
  be.download(h.data(), t);
  return h;
}
}  // namespace

const char* step_phase_name(StepPhase p) {
  switch (p) {
    case StepPhase::Forward: return "forward";
    case StepPhase::Backward: return "backward";
    case StepPhase::Optimizer: return "optimizer";
    case StepPhase::Other: break;
  }
  return "other";
}

size_t Backend::record_mark() {
  using Ms = std::chrono::duration<double, std::milli>;
  host_marks_.push_back(Ms(std::chrono::steady_clock::now().time_since_epoch()).count());
  return host_marks_.size() - 1;
}

std::vector<double> Backend::mark_times_ms() {
  std::vector<double> t(host_marks_.size());
  for (size_t i = 0; i < t.size(); i++) t[i] = host_marks_[i] - host_marks_[0];
  return t;
}

void Backend::clear_marks() { host_marks_.clear(); }

void Backend::queue_read(Tensor src) {
  std::vector<char> bytes(src.bytes());
  download(bytes.data(), src);
  reads_.push_back(std::move(bytes));
}

std::vector<std::vector<char>> Backend::take_reads() {
  std::vector<std::vector<char>> r;
  r.swap(reads_);
  return r;
}

void Backend::wire_encode(Tensor x, size_t part, WireFormat f, Tensor out) {
  const size_t rows = part ? x.numel / part : 0, row_bytes = wire_bytes(part, f);
  if (x.dtype != DType::F32 || rows * part != x.numel || out.bytes() < rows * row_bytes)
    throw Error(name() + ": wire_encode: buffers do not match their rows");
  const std::vector<uint8_t> in = to_host(*this, x);
  std::vector<uint8_t> enc = to_host(*this, out);
  for (size_t r = 0; r < rows; r++)
    tg::wire_encode(reinterpret_cast<const float*>(in.data()) + r * part, part, f,
                    enc.data() + r * row_bytes);
  upload(out, enc.data());
}

void Backend::wire_sum(Tensor in, size_t part, WireFormat f, Tensor sum) {
  const size_t row_bytes = wire_bytes(part, f), rows = row_bytes ? in.bytes() / row_bytes : 0;
  if (sum.dtype != DType::F32 || sum.numel != part)
    throw Error(name() + ": wire_sum: the sum is not fp32 of one row");
  const std::vector<uint8_t> enc = to_host(*this, in);
  std::vector<float> acc(part, -0.f);
  for (size_t r = 0; r < rows; r++) tg::wire_decode_add(enc.data() + r * row_bytes, part, f, acc.data());
  upload(sum, acc.data());
}

void Backend::wire_decode(Tensor in, size_t part, WireFormat f, Tensor out) {
  const size_t rows = part ? out.numel / part : 0, row_bytes = wire_bytes(part, f);
  if (out.dtype != DType::F32 || rows * part != out.numel || in.bytes() < rows * row_bytes)
    throw Error(name() + ": wire_decode: buffers do not match their rows");
  const std::vector<uint8_t> enc = to_host(*this, in);
  std::vector<float> dec(out.numel);
  for (size_t r = 0; r < rows; r++)
    tg::wire_decode(enc.data() + r * row_bytes, part, f, dec.data() + r * part);
  upload(out, dec.data());
}

}  // namespace tg
