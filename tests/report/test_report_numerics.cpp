// The report's numerics sections (src/report/report_parts.h): a table that reads the same for
// every mode is one line, and its constant shares are explained (the padded vocabulary rows).
#include <doctest/doctest.h>

#include "src/base/common.h"
#include "src/model/model.h"
#include "src/report/report_parts.h"

using nlohmann::json;

namespace {

tg::RunGroup group(const std::string& name, double grad_zero) {
  const json nm = {
      {"grad", {{"zero_frac", grad_zero}, {"subnormal_frac", 0.0}, {"nonfinite_frac", 0.0}}},
      {"dact", {{"zero_frac", 0.001}, {"subnormal_frac", 0.0}, {"nonfinite_frac", 0.0}}},
      {"act", {{"zero_frac", 0.05}, {"subnormal_frac", 0.0}, {"nonfinite_frac", 0.0}}}};
  tg::RunGroup g;
  g.name = name;
  g.runs = json::array({{{"summary", {{"numerics", nm}}}}});
  return g;
}

}  // namespace

TEST_CASE("report: a numerics table the same in every mode is one line, its zeros explained") {
  const json config = {
      {"model",
       {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 64}, {"vocab_size", 65}, {"max_seq_len", 64}}}};
  const tg::GPTConfig mc = tg::gpt_config(2, 2, 64, 65, 64);
  const double pad = double(mc.padded_vocab_size - 65) * 64 / double(tg::num_parameters(mc));
  const std::string pad_pct = tg::strf("%.3f%%", 100 * pad);
  std::string md = tg::numerics_md({group("fp32", pad), group("bf16", pad)}, config);
  INFO(md);
  CHECK(md.find("| mode |") == std::string::npos);  // folded: no table
  CHECK(md.find("The same in every mode: weight gradients " + pad_pct + " zero") !=
        std::string::npos);
  CHECK(md.find("the vocabulary's padding rows (" + pad_pct + " of the parameters") !=
        std::string::npos);
  // Modes that differ keep their table, and the note.
  md = tg::numerics_md({group("fp32", pad), group("fp16", 0.2)}, config);
  CHECK(md.find("| fp16 | 20.000% |") != std::string::npos);
  CHECK(md.find("padding rows") != std::string::npos);
  // A vocabulary without padding rows (256: a multiple of 128): no note.
  json unpadded = config;
  unpadded["model"]["vocab_size"] = 256;
  md = tg::numerics_md({group("fp32", 0.0), group("fp16", 0.2)}, unpadded);
  CHECK(md.find("padding rows") == std::string::npos);
  // Without a model in the config: no note, no failure.
  md = tg::numerics_md({group("fp32", pad), group("fp16", 0.2)}, json::object());
  CHECK(md.find("padding rows") == std::string::npos);
  CHECK(md.find("Activations include the attention matrix") != std::string::npos);
}
