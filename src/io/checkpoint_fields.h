// checkpoint_fields.h: how checkpoint.cpp and optim_file.cpp read state.json and its files:
// fields without trusting their types, checksums as hex, a file checked against its entry.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tg {

std::string hex64(uint64_t x);
// Fields of state.json, read without trusting their types (json's value() throws on a
// wrong type, and converts a float like 1e300 to an integer with undefined behavior).
// obj[key] when it is a string, else "".
std::string string_field(const nlohmann::json& obj, const char* key);
// obj[key] when it is a non-negative integer, else `otherwise`.
uint64_t uint_field(const nlohmann::json& obj, const char* key, uint64_t otherwise);
// The bytes of checkpoint file `name` of `dir`, after checking its size and checksum against
// its entry in state.json's files.
std::vector<char> verified_file(const std::string& dir, const nlohmann::json& files,
                                const std::string& name);

}  // namespace tg
