// suggest.h: "did you mean" for a misspelt name (a config key, an option, a subcommand).
#pragma once
#include <string>
#include <vector>

namespace tg {

// Edit distance of a and b counting insertions, deletions, substitutions and swaps of two
// neighbouring characters as one edit each (Damerau-Levenshtein, optimal string alignment).
int edit_distance(const std::string& a, const std::string& b);

// The names among `known` closest to `given`, best first (at most `max_names`, all equally
// close): those within a few edits (a quarter of the name's length, at least 1, at most 3),
// else for a dotted name those whose last part is as close to the given one's last part
// (`--steps`, `--stpes` or `--eval.steps` for train.steps). Empty when nothing is close.
std::vector<std::string> closest_names(const std::string& given,
                                       const std::vector<std::string>& known, size_t max_names = 3);

// " (did you mean 'PREFIXname'?)", " (did you mean 'PREFIXa' or 'PREFIXb'?)", or "" when
// nothing is close; `prefix` is put before each name ("--" for options).
std::string did_you_mean(const std::string& given, const std::vector<std::string>& known,
                         const std::string& prefix = "");

}  // namespace tg
