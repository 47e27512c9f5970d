// safetensors.h: reading and writing the safetensors format (Hugging Face).
//
// A file is: an 8-byte little-endian unsigned header length N; N bytes of JSON, an object
// mapping each tensor name to {"dtype": "F32"|"BF16"|..., "shape": [d0, d1, ...],
// "data_offsets": [begin, end]} plus an optional "__metadata__" object of strings; then the
// data section, where each tensor's bytes (row-major, little-endian) lie at [begin, end)
// relative to the section's start. Writers pad the header with spaces so the data section
// starts at a multiple of 8. As the format's reference reader does, the parser insists that
// the tensors tile the data section exactly: no overlaps, no holes, nothing past the end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tg {

// One tensor to write; data points at shape's product times the dtype's size bytes.
struct SafeTensorOut {
  std::string name, dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// One tensor of a parsed file: where its bytes are in the buffer that was parsed.
struct SafeTensorIn {
  std::string dtype;
  std::vector<int64_t> shape;
  const char* data = nullptr;
  size_t bytes = 0;
};

struct SafetensorsFile {
  std::map<std::string, SafeTensorIn> tensors;
  std::map<std::string, std::string> metadata;
};

// Bytes per element of a safetensors dtype name ("F32" -> 4); 0 for names it does not know.
size_t safetensors_dtype_size(const std::string& dtype);

// The whole file for these tensors (in this order) and metadata.
std::vector<char> safetensors_bytes(const std::vector<SafeTensorOut>& tensors,
                                    const std::map<std::string, std::string>& metadata);

// Parses and checks a file held in `bytes` (which must outlive the result: its tensors
// point into it). Errors name `path` and, where one is at fault, the tensor.
SafetensorsFile parse_safetensors(const std::vector<char>& bytes, const std::string& path);

}  // namespace tg
