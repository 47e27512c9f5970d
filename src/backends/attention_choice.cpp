// attention_choice.cpp: cuda.attention's choice of path (attention_choice.h), the rules in one
// place so that the CUDA backend and the CPU tests read the same ones.
#include "attention_choice.h"

namespace tg {

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::Cublas: return "cublas";
    case AttentionPath::Fused: return "fused";
    case AttentionPath::Flash: return "flash";
    case AttentionPath::Cudnn: return "cudnn";
  }
  return "?";
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

// Why cuDNN cannot run here ("" when it can).
std::string cudnn_unusable(const CudnnProbe& cudnn, DType t, int head_size) {
  if (!cudnn.built_in) return cudnn.detail;
  if (!cudnn.loaded)
    return cudnn.detail +
           " (pip install nvidia-cudnn-cu13, which PyTorch brings, or name the file with "
           "cuda.cudnn_lib)";
  std::string why;
  return cudnn_attention_supported(t, head_size, &why) ? "" : why;
}

AttentionChoice lse_path(AttentionPath p, std::string reason) {
  AttentionChoice c;
  c.path = p;
  c.lse = true;
  c.reason = std::move(reason);
  return c;
}

AttentionChoice att_path(AttentionPath p, std::string reason) {
  AttentionChoice c;
  c.path = p;
  c.reason = std::move(reason);
  return c;
}

}  // namespace

AttentionRequest attention_request(AttentionPath p) {
  switch (p) {
    case AttentionPath::Cublas: return AttentionRequest::Cublas;
    case AttentionPath::Fused: return AttentionRequest::Fused;
    case AttentionPath::Flash: return AttentionRequest::Flash;
    case AttentionPath::Cudnn: return AttentionRequest::Cudnn;
  }
  return AttentionRequest::Cublas;
}

AttentionChoice choose_attention(AttentionRequest requested, const CudnnProbe& cudnn, DType t,
                                 int head_size, bool flash_ok) {
  using R = AttentionRequest;
  if (requested == R::Cublas) return att_path(AttentionPath::Cublas, "cuda.attention=cublas");
  if (requested == R::Fused)
    return att_path(AttentionPath::Fused, "cuda.attention=fused: single-pass forward");
  if (requested == R::Flash) {
    // As before cudnn existed: a head size the kernels lack runs the materialised path.
    if (flash_ok)
      return lse_path(AttentionPath::Flash,
                      "cuda.attention=flash: per-row logsumexp kept, no T x T probabilities");
    return att_path(AttentionPath::Cublas,
                    strf("cuda.attention=flash, but the flash kernels take head sizes 32, 64, "
                         "96 and 128, not %d",
                         head_size));
  }
  const std::string why = cudnn_unusable(cudnn, t, head_size);
  if (requested == R::Cudnn) {
    AttentionChoice c = lse_path(AttentionPath::Cudnn, "cuda.attention=cudnn: " + cudnn.detail);
    if (!why.empty()) c.error = "cuda.attention=cudnn cannot run: " + why;
    return c;
  }
  // auto
  if (why.empty()) return lse_path(AttentionPath::Cudnn, "cuda.attention=auto: " + cudnn.detail);
  return att_path(AttentionPath::Cublas, "cuda.attention=auto: no cuDNN: " + why);
}

}  // namespace tg
