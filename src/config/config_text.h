// config_text.h: a config file's text read safely: bounded in size and depth, in linear time.
//
// A config needs three levels (sections, keys, lists) and a few KiB; a file of 1 MB nesting
// 500,000 arrays once crashed the reader (the dump of the value for an error message recurses
// once per level), and one of 300,000 small objects took 47 s (nlohmann's callback parser scans
// a container's values after each one it ends). The text is now checked in one pass of a SAX
// reader (size, depth, duplicate keys) before it is parsed into values.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tg {

constexpr int kMaxConfigDepth = 64;                // objects and arrays inside each other
constexpr uint64_t kMaxConfigBytes = 16ull << 20;  // 16 MiB

// Parses a config's JSON text (comments allowed); `what` names it in errors. UsageError for
// text nested deeper than kMaxConfigDepth or a key given twice in one object (nlohmann would
// keep the last silently); nlohmann's json::exception for text that is not JSON.
nlohmann::json parse_config_text(const std::string& text, const std::string& what);

// Whether v nests objects and arrays more than `depth` deep (without recursion).
bool json_deeper_than(const nlohmann::json& v, int depth);

// v's JSON text for an error message, or a word on its depth where a dump would recurse
// deeper than kMaxConfigDepth (a value from anywhere but parse_config_text).
std::string json_for_message(const nlohmann::json& v);

}  // namespace tg
