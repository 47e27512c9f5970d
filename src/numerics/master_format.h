// master_format.h: the registry of master-weight formats, one row per value of
// precision.state.master (docs/precision.md, "State precision: master weights").
//
// The master weights are what AdamW updates; the model computes with a copy rounded to its
// compute type. Three ways to keep them:
//   fp32        an fp32 copy beside the compute weights (4 bytes per parameter; in fp32 models
//               the compute weights themselves). Every update lands, however small.
//   bf16-sr     no copy: the bf16 compute weights are the master, and each update is stored
//               back with stochastic rounding (sr_hash, seeded per update and element), so an
//               update smaller than half a bf16 step still lands with the right probability
//               and the weights' expectation follows fp32's (llm.c's bf16 training). 0 bytes.
//   bf16-kahan  the bf16 compute weights plus a bf16 compensation buffer c holding what the
//               last store rounded away, c = bf16(w - bf16(w)); the update starts from
//               w = p + c (Kahan-style compensated storage: the pair keeps about 16
//               significant bits). 2 bytes per parameter.
// The two bf16 formats need bf16 compute weights (modes whose weights are bf16: bf16 and the
// quantized modes); fp32 and fp16 models refuse them by name (config_validate).
// The element arithmetic is adamw_math.h's (kahan_load / kahan_store), which both backends
// run; nothing here reads a name but the registry.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

enum class MasterFormat { FP32, BF16SR, BF16Kahan };

struct MasterFormatInfo {
  MasterFormat format;
  const char* name;      // the config value
  size_t bytes;          // per parameter beyond the compute weights (bf16 models)
  int32_t file_code;     // in the optimizer files' header (src/io/checkpoint.h)
  const char* summary;   // for the start line and `memory`
};

// Every row, in the order `--help` lists them.
const std::vector<MasterFormatInfo>& master_formats();
const MasterFormatInfo& master_format_info(MasterFormat f);
const char* master_format_name(MasterFormat f);
// The format named `name`; UsageError "config key '<key>': unknown master format '<name>'".
MasterFormat parse_master_format(const std::string& name, const char* key);
// The format whose optimizer-file code is `code`, or nullptr.
const MasterFormatInfo* find_master_format_code(int32_t code);
std::vector<std::string> master_format_names();
// Whether the master weights live in the bf16 compute weights (no fp32 copy).
inline bool master_in_weights(MasterFormat f) { return f != MasterFormat::FP32; }

}  // namespace tg
