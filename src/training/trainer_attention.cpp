// trainer_attention.cpp: the Trainer settles the attention path at start-up, and the ranks of a
// data-parallel run agree on one (attention_choice.h's agree_attention).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/backends/backend.h"
#include "src/comm/comm.h"
#include "trainer.h"

namespace tg {

namespace {

// One rank's settled choice as all_gather_bytes carries it (a fixed size): the path, whether
// its error is the configuration's, and the error or, without one, the reason (cut short).
struct WireChoice {
  int32_t path = 0;
  int32_t failed = 0;
  int32_t usage_error = 0;
  char text[1012] = {};
};

WireChoice to_wire(const AttentionChoice& c) {
  WireChoice w;
  w.path = int32_t(c.path);
  w.failed = !c.error.empty();
  w.usage_error = c.usage_error;
  const std::string& text = c.error.empty() ? c.reason : c.error;
  memcpy(w.text, text.data(), std::min(text.size(), sizeof(w.text) - 1));
  return w;
}

AttentionChoice from_wire(const WireChoice& w) {
  AttentionChoice c;
  c.path = AttentionPath(w.path);
  c.lse = c.path == AttentionPath::Cudnn || c.path == AttentionPath::CpuLse;
  c.usage_error = w.usage_error != 0;
  (w.failed ? c.error : c.reason) = std::string(w.text, strnlen(w.text, sizeof(w.text)));
  return c;
}

// Every rank's settled choice, in rank order.
std::vector<AttentionChoice> gather_choices(Comm& cm, const AttentionChoice& mine) {
  const WireChoice w = to_wire(mine);
  std::vector<WireChoice> all(size_t(cm.world()));
  cm.all_gather_bytes(&w, all.data(), sizeof(WireChoice));
  std::vector<AttentionChoice> out;
  for (const WireChoice& r : all) out.push_back(from_wire(r));
  return out;
}

}  // namespace

// The attention path, settled at the run's shape before the memory plan and the model size the
// activations for it: where cudnn would run, the backend builds cuDNN's forward and backward
// graphs now, so that auto takes cublas at start-up where cuDNN refuses one (the start-up line
// says why) and an explicit cudnn that cannot build stops here, naming the key. A resumed run
// settles the path its own config names (cuda.* keys are never read back from a checkpoint).
// Several ranks then vote with one all-gather: each rank's GPU and libcudnn decided alone, and
// ranks on different paths would run different numerics and size different activations; a
// rank's error stops every rank with the same message.
void Trainer::settle_attention() {
  const AttentionShape s{cfg_.data.batch_size, cfg_.data.seq_len, mc_.n_head,
                         mc_.n_embd / mc_.n_head, spec_.compute};
  const AttentionChoice mine = be_->settle_attention(s);
  if (world_ == 1) {
    require_runnable(mine);
    return;
  }
  const AttentionChoice agreed = agree_attention(gather_choices(*cm_, mine), rank_);
  require_runnable(agreed);
  if (agreed.path != mine.path || agreed.reason != mine.reason)
    be_->settle_agreed_attention(s, agreed);
}

}  // namespace tg
