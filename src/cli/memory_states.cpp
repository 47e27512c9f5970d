// memory_states.cpp: `train_gpt memory --states` (memory_states.h).
#include "memory_states.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "src/base/common.h"
#include "src/base/host_memory.h"
#include "src/base/suggest.h"
#include "src/config/config.h"
#include "src/model/model.h"
#include "src/precision/quant_memory.h"
#include "src/precision/precision.h"

namespace tg {

namespace {

// The presets `names` lists ("all": every one), in its order.
std::vector<const Preset*> presets_named(const std::string& names) {
  std::vector<const Preset*> out;
  if (names == "all") {
    for (const Preset& p : presets(PresetFamily::State)) out.push_back(&p);
    return out;
  }
  std::vector<std::string> all;
  for (const Preset& p : presets(PresetFamily::State)) all.push_back(p.name);
  const std::string list = names + ",";
  for (size_t pos = 0, next; (next = list.find(',', pos)) != std::string::npos; pos = next + 1) {
    const std::string name = list.substr(pos, next - pos);
    if (name.empty()) continue;
    const Preset* p = find_preset(PresetFamily::State, name);
    if (!p)
      throw UsageError(strf("memory: unknown state preset '%s' in --states%s (or all)",
                            name.c_str(), did_you_mean(name, all).c_str()));
    out.push_back(p);
  }
  return out;
}

// One table: a row per preset that `mode` keeps, over `ranks` ranks of ZeRO-1 (1: none).
void print_table(const std::vector<std::pair<const Preset*, Config>>& rows, int ranks) {
  printf("\n%s\n\n| state | mode | bytes / parameter |", ranks > 1
                                                        ? strf("Per rank, ZeRO-1 over %d ranks:",
                                                               ranks).c_str()
                                                        : "One process:");
  for (const Gpt2Size& s : gpt2_sizes()) printf(" GPT-2 %s |", s.label);
  printf("%s\n|---|---|---:|", ranks > 1 ? " sent per step at 1.5B |" : "");
  for (size_t i = 0; i <= gpt2_sizes().size() - (ranks > 1 ? 0 : 1); i++) printf("---:|");
  printf("\n");
  for (const auto& [preset, c] : rows) {
    const GPTConfig xl = gpt2_xl_config();
    const double per_param = double(planned_state_bytes(c, xl, ranks)) / double(num_parameters(xl));
    printf("| %s | %s | %.2f |", preset->name.c_str(), mode_name(precision_spec(c).mode), per_param);
    for (const Gpt2Size& s : gpt2_sizes())
      printf(" %s |", fmt_bytes(double(planned_state_bytes(c, gpt2_config(s), ranks))).c_str());
    if (ranks > 1)  // what this rank sends for the gradients and the weight all-gather
      printf(" %s |", fmt_bytes(double(planned_comm_bytes(c, xl, ranks, true))).c_str());
    printf("\n");
  }
}

}  // namespace

void print_state_presets(const Config& cfg, Mode mode, const std::string& names, int zero_ranks) {
  std::vector<std::pair<const Preset*, Config>> rows;
  std::vector<std::string> refused;
  for (const Preset* p : presets_named(names)) {
    Config c = cfg;
    set_precision_mode(c, mode);
    config_set(c, "precision.state.preset", p->name);
    c.train.zero_stage = 1;  // what the ZeRO-1 presets need; the first table is one process
    try {
      config_validate_run(c, zero_ranks);
      rows.push_back({p, c});
    } catch (const UsageError& e) {
      // Planned in the mode that keeps it, and said why below the tables.
      const std::optional<Mode> keeps = state_keeping_mode(c);
      if (keeps) {
        set_precision_mode(c, *keeps);
        rows.push_back({p, c});
      }
      refused.push_back(p->name + (keeps ? strf(" (planned in %s)", mode_name(*keeps)) : "") +
                        ": " + e.what());
    }
  }
  printf("\nState presets (precision.state.preset) in %s, or in the mode that keeps them: "
         "weights, master weights, gradients and Adam moments, per parameter (at GPT-2 1.5B) "
         "and in total; activations and the reduction's staging come on top.\n",
         mode_name(mode));
  print_table(rows, 1);
  print_table(rows, zero_ranks);
  for (const std::string& r : refused) printf("\nnot in %s: %s", mode_name(mode), r.c_str());
  if (!refused.empty()) printf("\n");
}

}  // namespace tg
