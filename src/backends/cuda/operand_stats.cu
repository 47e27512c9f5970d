// operand_stats.cu: the CUDA backend's operand view (operand_stats.h): launchers of
// kernels/operand_stats.cuh around the block quantizer (scaled.h).
//
// Per measurement the host reads back one small record (maxima bits, counts, two sums); the
// operand itself never leaves the device. The variant a recipe is measured on (staged to fp32,
// smoothed, split, transposed) is prepared once and reused while the probes ask for the same
// one, as they do for every candidate recipe of one operand; a Hadamard-rotated recipe rotates
// a copy of it (the rotation's signs depend on the recipe's seed).
#include <vector>

#include "kernels/operand_stats.cuh"
#include "operand_stats.h"
#include "quant_params.h"
#include "scaled.h"

namespace tg::gpu {

namespace {

using quant::QuantParams;
constexpr int kThreads = stats::kThreads;

// What the host reads back (kScratchStatsWords), zeroed before each measurement.
struct StatsWords {
  unsigned words[2];  // bits of the tensor amax (NaN skipped), non-finite flag
  float post;         // the quantizer's GEMM factor
  unsigned pad;
  unsigned long long counts[stats::kCounts];
  double totals[2];  // sum r^2, sum (r - q post)^2
};

bool has_smooth(const OperandVariant& v) { return v.smooth && !v.smooth->empty(); }
bool has_split(const OperandVariant& v) { return v.split && !v.split->empty(); }

class DeviceOperandView final : public OperandView {
 public:
  DeviceOperandView(Ctx& c, Tensor t, int rows, int cols) : OperandView(rows, cols), c_(c), t_(t) {
    if (rows < 0 || cols < 0 || t.numel != size_t(rows) * size_t(cols))
      throw Error(
          strf("cuda backend: an operand view of %d x %d over %zu values", rows, cols, t.numel));
    if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
      throw Error(strf("cuda backend: no operand statistics of %s tensors", dtype_name(t.dtype)));
  }
  float amax() override;
  std::vector<float> column_amax() override;
  QuantError quant_error(const OperandRecipe& o, uint64_t seed, const OperandVariant& v) override;
  std::vector<float> values() override;

 private:
  Ctx& c_;
  Tensor t_;
  // Several probes may ask one view for its column amaxes (auto and smoothing): one pass.
  std::vector<float> columns_;
  bool have_columns_ = false;
  bool have_variant_ = false;  // kScratchQStageB holds the variant key_ (with key_split_)
  OperandVariant key_;
  std::vector<int> key_split_;

  size_t size() const { return size_t(rows()) * cols(); }
  float* buffer(ScratchSlot s) { return static_cast<float*>(c_.scratch(s, size() * 4)); }
  StatsWords* words() {
    auto* w = static_cast<StatsWords*>(c_.scratch(kScratchStatsWords, sizeof(StatsWords)));
    TG_CUDA_CHECK(cudaMemsetAsync(w, 0, sizeof(StatsWords), c_.stream));
    return w;
  }
  StatsWords read(const StatsWords* w) {
    StatsWords h;
    download(c_, &h, w, sizeof h);
    return h;
  }
  const float* variant(const OperandVariant& v);
  void smooth_and_split(float* x, const OperandVariant& v);
};

float DeviceOperandView::amax() {
  if (size() == 0) return 0.0f;
  StatsWords* w = words();
  dispatch("operand amax", t_.dtype, [&](auto tag) {
    using E = decltype(tag);
    launch(stats::amax_kernel<E>, c_.grid(size(), kThreads), kThreads, 0, c_.stream,
           static_cast<const E*>(t_.data), size(), &w->words[0]);
    TG_LAUNCH_CHECK();
  });
  return bits_f32(read(w).words[0]);
}

std::vector<float> DeviceOperandView::column_amax() {
  if (have_columns_) return columns_;
  std::vector<float> out(size_t(cols()), 0.0f);
  if (size() == 0) return out;
  constexpr int kRowsPerBlock = 64;
  auto* bits = static_cast<unsigned*>(c_.scratch(kScratchStatsAmax, size_t(cols()) * 4));
  TG_CUDA_CHECK(cudaMemsetAsync(bits, 0, size_t(cols()) * 4, c_.stream));
  const dim3 grid(unsigned((cols() + kThreads - 1) / kThreads),
                  unsigned((rows() + kRowsPerBlock - 1) / kRowsPerBlock));
  dispatch("operand column amax", t_.dtype, [&](auto tag) {
    using E = decltype(tag);
    launch(stats::column_amax_kernel<E>, grid, kThreads, 0, c_.stream,
           static_cast<const E*>(t_.data), rows(), cols(), kRowsPerBlock, bits);
    TG_LAUNCH_CHECK();
  });
  std::vector<unsigned> host(out.size());
  download(c_, host.data(), bits, host.size() * 4);
  for (size_t i = 0; i < out.size(); i++) out[i] = bits_f32(host[i]);
  columns_ = out;
  have_columns_ = true;
  return out;
}

std::vector<float> DeviceOperandView::values() {
  std::vector<float> out(size());
  if (size() == 0) return out;
  const float* x = variant(OperandVariant{});
  download(c_, out.data(), x, size() * 4);
  return out;
}

// x(rows, cols) fp32 <- its columns smoothed and the split ones zeroed, as v says.
void DeviceOperandView::smooth_and_split(float* x, const OperandVariant& v) {
  const size_t nf = has_smooth(v) ? size_t(cols()) : 0, nk = has_split(v) ? v.split->size() : 0;
  if (nf && v.smooth->size() != nf)
    throw Error(
        strf("cuda backend: %zu smoothing factors for %d columns", v.smooth->size(), cols()));
  for (size_t j = 0; j < nk; j++)
    if ((*v.split)[j] < 0 || (*v.split)[j] >= cols())
      throw Error(strf("cuda backend: split channel %d of %d columns", (*v.split)[j], cols()));
  // Through pinned staging: the factors and channels may change once upload returns.
  char* args = static_cast<char*>(c_.scratch(kScratchStatsArgs, (nf + nk) * 4));
  float* factors = reinterpret_cast<float*>(args);
  int* channels = reinterpret_cast<int*>(args + nf * 4);
  if (nf) {
    upload(c_, factors, v.smooth->data(), nf * 4);
    launch(quant::smooth_columns_kernel, c_.grid(size(), kThreads), kThreads, 0, c_.stream, x,
           rows(), cols(), static_cast<const float*>(factors), v.smooth_divide);
    TG_LAUNCH_CHECK();
  }
  if (nk) {
    upload(c_, channels, v.split->data(), nk * 4);
    launch(stats::zero_columns_kernel, c_.grid(size_t(rows()) * nk, kThreads), kThreads, 0,
           c_.stream, x, rows(), cols(), static_cast<const int*>(channels), int(nk));
    TG_LAUNCH_CHECK();
  }
}

// The fp32 matrix v names (operand_view.h), (cols, rows) when transposed.
const float* DeviceOperandView::variant(const OperandVariant& v) {
  const bool plain = !has_smooth(v) && !has_split(v);
  if (plain && !v.transposed && t_.dtype == DType::F32) return t_.as<float>();
  const std::vector<int> split = has_split(v) ? *v.split : std::vector<int>{};
  float* out = buffer(kScratchQStageB);
  if (have_variant_ && key_.transposed == v.transposed && key_.smooth == v.smooth &&
      key_.smooth_divide == v.smooth_divide && key_split_ == split)
    return out;
  if (plain) {
    stage_operand(c_, out, t_.dtype, t_.data, v.transposed, v.transposed ? cols() : rows(),
                  v.transposed ? rows() : cols());
  } else {
    float* x = v.transposed ? buffer(kScratchQStageA) : out;
    stage_operand(c_, x, t_.dtype, t_.data, false, rows(), cols());
    smooth_and_split(x, v);
    if (v.transposed) stage_operand(c_, out, DType::F32, x, true, cols(), rows());
  }
  have_variant_ = true;
  key_ = v;
  key_split_ = split;
  return out;
}

QuantError DeviceOperandView::quant_error(const OperandRecipe& o, uint64_t seed,
                                          const OperandVariant& v) {
  // A bf16 operand is kept as it is: the probes never measure one, and the device's scale
  // rules exist for the quantized element formats only.
  if (!is_low_bit(o))
    throw Error("cuda backend: operand statistics of an operand that is not quantized");
  QuantError e;
  if (size() == 0) return e;
  const int R = v.transposed ? cols() : rows(), Cc = v.transposed ? rows() : cols();
  const size_t n = size();
  const float* ref = variant(v);
  if (o.transform == Transform::Hadamard && o.transform_size >= 2 && Cc >= o.transform_size) {
    // The reference is the rotated operand (src/backends/cpu/quant_error.cpp's seed for it).
    float* rot = buffer(kScratchQAcc);
    TG_CUDA_CHECK(cudaMemcpyAsync(rot, ref, n * 4, cudaMemcpyDeviceToDevice, c_.stream));
    hadamard_rows(c_, rot, R, Cc, o.transform_size, seed ^ 0x48ull /*"H"*/);
    ref = rot;
  }
  StatsWords* w = words();
  float* q = buffer(kScratchQA);
  quantize_dequantize(c_, o, seed, fp32_operand(ref), R, Cc, DType::F32, q, &w->post);
  const QuantParams p = params_of(o, R, Cc);
  const size_t groups = size_t(p.ngr) * p.ngc;
  auto* row_amax =
      static_cast<float*>(c_.scratch(kScratchStatsAmax, size_t(R) * p.ngc * sizeof(float)));
  auto* scales =
      static_cast<quant::Scale2*>(c_.scratch(kScratchStatsScales, groups * sizeof(quant::Scale2)));
  launch(stats::group_amax_kernel, c_.grid(size_t(R) * p.ngc * 32, kThreads), kThreads, 0,
         c_.stream, ref, R, Cc, p.gc, p.ngc, row_amax, &w->words[0]);
  TG_LAUNCH_CHECK();
  launch(stats::group_flags_kernel, c_.grid(groups, kThreads), kThreads, 0, c_.stream,
         static_cast<const float*>(row_amax), R, p, static_cast<const unsigned*>(&w->words[0]),
         scales, &w->counts[0]);
  TG_LAUNCH_CHECK();
  const unsigned blocks = c_.grid(n, kThreads);
  auto* sums = static_cast<double*>(c_.scratch(kScratchStatsSums, size_t(blocks) * 2 * 8));
  launch(stats::error_sums_kernel, blocks, kThreads, 0, c_.stream, ref,
         static_cast<const float*>(q), static_cast<const float*>(&w->post), R, Cc, p,
         static_cast<const quant::Scale2*>(scales), static_cast<const unsigned*>(&w->words[0]),
         sums, &w->counts[0]);
  TG_LAUNCH_CHECK();
  launch(stats::sum_blocks_kernel, 1, kThreads, 0, c_.stream, static_cast<const double*>(sums),
         int(blocks), &w->totals[0]);
  TG_LAUNCH_CHECK();
  const StatsWords h = read(w);
  e.signal = h.totals[0];
  e.noise = h.totals[1];
  e.values = double(n);
  e.nonzero = double(h.counts[stats::kNonzero]);
  e.underflow = double(h.counts[stats::kUnderflow]);
  e.saturated = double(h.counts[stats::kSaturated]);
  e.zeros = double(h.counts[stats::kZeros]);
  e.groups = double(groups);
  e.groups_saturated = double(h.counts[stats::kGroupsSaturated]);
  e.groups_underflow = double(h.counts[stats::kGroupsUnderflow]);
  return e;
}

}  // namespace

std::unique_ptr<OperandView> make_operand_view(Ctx& c, Tensor t, int rows, int cols) {
  return std::make_unique<DeviceOperandView>(c, t, rows, cols);
}

}  // namespace tg::gpu
