// report_numerics.cpp: the report's numerics sections (see report_parts.h): stored zeros and
// subnormals per mode, gradient underflow against the reference, the block-scaled recipes'
// quantization error, precision.mode=auto's formats.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "report_parts.h"
#include "src/base/common.h"
#include "src/model/model.h"

namespace tg {
using json = nlohmann::json;

namespace {

// The share of all parameters in the vocabulary's padding rows (wte is tied to the lm_head,
// and a padded row is no token, so its gradient is exactly zero in every mode): the weight
// gradients' constant zero share. NAN when the config has no model.
double padded_rows_share(const json& config) {
  const json& m = config.value("model", json::object());
  const int L = m.value("n_layer", 0), H = m.value("n_head", 0), C = m.value("n_embd", 0),
            V = m.value("vocab_size", 0), T = m.value("max_seq_len", 0);
  if (L <= 0 || H <= 0 || C <= 0 || V <= 0 || T <= 0 || C % H != 0) return NAN;
  const GPTConfig mc = gpt_config(L, H, C, V, T);
  return double(mc.padded_vocab_size - V) * C / double(num_parameters(mc));
}

std::string pct(const json& g, const char* k) {
  return g.is_object() && g.contains(k) ? strf("%.3f%%", 100 * g[k].get<double>())
                                        : std::string("n/a");
}

// One mode's cells: weight grads zero, subnormal; activation grads zero, subnormal;
// activations subnormal; non-finite.
std::vector<std::string> numerics_cells(const json& nm) {
  double nonfinite = 0;
  for (const char* k : {"act", "dact", "grad"})
    if (nm.contains(k)) nonfinite = std::max(nonfinite, nm[k]["nonfinite_frac"].get<double>());
  return {pct(nm["grad"], "zero_frac"),     pct(nm["grad"], "subnormal_frac"),
          pct(nm["dact"], "zero_frac"),     pct(nm["dact"], "subnormal_frac"),
          pct(nm["act"], "subnormal_frac"), strf("%.3f%%", 100 * nonfinite)};
}

std::string padding_note(const json& config) {
  const double pad = padded_rows_share(config);
  // (A vocabulary that fills its padding, 256 bytes among them, has no such rows: no note.)
  return std::isfinite(pad) && pad > 0
             ? strf(
                   " The weight gradients' zeros include the vocabulary's padding rows (%.3f%% "
                   "of the parameters: rows of wte past the vocabulary, which no token "
                   "reaches, so their gradient is zero in every mode).",
                   100 * pad)
             : "";
}

}  // namespace

std::string numerics_md(const std::vector<RunGroup>& groups, const json& config) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  for (const auto& g : groups)
    if (const json* fs = first_summary(g.runs); fs && fs->contains("numerics"))
      rows.push_back({g.name, numerics_cells((*fs)["numerics"])});
  if (rows.empty()) return "";
  const std::string intro =
      "\nNumerics (precision.telemetry_every, first seed): share of stored values that are "
      "exactly zero (where underflow lands), subnormal (precision already lost) or non-finite, "
      "over all sampled steps.";
  const std::string causal =
      " Activations include the attention matrix, whose upper triangle is zero by causality "
      "in every mode.";
  bool same = true;
  for (const auto& r : rows) same = same && r.second == rows[0].second;
  const std::vector<std::string>& c = rows[0].second;
  if (same && rows.size() > 1)
    return intro +
           strf(
               " The same in every mode: weight gradients %s zero and %s subnormal, "
               "activation gradients %s zero and %s subnormal, activations %s "
               "subnormal, %s non-finite.",
               c[0].c_str(), c[1].c_str(), c[2].c_str(), c[3].c_str(), c[4].c_str(), c[5].c_str()) +
           padding_note(config) + causal + "\n";
  std::string md = intro +
                   "\n\n"
                   "| mode | weight grads zero | weight grads subnormal | activation grads zero | "
                   "activation grads subnormal | activations subnormal | non-finite |\n"
                   "|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& [name, cells] : rows) {
    md += "| " + name + " |";
    for (const std::string& x : cells) md += " " + x + " |";
    md += "\n";
  }
  const std::string notes = padding_note(config) + causal;
  return md + "\n" + notes.substr(1) + " Compare zero fractions against the reference row.\n";
}

// Gradient underflow, named per mode: a loss that matches the reference does not mean the
// precision held (fp16 without loss scaling can flush a sixth of its activation gradients to
// zero and still reach the floor of an easy task). A mode is flagged when a gradient kind has
// at least 1 point more zeros than the reference, or at least 5% of its values subnormal.
json underflow_flags(const json& numerics, const json* ref_numerics) {
  json flags = json::array();
  for (const char* kind : {"dact", "grad"}) {
    if (!numerics.contains(kind)) continue;
    const json& n = numerics[kind];
    const double zero = n.value("zero_frac", 0.0), sub = n.value("subnormal_frac", 0.0);
    const double ref_zero = ref_numerics && ref_numerics->contains(kind)
                                ? (*ref_numerics)[kind].value("zero_frac", 0.0)
                                : 0.0;
    if (zero - ref_zero >= 0.01 || sub >= 0.05)
      flags.push_back({{"tensors", kind},
                       {"zero_frac", zero},
                       {"reference_zero_frac", ref_zero},
                       {"subnormal_frac", sub}});
  }
  return flags;
}

std::string underflow_md(const std::vector<RunGroup>& groups, const std::string& reference) {
  const json* ref_nm = nullptr;
  for (const auto& g : groups)
    if (g.name == reference && first_summary(g.runs) && first_summary(g.runs)->contains("numerics"))
      ref_nm = &(*first_summary(g.runs))["numerics"];
  std::string md;
  for (const auto& g : groups) {
    const json* fs = first_summary(g.runs);
    if (g.name == reference || !fs || !fs->contains("numerics")) continue;
    std::string what;
    for (const auto& f : underflow_flags((*fs)["numerics"], ref_nm)) {
      const std::string k = f["tensors"] == "dact" ? "activation" : "weight";
      what += strf("%s%.1f%% of the %s gradients stored as zero (%s: %.2f%%), %.1f%% subnormal",
                   what.empty() ? "" : "; ", 100 * f["zero_frac"].get<double>(), k.c_str(),
                   reference.c_str(), 100 * f["reference_zero_frac"].get<double>(),
                   100 * f["subnormal_frac"].get<double>());
    }
    if (!what.empty()) md += "- **" + g.name + "**: gradient underflow: " + what + ".\n";
  }
  if (md.empty()) return "";
  return "\nUnderflow (flagged at 1 point more zeros than " + reference +
         " or 5% subnormal): the precision these modes lose, whatever the loss verdict says "
         "it cost on this task.\n\n" +
         md;
}

// The block-scaled modes' quantization error at their last telemetry step (first seed):
// SQNR per GEMM operand over every quantized slot (and the least slot's), and the worst
// operand's shares of zeros and of saturating and underflowing block scales.
std::string quant_md(const std::vector<RunGroup>& groups) {
  static const char* kOperands[] = {"forward input", "forward weight", "dgrad grad",
                                    "dgrad weight",  "wgrad grad",     "wgrad input"};
  std::string md;
  for (const auto& g : groups) {
    const json* fs = first_summary(g.runs);
    if (!fs || !fs->contains("quant") || !(*fs)["quant"].is_object()) continue;
    const json& q = (*fs)["quant"];
    const json& ops = q["operands"];
    std::string row = "| " + g.name + " | " + std::to_string(q.value("step", 0)) + " |";
    double zero = 0, sat = 0, under = 0;
    for (const char* op : kOperands) {
      if (!ops.contains(op)) {
        row += " bf16 |";
        continue;
      }
      const json& o = ops[op];
      row += " " + num(o["sqnr_db"], "%.1f") + " (" + num(o["least_sqnr_db"], "%.1f") + ") |";
      zero = std::max(zero, o.value("zero_frac", 0.0));
      sat = std::max(sat, o.value("block_saturated_frac", 0.0));
      under = std::max(under, o.value("block_underflow_frac", 0.0));
    }
    md += row + strf(" %.1f%% | %.1f%% | %.2f%% |\n", 100 * zero, 100 * sat, 100 * under);
  }
  if (md.empty()) return "";
  return "\nQuantization error of each block-scaled recipe at its last telemetry step (first "
         "seed), per GEMM operand: SQNR in dB of the quantized operand against its bf16 values "
         "over all quantized layers (the least layer's in brackets); then, for the worst "
         "operand, the share of elements that quantize to zero and the shares of scale "
         "groups with a clipped element (saturated) and with a scale at or below its format's "
         "least normal value (underflow). bf16: not quantized. Saturated blocks are by design "
         "where the scale is OCP's 2^(floor(log2 amax) - emax) (mxfp4, precision.recipe."
         "scale_rule=ocp): it clips a block's largest element whenever that element's mantissa "
         "passes the element format's largest, about half the blocks of a smooth operand; the "
         "ceil rule and amax scales clip none.\n\n"
         "| mode | step | fwd input | fwd weight | dgrad grad | dgrad weight | wgrad grad | "
         "wgrad input | zeros | blocks saturated | blocks underflowing |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
         md;
}

// precision.mode=auto: each run's final formats (first seed), per layer and block linear,
// counted over the linear's six GEMM operands.
std::string auto_md(const std::vector<RunGroup>& groups) {
  std::string md;
  for (const auto& g : groups) {
    const json* fs = first_summary(g.runs);
    if (!fs || !fs->contains(mode_name(Mode::Auto))) continue;
    const json& a = (*fs)[mode_name(Mode::Auto)];
    md += strf(
        "\n%s: final formats (first seed; %.0f%% of block-linear FLOPs in <= 8 bits), "
        "counted over each linear's six GEMM operands.\n\n"
        "| layer | qkv | attproj | fc | fcproj |\n|---:|---|---|---|---|\n",
        g.name.c_str(), 100 * a.value("low_bit_flop_share", 0.0));
    for (size_t l = 0; l < a["formats"].size(); l++) {
      md += strf("| %zu |", l);
      for (const char* lin : {"qkv", "attproj", "fc", "fcproj"}) {
        std::map<std::string, int> count;
        std::string split;
        for (const auto& [op, f] : a["formats"][l][lin].items()) {
          if (f.is_string()) count[f.get<std::string>()]++;
          if (op == "split_channels" && f.is_array() && !f.empty()) split = f.dump();
        }
        std::string cell;
        for (const auto& [f, n] : count)
          cell += (cell.empty() ? "" : ", ") + strf("%s x%d", f.c_str(), n);
        md += " " + cell + (split.empty() ? "" : "; split channels " + split) + " |";
      }
      md += "\n";
    }
  }
  return md;
}

}  // namespace tg
