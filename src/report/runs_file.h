// runs_file.h: a report's runs as one file, runs.jsonl. A study keeps its runs' configs and
// summaries there instead of a folder per run: a config and a summary are ~4 KiB of JSON, and
// the runs of a study agree in most of it (the model, the data, the optimizer, the machine),
// so the first line holds what every run has alike, once, and each further line one run's
// differences. `train_gpt report runs.jsonl` reads it back and remakes the report.
//
//   {"runs_file":1,"runs":2,"report":{"reference":"fp32",...},"shared":{"config":{...},...}}
//   {"config":{"precision":{"mode":"fp32"},"train":{"seed":1}},"summary":{"final_val_loss":1.25}}
//   {"config":{"precision":{"mode":"bf16"},"train":{"seed":1}},"summary":{"final_val_loss":1.26}}
//
// A run line is the run's object with the shared part taken out: keys whose values are the
// shared ones dropped, objects that the shared part also has reduced to the keys that differ
// (recursively); reading merges the shared part back in, so a run comes back whole and exactly
// as written (numbers round-trip through JSON unchanged).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tg {

// The runs file's name in a report's folder, and its format's version (line 1's "runs_file").
inline constexpr const char* kRunsFileName = "runs.jsonl";
inline constexpr int kRunsFileVersion = 1;

// What every object of `objects` has alike: the keys whose values are equal in all of them, and
// for a key whose values are objects in all of them, what those have alike (when anything).
nlohmann::json shared_part(const std::vector<nlohmann::json>& objects);
// `object` without what `shared` already says; merged_with(without_shared(o, s), s) == o for
// any shared part s of o.
nlohmann::json without_shared(const nlohmann::json& object, const nlohmann::json& shared);
nlohmann::json merged_with(nlohmann::json object, const nlohmann::json& shared);

// The file's content: the report's facts (the options it was made with) and every run whole.
struct RunsFile {
  nlohmann::json report = nlohmann::json::object();
  std::vector<nlohmann::json> runs;
};

// Writes runs (objects) to path, atomically: the shared part once, one line a run.
void write_runs_file(const std::string& path, const RunsFile& file);
// Reads a runs file back; Error naming the file (and line) when it is not one, is cut short or a
// line is no JSON object.
RunsFile read_runs_file(const std::string& path);

}  // namespace tg
