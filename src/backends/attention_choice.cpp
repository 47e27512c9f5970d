// attention_choice.cpp: cuda.attention's choice of path (attention_choice.h), the rules in one
// place so that the CUDA backend and the CPU tests read the same ones.
#include "attention_choice.h"

#include <utility>  // std::move

namespace tg {

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::Cublas: return "cublas";
    case AttentionPath::Cudnn: return "cudnn";
    case AttentionPath::CpuLse: return "lse";
  }
  return "?";
}

std::string attention_shape_name(const AttentionShape& s) {
  return strf("B %d x T %d, %d heads of %d, %s", s.B, s.T, s.NH, s.head_size, dtype_name(s.t));
}

AttentionRequest effective_attention(AttentionRequest r) {
  if (r == AttentionRequest::Flash) return AttentionRequest::Cudnn;
  if (r == AttentionRequest::Fused) return AttentionRequest::Cublas;
  return r;
}

std::string attention_request_notice(AttentionRequest r) {
  if (r == AttentionRequest::Flash)
    return "notice: cuda.attention=flash: the hand-written flash kernels have gone; read as "
           "cudnn, the path with the same lse layout (on the CPU its lse twin)";
  if (r == AttentionRequest::Fused)
    return "notice: cuda.attention=fused: the single-pass forward has gone; read as cublas, "
           "the path with the same T x T probabilities and backward";
  return "";
}

bool cudnn_attention_supported(DType t, int head_size, std::string* why) {
  if (t != DType::BF16 && t != DType::F16) {
    *why = strf("cuDNN's fused attention computes in bf16 or fp16, not %s", dtype_name(t));
    return false;
  }
  if (head_size % 8 != 0 || head_size < 8 || head_size > 128) {
    *why = strf(
        "cuDNN's fused attention takes head sizes that are multiples of 8 up to 128, "
        "not %d",
        head_size);
    return false;
  }
  return true;
}

namespace {

// Why cuDNN cannot run here ("" when it can), short of the graphs.
std::string cudnn_unusable(const CudnnProbe& cudnn, DType t, int head_size) {
  if (!cudnn.built_in) return cudnn.detail;
  if (!cudnn.loaded)
    return cudnn.detail +
           " (pip install nvidia-cudnn-cu13, which PyTorch brings, or name the file with "
           "cuda.cudnn_lib)";
  std::string why;
  return cudnn_attention_supported(t, head_size, &why) ? "" : why;
}

AttentionChoice path_of(AttentionPath p, bool lse, std::string reason) {
  AttentionChoice c;
  c.path = p;
  c.lse = lse;
  c.reason = std::move(reason);
  return c;
}

}  // namespace

AttentionRequest attention_request(AttentionPath p) {
  switch (p) {
    case AttentionPath::Cublas: return AttentionRequest::Cublas;
    case AttentionPath::Cudnn:
    case AttentionPath::CpuLse: return AttentionRequest::Cudnn;
  }
  return AttentionRequest::Cublas;
}

AttentionChoice choose_attention(AttentionRequest requested, const CudnnProbe& cudnn, DType t,
                                 int head_size, const CudnnGraphCheck& graphs) {
  using R = AttentionRequest;
  if (requested == R::Cublas) return path_of(AttentionPath::Cublas, false, "cuda.attention=cublas");
  if (requested == R::Fused)
    return path_of(AttentionPath::Cublas, false, "cuda.attention=fused (read as cublas)");
  // flash (an old config's) is read as cudnn; the key is named as the config spells it.
  const std::string key = std::string("cuda.attention=") + enum_name(requested);
  const std::string as = requested == R::Flash ? " (read as cudnn)" : "";
  std::string why = cudnn_unusable(cudnn, t, head_size);
  const bool usage = !why.empty();  // the config's; a graph cuDNN refuses is the machine's
  if (why.empty() && graphs) why = graphs();
  if (requested != R::Auto) {
    AttentionChoice c = path_of(AttentionPath::Cudnn, true, key + as + ": " + cudnn.detail);
    if (!why.empty()) {
      c.error = key + as + " cannot run: " + why;
      c.usage_error = usage;
      if (!usage) c.error += " (cuda.attention=auto or cublas take the cuBLAS path instead)";
    }
    return c;
  }
  if (why.empty()) return path_of(AttentionPath::Cudnn, true, key + ": " + cudnn.detail);
  return path_of(AttentionPath::Cublas, false, key + (usage ? ": no cuDNN: " : ": ") + why);
}

void require_runnable(const AttentionChoice& c) {
  if (c.error.empty()) return;
  if (c.usage_error) throw UsageError(c.error);
  throw Error(c.error);
}

AttentionChoice agree_attention(const std::vector<AttentionChoice>& ranks, int rank) {
  // Checked in rank order, so that every rank finds the same answer. An error every rank has
  // alike (the configuration's) needs no rank's name.
  for (size_t r = 0; r < ranks.size(); r++)
    if (!ranks[r].error.empty()) {
      AttentionChoice c = ranks[r];
      for (const AttentionChoice& o : ranks)
        if (o.error != c.error) {
          c.error = strf("rank %zu: %s", r, c.error.c_str());
          break;
        }
      return c;
    }
  size_t other = 0;  // the first rank whose path is not rank 0's
  while (other < ranks.size() && ranks[other].path == ranks[0].path) other++;
  if (other == ranks.size()) return ranks.at(size_t(rank));
  // Only auto differs between ranks (an explicit path is the same on all, or an error):
  // cudnn where a rank's cuDNN built the graphs, cublas where it did not. Any rank on a third
  // path (the CPU's lse twin beside GPU ranks) is a mix no vote can mend.
  for (size_t r = 0; r < ranks.size(); r++)
    if (ranks[r].path != AttentionPath::Cudnn && ranks[r].path != AttentionPath::Cublas) {
      const size_t at = r == 0 ? other : r;
      throw Error(strf("the ranks settled different attention paths: %s on rank 0, %s on rank %zu",
                       attention_path_name(ranks[0].path), attention_path_name(ranks[at].path),
                       at));
    }
  size_t refused = 0;
  while (ranks[refused].path != AttentionPath::Cublas) refused++;
  return path_of(AttentionPath::Cublas, false,
                 strf("rank %zu's %s; every rank takes cublas, the path they all can run", refused,
                      ranks[refused].reason.c_str()));
}

}  // namespace tg
