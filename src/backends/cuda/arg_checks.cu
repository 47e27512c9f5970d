// arg_checks.cu: arg_checks.h's checks (host code only).
#include <tuple>

#include "arg_checks.h"
#include "src/base/common.h"
#include "src/numerics/master_format.h"
#include "src/numerics/moment_block.h"

namespace tg::gpu {

void need_same(const char* op, std::initializer_list<Tensor> ts) {
  DType t = DType::F32;
  bool first = true;
  for (const Tensor& x : ts) {
    if (!x) continue;
    if (!first && x.dtype != t)
      throw Error(strf("cuda backend: %s needs tensors of one type (%s and %s)", op, dtype_name(t),
                       dtype_name(x.dtype)));
    t = x.dtype;
    first = false;
  }
}
void need_f32(const char* op, Tensor t) {
  if (t && t.dtype != DType::F32)
    throw Error(strf("cuda backend: %s needs fp32 %s", op, dtype_name(t.dtype)));
}
void need_moment(const char* op, Tensor t, const MomentFormat& f) {
  const DType want = moment_is_plain(f) ? DType::F32 : f.dtype;
  if (t.dtype != want)
    throw Error(strf("cuda backend: %s is %s, its format stores %s", op, dtype_name(t.dtype),
                     dtype_name(want)));
}

void need_adamw(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                const AdamWArgs& a) {
  need_same("adamw", {params, grads});
  // FP8 moments (src/numerics/moment_block.h): the blocks' meta beside the codes.
  for (auto [t, meta, f] :
       {std::tuple{m, a.m_meta, a.m_format}, std::tuple{v, a.v_meta, a.v_format}})
    if (moment_is_blocked(f) &&
        (f.block < kMomentBlockMin || f.block > kMomentBlockMax || t.numel != params.numel ||
         meta.dtype != DType::F32 ||
         meta.numel != moment_blocks(t.numel, f.block) * size_t(moment_meta_words(f))))
      throw Error("cuda backend: adamw: an fp8 moment's codes or block meta do not match");
  if (a.master == MasterFormat::FP32) {
    need_f32("adamw master", master);
    if (master.numel != params.numel) throw Error("cuda backend: adamw master length differs");
  } else if (params.dtype != DType::BF16 ||
             (a.master == MasterFormat::BF16Kahan &&
              (master.dtype != DType::BF16 || master.numel != params.numel))) {
    throw Error(strf("cuda backend: adamw with %s master weights needs bf16 weights%s",
                     master_format_name(a.master),
                     a.master == MasterFormat::BF16Kahan ? " and a bf16 compensation" : ""));
  }
  need_moment("adamw m", m, a.m_format);
  need_moment("adamw v", v, a.v_format);
}

}  // namespace tg::gpu
