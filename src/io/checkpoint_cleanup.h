// checkpoint_cleanup.h: what interrupted checkpoint writes and prunes leave in a run
// directory, removed when the next run takes the directory.
//
// A checkpoint is written as .ckpt_<step>.tmp and renamed to ckpt_<step> when complete; one
// that replaces a checkpoint of the same step first moves that one to .ckpt_<step>.old; a
// pruned one is renamed to .ckpt_<step>.pruning before its files are deleted; every file is
// written as <name>.<pid>.tmp and renamed. A kill (or a rank that fails) between those steps
// leaves the temporary names behind, and a kill inside an older version's pruning, which
// deleted ckpt_<step> in place, leaves a folder that lacks files below a complete newer one.
// None of these can be a valid checkpoint, so none is ever resumed; cleanup_run_dir removes
// them, and puts back an .old whose replacement never arrived (it was complete when it was
// moved). Whatever could still be evidence stays: a checkpoint whose files are all there but
// damaged, one that lacks files with no complete checkpoint above it (resume names it),
// another run's checkpoint, anything moved aside (.replaced-N), anything not named as above.
#pragma once
#include <string>
#include <vector>

namespace tg {

struct RunDirCleanup {
  std::vector<std::string> removed;   // names (in out_dir) removed
  std::vector<std::string> restored;  // .ckpt_<step>.old put back as ckpt_<step>
};

// Cleans out_dir as above. Only call with the directory's lock held (src/training/run_lock.h):
// a live run's temporary names look the same as a dead one's.
RunDirCleanup cleanup_run_dir(const std::string& out_dir);
// One line saying what was removed and restored ("" when nothing was).
std::string cleanup_line(const std::string& out_dir, const RunDirCleanup& c);

// Removes one checkpoint folder so that a kill part way leaves a name cleanup_run_dir
// recognises (.ckpt_<step>.pruning) rather than a ckpt_<step> that lacks files.
void remove_checkpoint_dir(const std::string& dir);

}  // namespace tg
