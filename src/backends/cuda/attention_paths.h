// attention_paths.h: the CUDA backend's attention path per (head size, type), settled at
// start-up (Backend::settle_attention: cuDNN's forward and backward graphs built at the run's
// shape where cudnn would run), agreed between ranks (Backend::settle_agreed_attention), and
// which shapes cuDNN has built or refused its graphs for since.
#pragma once
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "launch.h"

namespace tg::gpu {

class AttentionPaths {
 public:
  explicit AttentionPaths(Ctx& c) : c_(c) {}
  // The path settled for this head size and type, else the choice short of cuDNN's graphs (a
  // model built without settle_attention: bench's and the tests' models).
  AttentionChoice choice(int head_size, DType t) const;
  // Where cudnn would run, its forward and backward graphs are built now at s (and kept for
  // the run), so that a graph cuDNN refuses is found before the model sizes its activations.
  AttentionChoice settle(const AttentionShape& s);
  // The ranks' agreed path replaces the settled one (settle_agreed_attention).
  void agree(const AttentionShape& s, const AttentionChoice& agreed);
  // The path for s's head size and type, settled on the first ask where nothing settled it.
  const AttentionChoice& settled(const AttentionShape& s);
  // Whether cuDNN's forward graph (with lse) runs at s: built at start-up, or now for a shape
  // start-up did not build (sampling's B 1 x T t); false where cuDNN refuses it, the refusal
  // kept (refused) so that it is asked once.
  bool forward_builds(const AttentionShape& s);
  bool refused(const AttentionShape& s) const { return refused_.count(key(s)) > 0; }

 private:
  using ShapeKey = std::tuple<int, int, int, int, DType>;
  static ShapeKey key(const AttentionShape& s) { return {s.B, s.T, s.NH, s.head_size, s.t}; }
  // cuDNN is looked for only when cudnn or auto asks (flash is read as cudnn).
  // TG_TEST_CUDNN_REFUSE stands in a loaded cuDNN that refuses one graph.
  CudnnProbe cudnn_found() const;
  // "" when cuDNN builds s's forward graph (and, with `backward`, its backward graph), else
  // which it refused and why.
  std::string cudnn_graphs(const AttentionShape& s, bool backward);

  Ctx& c_;
  std::map<std::pair<int, DType>, AttentionChoice> settled_;
  std::set<ShapeKey> built_, refused_;  // forward graphs built (both at start-up) or refused
};

}  // namespace tg::gpu
