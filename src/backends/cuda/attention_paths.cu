// attention_paths.cu: the CUDA backend's attention path (attention_paths.h); the rules are
// attention_choice.h's, this file the state the backend keeps of them.
#include "attention_paths.h"
#include "src/base/test_hooks.h"

namespace tg::gpu {

AttentionChoice AttentionPaths::choice(int head_size, DType t) const {
  auto it = settled_.find(std::make_pair(head_size, t));
  if (it != settled_.end()) return it->second;
  return choose_attention(c_.opt.attention, cudnn_found(), t, head_size);
}

AttentionChoice AttentionPaths::settle(const AttentionShape& s) {
  bool asked = false;
  const AttentionChoice c =
      choose_attention(c_.opt.attention, cudnn_found(), s.t, s.head_size, [&] {
        asked = true;
        return cudnn_graphs(s, true);
      });
  if (asked && c.path == AttentionPath::Cudnn) built_.insert(key(s));
  settled_[std::make_pair(s.head_size, s.t)] = c;
  return c;
}

void AttentionPaths::agree(const AttentionShape& s, const AttentionChoice& agreed) {
  if (agreed.path != AttentionPath::Cublas && agreed.path != AttentionPath::Cudnn)
    throw Error(strf("the CUDA backend cannot take the ranks' attention path %s",
                     attention_path_name(agreed.path)));
  settled_[std::make_pair(s.head_size, s.t)] = agreed;
}

const AttentionChoice& AttentionPaths::settled(const AttentionShape& s) {
  const auto k = std::make_pair(s.head_size, s.t);
  auto it = settled_.find(k);
  if (it == settled_.end()) it = settled_.emplace(k, choice(s.head_size, s.t)).first;
  return it->second;
}

bool AttentionPaths::forward_builds(const AttentionShape& s) {
  const ShapeKey k = key(s);
  if (built_.count(k)) return true;
  if (refused_.count(k)) return false;
  (cudnn_graphs(s, false).empty() ? built_ : refused_).insert(k);
  return built_.count(k) > 0;
}

CudnnProbe AttentionPaths::cudnn_found() const {
  const AttentionRequest a = effective_attention(c_.opt.attention);
  if (a != AttentionRequest::Cudnn && a != AttentionRequest::Auto) return {};
  if (test_hooks::cudnn_refuses().empty()) return cudnn_probe(c_.opt.cudnn_lib);
  CudnnProbe p;
  p.built_in = p.loaded = true;
  p.detail = "a stand-in cuDNN (TG_TEST_CUDNN_REFUSE)";
  return p;
}

std::string AttentionPaths::cudnn_graphs(const AttentionShape& s, bool backward) {
  // The stand-in: "forward" or "backward" refuses that graph at start-up (both asked there);
  // "sampling" builds start-up's and refuses every forward-only shape's after.
  const std::string hook = test_hooks::cudnn_refuses();
  std::string why;
  if (hook.empty())
    why = cudnn_build_graphs(c_, s.t, s.B, s.T, s.NH * s.head_size, s.NH, backward);
  else if (!backward)
    why = "forward graph: refused (TG_TEST_CUDNN_REFUSE)";
  else if (hook != "sampling")
    why = hook + " graph: refused (TG_TEST_CUDNN_REFUSE)";
  return why.empty() ? why : "cuDNN at " + attention_shape_name(s) + ": " + why;
}

}  // namespace tg::gpu
