// state_presets.h: named combinations of the optimizer state's formats, the values of
// precision.state.preset and of `compare --states` (docs/precision.md, "State presets").
//
// A preset sets every precision.state.* key but allow_narrowing, so that a run's state is the
// preset's whole: the moments, the master weights, the gradient accumulation and the formats
// gradients and ZeRO-1's weights travel in. Keys given beside it win (in a config file's
// "state" object and on the command line the preset is applied first). "lean" is what the
// state studies found safe together (docs/state-wire-shakespeare): bf16-sr master weights,
// fp8 e4m3 moments, bf16 gradients on the wire.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tg {

// One config key and its value, as the command line spells them.
using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct StatePreset {
  std::string name;
  const char* what;  // for reports and `--help`
  KeyValues keys;    // every precision.state.* key but allow_narrowing and preset
};

// Every preset, in the order `--help` and `compare --states` list them; the first is fp32
// state (the defaults).
const std::vector<StatePreset>& state_presets();
// The preset named `name`; nullptr when there is none.
const StatePreset* find_state_preset(const std::string& name);
// "fp32, moments-bf16, ...": the names, for messages.
std::string state_preset_names_text();
// The value of precision.state.preset that sets no key (the keys as given).
const char* no_state_preset();

}  // namespace tg
