#include "runs_file.h"

#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {
using json = nlohmann::json;

namespace {

// Equal as written: JSON's == takes 1 and 1.0, or 0.0 and -0.0, for the same value, but the
// file must give back what it was given.
bool same_text(const json& a, const json& b) { return a.dump() == b.dump(); }

}  // namespace

json shared_part(const std::vector<json>& objects) {
  json out = json::object();
  if (objects.empty() || !objects[0].is_object()) return out;
  for (const auto& [key, value] : objects[0].items()) {
    bool all_same = true, all_objects = value.is_object();
    std::vector<json> values = {value};
    for (size_t i = 1; i < objects.size(); i++) {
      const auto it = objects[i].find(key);
      if (it == objects[i].end()) {
        all_same = all_objects = false;
        break;
      }
      all_same = all_same && same_text(*it, value);
      all_objects = all_objects && it->is_object();
      values.push_back(*it);
    }
    if (all_same) {
      out[key] = value;
    } else if (all_objects) {
      json inner = shared_part(values);
      if (!inner.empty()) out[key] = std::move(inner);
    }
  }
  return out;
}

json without_shared(const json& object, const json& shared) {
  json out = json::object();
  for (const auto& [key, value] : object.items()) {
    const auto it = shared.find(key);
    if (it == shared.end()) {
      out[key] = value;
    } else if (value.is_object() && it->is_object()) {
      // An object the shared part holds whole leaves nothing; one it holds in part, the rest.
      json inner = without_shared(value, *it);
      if (!inner.empty()) out[key] = std::move(inner);
    } else if (!same_text(value, *it)) {
      out[key] = value;
    }
  }
  return out;
}

json merged_with(json object, const json& shared) {
  for (const auto& [key, value] : shared.items()) {
    const auto it = object.find(key);
    if (it == object.end())
      object[key] = value;
    else if (it->is_object() && value.is_object())
      *it = merged_with(*it, value);
  }
  return object;
}

void write_runs_file(const std::string& path, const RunsFile& file) {
  const json shared = shared_part(file.runs);
  // The format's name first, where `head -c 40` shows it (json objects sort their keys).
  std::string text = strf("{\"runs_file\":%d,\"runs\":%zu,\"report\":", kRunsFileVersion,
                          file.runs.size()) +
                     file.report.dump() + ",\"shared\":" + shared.dump() + "}\n";
  for (const json& run : file.runs) text += without_shared(run, shared).dump() + "\n";
  write_text_atomic(path, text);
}

namespace {

// Line `number` of a runs file as a JSON object; Error naming the file and line otherwise.
json parse_line(const std::string& path, int number, const std::string& line) {
  json j;
  try {
    j = json::parse(line);
  } catch (const std::exception& e) {
    throw Error(strf("%s line %d: not JSON (%s)", path.c_str(), number, e.what()));
  }
  if (!j.is_object()) throw Error(strf("%s line %d: not a JSON object", path.c_str(), number));
  return j;
}

}  // namespace

RunsFile read_runs_file(const std::string& path) {
  const std::vector<char> bytes = read_file(path, "runs file");
  const std::string text(bytes.begin(), bytes.end());
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  if (lines.empty()) throw Error(path + ": empty, not a runs file");
  const json head = json::parse(lines[0], nullptr, false);  // a discarded value, not a throw
  if (!head.is_object() || !head.value("runs_file", json(nullptr)).is_number_integer())
    throw Error(path + ": not a runs file (its first line has no \"runs_file\" version)");
  if (head["runs_file"].get<int>() != kRunsFileVersion)
    throw Error(strf("%s: runs file version %d; this train_gpt reads version %d", path.c_str(),
                     head["runs_file"].get<int>(), kRunsFileVersion));
  RunsFile file;
  file.report = head.value("report", json::object());
  const json shared = head.value("shared", json::object());
  for (size_t i = 1; i < lines.size(); i++)
    file.runs.push_back(merged_with(parse_line(path, int(i) + 1, lines[i]), shared));
  const size_t said = head.value("runs", size_t(0));
  if (file.runs.size() != said)
    throw Error(strf("%s: holds %zu runs, its first line says %zu (cut short?)", path.c_str(),
                     file.runs.size(), said));
  return file;
}

}  // namespace tg
