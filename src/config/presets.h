// presets.h: the one registry of presets, named lists of config keys (docs/precision.md,
// "State presets"; docs/compare.md for the precision presets).
//
// Two families:
// - state presets, the values of precision.state.preset and of `compare --states`: each sets
//   every precision.state.* key but allow_narrowing, so that a run's state is the preset's
//   whole (moments, master weights, gradient accumulation, the formats gradients and ZeRO-1's
//   weights travel in). Keys given beside it win (in a config file's "state" object and on the
//   command line the preset is applied first). "lean" is what the state studies found safe
//   together (docs/state-wire-shakespeare): bf16-sr master weights, fp8 e4m3 moments, bf16
//   gradients on the wire.
// - precision presets, the names of `compare --modes`: precision.mode and what a study sets
//   beyond it (fp16 without loss scaling, fp8 with current scales, NVFP4 without one of its
//   ingredients, the outlier handlings...).
// A compare study is a list of precision presets times a list of state presets.
//
// The registry lives in src/config/ because the config applies state presets while it parses
// (precision.state.preset); src/precision/ and the commands read it from here. Formats and
// modes are named through their registries (src/numerics/), never spelled in the rows.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tg {

struct Config;

// One config key and its value, as the command line spells them.
using KeyValues = std::vector<std::pair<std::string, std::string>>;

enum class PresetFamily { Precision, State };

struct Preset {
  std::string name;
  PresetFamily family;
  const char* what;  // for reports and `--help`
  // The keys it sets, in order (later wins): a precision preset's first two are precision.mode
  // and precision.stochastic_rounding; a state preset's every precision.state.* key but
  // allow_narrowing and preset.
  KeyValues keys;
};

// A family's presets in the order `--help` and `compare` list them; the first state preset is
// fp32 state (the defaults).
const std::vector<Preset>& presets(PresetFamily family);
// The preset of `family` named `name`; nullptr when there is none.
const Preset* find_preset(PresetFamily family, const std::string& name);
// "fp32, moments-bf16, ...": a family's names, for messages.
std::string preset_names_text(PresetFamily family);
// The precision presets `compare` runs without --modes: fp32, bf16, fp16 with and without loss
// scaling, fp8.
std::vector<const Preset*> default_mode_study();
// Sets the preset's keys in cfg as the command line would; a state preset through
// precision.state.preset, so that the run's config names it.
void apply_preset(Config& cfg, const Preset& preset);
// The value of precision.state.preset that sets no key (the keys as given).
const char* no_state_preset();

}  // namespace tg
