#include "profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/rng.h"
#include "src/backends/cpu/cpu_features.h"
#include "src/backends/cpu/gemm.h"
#include "src/backends/cpu/gemm_bf16.h"
#include "src/precision/precision.h"
#include "src/training/backend_factory.h"

namespace tg {

namespace {

// The fastest of `reps` runs of f, timed by the backend's own marks (after one untimed run).
template <typename F>
double best_ms(Backend& be, int reps, F&& f) {
  f();
  be.clear_marks();
  std::vector<std::pair<size_t, size_t>> marks;
  for (int i = 0; i < reps; i++) {
    const size_t a = be.record_mark();
    f();
    marks.push_back({a, be.record_mark()});
  }
  const std::vector<double> t = be.mark_times_ms();
  be.clear_marks();
  double best = INFINITY;
  for (auto& m : marks) best = std::min(best, t[m.second] - t[m.first]);
  return best;
}

// A tensor of n random normal values in type t (drawn in fp32, converted on the backend).
Tensor random_tensor(Backend& be, DType t, size_t n, uint64_t seed) {
  std::vector<float> h(n);
  Rng r(seed);
  for (float& x : h) x = float(r.normal());
  Tensor f = be.alloc(DType::F32, n);
  be.upload(f, h.data());
  if (t == DType::F32) return f;
  Tensor out = be.alloc(t, n);
  be.convert(out, f, Rounding{});
  be.free(f);
  return out;
}

}  // namespace

// Sizes: 512 MiB and 8192^3 on a GPU (past its caches, long enough for the event clock),
// 64 MiB and 1024^3 on the CPU (the bench's sgemm shape).
Ceilings measure_ceilings(Backend& be, DType compute) {
  const bool device = be.name() != "cpu";
  Ceilings c;
  const size_t n = device ? (size_t(128) << 20) : (size_t(16) << 20);
  Tensor a = be.alloc(DType::F32, n), b = be.alloc(DType::F32, n);
  be.zero(a);
  c.copy_bytes = n * sizeof(float);
  const double copy_ms = best_ms(be, 5, [&] { be.convert(b, a, Rounding{}); });
  c.copy_bytes_per_s = 2.0 * double(c.copy_bytes) / (copy_ms / 1e3);
  be.free(a);
  be.free(b);
  const int d = device ? 8192 : 1024;
  c.gemm_dim = d;
  const size_t dd = size_t(d) * d;
  Tensor x = random_tensor(be, compute, dd, 1), w = random_tensor(be, compute, dd, 2);
  Tensor y = be.alloc(compute, dd);
  const double gemm_ms = best_ms(be, 3, [&] { be.matmul_forward(y, x, w, Tensor{}, d, d, d); });
  c.gemm_flops_per_s = 2.0 * double(d) * d * d / (gemm_ms / 1e3);
  for (Tensor t : {x, w, y}) be.free(t);
  be.synchronize();
  return c;
}

double ModeProfile::ops_ms() const {
  double s = 0;
  for (const ProfileRow& r : rows) s += r.ms;
  return s;
}

namespace {

using Key = std::tuple<std::string, std::string, int, StepPhase>;

// Adds one step's records to the rows (keyed by op, shape, layer and phase).
void add_step(const std::vector<OpRecord>& recs, std::map<Key, size_t>* index,
              std::vector<ProfileRow>* rows) {
  for (const OpRecord& r : recs) {
    const Key k{r.op, r.shape, r.layer, r.phase};
    auto it = index->find(k);
    if (it == index->end()) {
      ProfileRow row;
      row.op = r.op;
      row.shape = r.shape;
      row.phase = r.phase;
      row.kind = r.kind;
      row.layer = r.layer;
      it = index->emplace(k, rows->size()).first;
      rows->push_back(row);
    }
    ProfileRow& row = (*rows)[it->second];
    row.calls += 1;
    row.ms += r.ms;
    row.flops += r.flops;
    row.bytes += r.bytes;
    if (!r.gemm.empty() && row.gemm.find(r.gemm) == std::string::npos)
      row.gemm += (row.gemm.empty() ? "" : " | ") + r.gemm;
  }
}

}  // namespace

namespace {

// One step, unprofiled: the host clock around it and a wait for the backend.
double plain_step_ms(Backend& be, BenchStep& step) {
  const auto t0 = std::chrono::steady_clock::now();
  step.run();
  be.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One step, profiled: its records added to the rows; returns its time between its marks.
double profiled_step_ms(ProfilingBackend& pb, BenchStep& step, std::map<Key, size_t>* index,
                        std::vector<ProfileRow>* rows) {
  pb.set_recording(true);
  pb.set_scope(-1, StepPhase::Other);
  const size_t m0 = pb.step_mark();
  step.run();
  const size_t m1 = pb.step_mark();
  std::vector<double> t;
  const std::vector<OpRecord> recs = pb.take_records(&t);
  pb.set_recording(false);
  add_step(recs, index, rows);
  return t[m1] - t[m0];
}

// What the CPU's GEMMs run on (the CPU backend names no algorithm per call).
std::string cpu_gemm_paths() {
  return strf("sgemm: %s; narrow-mode GEMMs: %s", cpu::blas_name(),
              cpu::narrow_gemm_name(cpu::narrow_gemm()));
}

}  // namespace

// The unprofiled and profiled steps alternate, so that a busy moment of a shared machine
// lands on both alike.
ModeProfile profile_mode(Backend& be, const BenchCase& bc, const Config& cfg, int warmup,
                         int iters) {
  ModeProfile p;
  p.model = bc.name;
  const PrecisionSpec spec = precision_spec(cfg);
  p.mode = mode_name(spec.mode);
  p.device = be.name() + (be.device_model().empty() ? "" : " (" + be.device_model() + ")");
  if (be.name() == "cpu") p.gemm_paths = cpu_gemm_paths();
  p.steps = iters;
  p.ceilings = measure_ceilings(be, spec.compute);
  ProfilingBackend pb(be);
  BenchStep step(pb, bc, cfg);
  for (int i = 0; i < warmup; i++) plain_step_ms(be, step);
  std::vector<double> plain;
  std::map<Key, size_t> index;
  double marked = 0;
  for (int i = 0; i < iters; i++) {
    plain.push_back(plain_step_ms(be, step));
    marked += profiled_step_ms(pb, step, &index, &p.rows);
  }
  p.plain_ms = median(plain);
  const double n = std::max(iters, 1);
  p.profiled_ms = marked / n;
  for (ProfileRow& r : p.rows) {
    r.calls /= n;
    r.ms /= n;
    r.flops /= n;
    r.bytes /= n;
  }
  return p;
}

double floor_ms(const ProfileRow& r, const Ceilings& c) {
  if (r.kind == OpKind::Transfer || c.copy_bytes_per_s <= 0 || c.gemm_flops_per_s <= 0) return 0;
  return 1e3 * std::max(r.bytes / c.copy_bytes_per_s, r.flops / c.gemm_flops_per_s);
}

std::vector<ProfileRow> rows_over_layers(const ModeProfile& p) {
  std::map<std::tuple<std::string, std::string, StepPhase>, size_t> index;
  std::vector<ProfileRow> out;
  for (const ProfileRow& r : p.rows) {
    const auto k = std::make_tuple(r.op, r.shape, r.phase);
    auto it = index.find(k);
    if (it == index.end()) {
      it = index.emplace(k, out.size()).first;
      out.push_back(r);
      out.back().layer = -1;
      continue;
    }
    ProfileRow& o = out[it->second];
    o.calls += r.calls;
    o.ms += r.ms;
    o.flops += r.flops;
    o.bytes += r.bytes;
    if (!r.gemm.empty() && o.gemm.find(r.gemm) == std::string::npos)
      o.gemm += (o.gemm.empty() ? "" : " | ") + r.gemm;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ProfileRow& a, const ProfileRow& b) { return a.ms > b.ms; });
  return out;
}

namespace {

// Achieved rates and the efficiency of one row, as table text.
struct RowText {
  std::string tflops, gbs, floor, efficiency;
};
RowText row_text(const ProfileRow& r, const Ceilings& c) {
  RowText t;
  const double s = r.ms / 1e3;
  t.tflops = r.flops > 0 && s > 0 ? strf("%.3g", r.flops / s / 1e12) : "-";
  t.gbs = r.bytes > 0 && s > 0 ? strf("%.3g", r.bytes / s / 1e9) : "-";
  const double f = floor_ms(r, c);
  t.floor = f > 0 ? strf("%.4g", f) : "-";
  t.efficiency = f > 0 && r.ms > 0 ? strf("%.0f%%", 100 * f / r.ms) : "-";
  return t;
}

std::string phase_line(const ModeProfile& p) {
  double by[4] = {0, 0, 0, 0};
  for (const ProfileRow& r : p.rows) by[int(r.phase)] += r.ms;
  std::string s = "ops by phase:";
  for (int i = 0; i < 4; i++)
    s += strf(" %s %.3f ms%s", step_phase_name(StepPhase(i)), by[i], i < 3 ? "," : "");
  return s;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

std::string profile_markdown(const ModeProfile& p, size_t top) {
  const Ceilings& c = p.ceilings;
  const double ops = p.ops_ms(), gap = p.profiled_ms - ops;
  std::string s = strf("### %s, %s, %s\n\n", p.model.c_str(), p.mode.c_str(), p.device.c_str());
  s += strf(
      "step %.3f ms unprofiled (median of %d), %.3f ms profiled (mean of %d, between its "
      "marks); the ops %.3f ms, not covered by any op %.3f ms (%.1f%%)\n\n",
      p.plain_ms, p.steps, p.profiled_ms, p.steps, ops, gap,
      p.profiled_ms > 0 ? 100 * gap / p.profiled_ms : 0.0);
  s += strf(
      "ceilings measured in this process: copy %.1f GB/s (read + write of %.0f MiB fp32), GEMM "
      "%.2f TFLOP/s (matmul_forward %d^3 in %s)\n\n",
      c.copy_bytes_per_s / 1e9, double(c.copy_bytes) / 1048576.0, c.gemm_flops_per_s / 1e12,
      c.gemm_dim, p.mode.c_str());
  if (!p.gemm_paths.empty()) s += "GEMM paths: " + p.gemm_paths + "\n\n";
  s += phase_line(p) + "\n\n";
  s += "| op | phase | shape | calls/step | ms/step | share | GFLOP | MB | TFLOP/s | GB/s | "
       "floor ms | efficiency | GEMM algorithm |\n"
       "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  const std::vector<ProfileRow> rows = rows_over_layers(p);
  for (size_t i = 0; i < rows.size() && i < top; i++) {
    const ProfileRow& r = rows[i];
    const RowText t = row_text(r, c);
    s += strf("| %s | %s | %s | %.0f | %.4f | %.1f%% | %.3g | %.3g | %s | %s | %s | %s | %s |\n",
              r.op.c_str(), step_phase_name(r.phase), r.shape.c_str(), r.calls, r.ms,
              p.profiled_ms > 0 ? 100 * r.ms / p.profiled_ms : 0.0, r.flops / 1e9, r.bytes / 1e6,
              t.tflops.c_str(), t.gbs.c_str(), t.floor.c_str(), t.efficiency.c_str(),
              r.gemm.empty() ? "-" : r.gemm.c_str());
  }
  if (rows.size() > top)
    s += strf("\n(%zu more rows; every op of every layer in profile.csv)\n", rows.size() - top);
  return s + "\n";
}

std::string profile_csv_header() {
  return "model,mode,device,op,kind,phase,layer,shape,calls_per_step,ms_per_step,flops,bytes,"
         "tflops,gb_per_s,floor_ms,efficiency,gemm_algorithm\n";
}

std::string profile_csv_rows(const ModeProfile& p) {
  std::string s;
  for (const ProfileRow& r : p.rows) {
    const double f = floor_ms(r, p.ceilings), sec = r.ms / 1e3;
    s += csv_field(p.model) + "," + p.mode + "," + csv_field(p.device) + "," + r.op + "," +
         op_kind_name(r.kind) + "," + step_phase_name(r.phase) + "," + std::to_string(r.layer) +
         "," + csv_field(r.shape) +
         strf(",%.0f,%.6f,%.6g,%.6g,%.6g,%.6g,%.6f,%.4f,", r.calls, r.ms, r.flops, r.bytes,
              sec > 0 ? r.flops / sec / 1e12 : 0.0, sec > 0 ? r.bytes / sec / 1e9 : 0.0, f,
              r.ms > 0 ? f / r.ms : 0.0) +
         csv_field(r.gemm) + "\n";
  }
  return s;
}

int profile_models(const BenchArgs& a, const std::vector<BenchCase>& cases) {
  make_dirs(a.out);  // before the runs: a folder that cannot be made fails at once
  std::string md = "# Per-op profile (train_gpt bench --profile)\n\n", csv = profile_csv_header();
  for (const BenchCase& bc : cases)
    for (Mode m : a.modes) {
      auto be = make_backend(a.cfg);  // fresh per mode, as the step table's rows are
      const ModeProfile p = profile_mode(*be, bc, bench_config(a, m), 2, a.iters);
      const std::string part = profile_markdown(p, 25);
      printf("%s", part.c_str());
      fflush(stdout);
      md += part;
      csv += profile_csv_rows(p);
    }
  write_text_atomic(join_path(a.out, "profile.md"), md);
  write_text_atomic(join_path(a.out, "profile.csv"), csv);
  printf("wrote %s and %s\n", join_path(a.out, "profile.md").c_str(),
         join_path(a.out, "profile.csv").c_str());
  return 0;
}

}  // namespace tg
