// cost_report.cpp: the analytic half of the cost model (cost_model.h): the step's GEMMs from
// the graph of src/model/model.cpp (GPT::block_forward, GPT::backward, the backend's
// attention), and the tables written beside the kernels_checked binary.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cost_model.h"
#include "src/backends/attention_blocks.h"

namespace cost {

Dims gpt2_124m() { return Dims{tg::gpt2_config(tg::gpt2_sizes()[0]), 8, 1024}; }

namespace {

constexpr double kE = 2;  // bytes of a bf16 element

// D(M,N) = A(M,K) B(K,N) (+ bias(N)) (+ D when accumulating), `batch` times: 2 M N K FLOPs
// each; A, B and the bias read once, D written once (and read when accumulating).
GemmRow gemm(const std::string& name, int count, double M, double N, double K, double batch,
             double d_bytes, bool bias, bool accumulate) {
  const double d = M * N * d_bytes;
  const double bytes =
      batch * (kE * (M * K + K * N) + d * (accumulate ? 2 : 1)) + (bias ? kE * N : 0);
  return GemmRow{name, count, count * 2 * M * N * K * batch, count * bytes};
}

// The forward and the two backward GEMMs of a linear (N, C) -> (N, OC) with a bias.
void linear(std::vector<GemmRow>& out, const std::string& name, int L, double N, double C,
            double OC) {
  out.push_back(gemm("forward: " + name, L, N, OC, C, 1, kE, true, false));
  GemmRow dinp = gemm("", L, N, C, OC, 1, kE, false, false);
  GemmRow dw = gemm("", L, OC, C, N, 1, kE, false, true);
  out.push_back(GemmRow{"backward: " + name + " (dinp, dW)", 2 * L, dinp.flops + dw.flops,
                        dinp.min_bytes + dw.min_bytes});
}

void add(GemmRow& sum, const GemmRow& g) {
  sum.flops += g.flops;
  sum.min_bytes += g.min_bytes;
}

// Attention (cuda.attention=cublas): each product one batched GEMM (all B x NH heads) per row
// block [r0, r1) (src/backends/attention_blocks.h): S = q k^T and dP = dy v^T in bf16 over
// columns u < r1; y = att v and dq = dS k summing over u < r1; dv = att^T dy and dk = dS^T q
// over rows t >= r0. The masked half is computed only inside the diagonal blocks.
void attention_gemms(std::vector<GemmRow>& g, const Dims& d) {
  const double hs = double(d.C()) / d.NH(), BH = double(d.B) * d.NH();
  const int L = d.L(), T = d.T, R = tg::attention_row_block(T), n = tg::attention_row_blocks(T);
  GemmRow S{"forward: attention S = q k^T", L * n, 0, 0};
  GemmRow y{"forward: attention y = att v", L * n, 0, 0};
  GemmRow back{"backward: attention dP, dv, dq, dk", 4 * L * n, 0, 0};
  for (int r0 = 0; r0 < T; r0 += R) {
    const double r1 = std::min(T, r0 + R), m = r1 - r0, below = T - r0;
    add(S, gemm("", L, m, r1, hs, BH, kE, false, false));
    add(y, gemm("", L, m, hs, r1, BH, kE, false, false));
    add(back, gemm("", L, m, r1, hs, BH, kE, false, false));     // dP
    add(back, gemm("", L, m, hs, below, BH, kE, false, false));  // dv
    add(back, gemm("", L, m, hs, r1, BH, kE, false, false));     // dq
    add(back, gemm("", L, m, hs, below, BH, kE, false, false));  // dk
  }
  g.push_back(S);
  g.push_back(y);
  g.push_back(back);
}

}  // namespace

double causal_block_cells(int T) {
  const int R = tg::attention_row_block(T);
  double cells = 0;
  for (int r0 = 0; r0 < T; r0 += R) {
    const int r1 = std::min(T, r0 + R);
    cells += double(r1 - r0) * r1;
  }
  return cells;
}

double attention_skipped_flops(const Dims& d) {
  const double hs = double(d.C()) / d.NH(), BH = double(d.B) * d.NH();
  return 6 * d.L() * BH * 2 * hs * (double(d.T) * d.T - causal_block_cells(d.T));
}

std::vector<GemmRow> step_gemms(const Dims& d) {
  const double BT = double(d.BT()), C = d.C();
  const double Vp = d.Vp();
  const int L = d.L();
  std::vector<GemmRow> g;
  linear(g, "qkv", L, BT, C, 3 * C);
  linear(g, "attention projection", L, BT, C, C);
  linear(g, "MLP fc", L, BT, C, 4 * C);
  linear(g, "MLP projection", L, BT, 4 * C, C);
  attention_gemms(g, d);
  // The tied lm_head: fp32 logits; its backward reads the bf16 dlogits.
  g.push_back(gemm("forward: lm_head logits", 1, BT, Vp, C, 1, 4, false, false));
  GemmRow dinp = gemm("", 1, BT, C, Vp, 1, kE, false, false);
  GemmRow dw = gemm("", 1, Vp, C, BT, 1, kE, false, true);
  g.push_back(GemmRow{"backward: lm_head (dinp, dW)", 2, dinp.flops + dw.flops,
                      dinp.min_bytes + dw.min_bytes});
  return g;
}

namespace {

double us(double seconds) { return seconds * 1e6; }
double gemm_seconds(const GemmRow& g, const Device& dev) {
  return std::max(g.flops / dev.flops_per_s, g.min_bytes / dev.bytes_per_s);
}
std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string mb(double bytes) { return fmt("%.1f", bytes / 1e6); }

std::string kernel_list(const MemRow& r) {
  std::string s;
  for (const std::string& k : r.kernels) s += (s.empty() ? "" : ", ") + k.substr(k.rfind("::") + 2);
  return s;
}

void memory_table(std::ostringstream& md, std::ostringstream& csv, std::vector<MemRow> mem,
                  const Device& dev) {
  std::sort(mem.begin(), mem.end(),
            [](const MemRow& a, const MemRow& b) { return a.step_bytes() > b.step_bytes(); });
  md << "| op | kernels | measured at B x T | launches | minimum MB | modelled MB | sectors / min "
        "| "
        "unique / min | requested / min | bytes / warp access | us at "
     << dev.name << " |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const MemRow& r : mem) {
    const double t = us(r.step_bytes() / dev.bytes_per_s);
    md << "| " << r.name << " | " << kernel_list(r) << " | " << r.measured_at << " | " << r.launches
       << " | " << mb(r.step_min) << " | " << mb(r.step_bytes()) << " | " << fmt("%.2f", r.ratio())
       << " | " << fmt("%.2f", r.unique_ratio()) << " | " << fmt("%.2f", r.requested / r.min_bytes)
       << " | " << fmt("%.0f", r.bytes_per_access()) << " | " << fmt("%.1f", t) << " |\n";
    csv << "memory," << r.name << "," << r.calls << "," << r.launches << ",0," << r.step_min << ","
        << r.step_bytes() << "," << fmt("%.4f", r.ratio()) << "," << fmt("%.4f", r.unique_ratio())
        << "," << fmt("%.2f", t) << "," << fmt("%.1f", r.bytes_per_access()) << "\n";
  }
}

void gemm_table(std::ostringstream& md, std::ostringstream& csv, const std::vector<GemmRow>& gemms,
                const Device& dev) {
  md << "| GEMM | calls | GFLOP | minimum MB | us at " << dev.name
     << " | bound |\n|---|---:|---:|---:|---:|---|\n";
  for (const GemmRow& g : gemms) {
    const double t = us(gemm_seconds(g, dev));
    const bool compute = g.flops / dev.flops_per_s >= g.min_bytes / dev.bytes_per_s;
    md << "| " << g.name << " | " << g.count << " | " << fmt("%.1f", g.flops / 1e9) << " | "
       << mb(g.min_bytes) << " | " << fmt("%.1f", t) << " | " << (compute ? "FLOPs" : "bytes")
       << " |\n";
    csv << "gemm," << g.name << "," << g.count << "," << g.count << "," << g.flops << ","
        << g.min_bytes << "," << g.min_bytes << ",1,1," << fmt("%.2f", t) << ",0\n";
  }
}

// The host's waits and descriptor creations per step (HostCount).
void host_table(std::ostringstream& md, std::ostringstream& csv,
                const std::vector<HostCount>& host) {
  md << "\n## The host per step\n\nCalls that cost the host time without queueing work, in an "
        "emulated step after the first (a wait counts where it found queued work; \"nothing "
        "left\": the device had finished). The step reads its loss with a queued copy "
        "(GPT::forward_queued), so the backward is queued before the host first waits.\n\n"
        "| call | decision on the host | on the device (`precision.loss_scale.on_device`) |\n"
        "|---|---:|---:|\n";
  if (host.empty()) md << "| (none) | 0 | 0 |\n";
  for (const HostCount& h : host) {
    md << "| " << h.call << " | " << h.host_decided << " | " << h.device_decided << " |\n";
    csv << "host," << h.call << "," << h.host_decided << "," << h.device_decided
        << ",0,0,0,0,0,0,0\n";
  }
}

}  // namespace

std::string write_report(const std::string& dir, const Dims& emu, const std::vector<MemRow>& mem,
                         const std::vector<GemmRow>& gemms,
                         const std::vector<LaunchCount>& launches,
                         const std::vector<HostCount>& host, const Device& dev) {
  const Dims d = gpt2_124m();
  std::ostringstream md, csv;
  csv << "section,name,calls,launches,flops,min_bytes,model_bytes,ratio,unique_ratio,predicted_"
         "us,bytes_per_access\n";
  md << "# Cost model: one bf16 training step of GPT-2 124M (B " << d.B << " x T " << d.T << ")\n\n"
     << "Written by `make cost-model` (tests/cuda/cost_model_checked.cpp; docs/gpu.md, \"The cost "
        "model\"). Predicted times at "
     << dev.name << ": " << fmt("%.1f", dev.bytes_per_s / 1e12) << " TB/s, "
     << fmt("%.0f", dev.flops_per_s / 1e12) << " TFLOP/s dense bf16.\n\n"
     << "## Memory-bound kernels\n\nMeasured under the emulator at C " << emu.C() << ", NH "
     << emu.NH() << ", V " << emu.V() << " and the B x T of each row (traffic per minimum "
     << "byte carries over; bytes scale with the op's minimum at 124M). Modelled = 32-byte "
        "sectors of the warps' accesses, nothing cached. Bytes / warp access: the bytes the "
        "threads ask for "
        "per warp-wide memory instruction (512 for 16-byte accesses, 64 for 2-byte ones).\n\n";
  memory_table(md, csv, mem, dev);
  md << "\n## GEMMs (cuBLASLt, analytic)\n\n";
  gemm_table(md, csv, gemms, dev);
  double mem_s = 0, gemm_s = 0, flops = 0;
  for (const MemRow& r : mem) mem_s += r.step_bytes() / dev.bytes_per_s;
  for (const GemmRow& g : gemms) gemm_s += gemm_seconds(g, dev), flops += g.flops;
  md << "\n## Launches per step\n\nCounted in emulated steps of the CUDA backend at n_layer 1 "
        "and 2, extrapolated to "
     << d.L() << " layers.\n\n| kind | n_layer 1 | n_layer 2 | at " << d.L()
     << " |\n|---|---:|---:|---:|\n";
  uint64_t total = 0;
  for (const LaunchCount& l : launches) {
    md << "| " << l.kind << " | " << l.at_1 << " | " << l.at_2 << " | " << l.at(d.L()) << " |\n";
    csv << "launches," << l.kind << "," << l.at(d.L()) << "," << l.at(d.L()) << ",0,0,0,0,0,0,0\n";
    total += l.at(d.L());
  }
  host_table(md, csv, host);
  const double step = mem_s + gemm_s;
  const std::string summary =
      "memory-bound kernels " + fmt("%.2f", mem_s * 1e3) + " ms, GEMMs " +
      fmt("%.2f", gemm_s * 1e3) + " ms (" + fmt("%.0f", flops / 1e9) +
      " GFLOP): " + fmt("%.2f", step * 1e3) + " ms, " + fmt("%.0f", double(d.BT()) / step / 1e3) +
      "k tokens/s if every launch ran at its floor, back to back; " + std::to_string(total) +
      " items of queued work (kernels, GEMMs, copies and memsets)";
  md << "\n## Step\n\n" << summary << ".\n";
  std::ofstream(dir + "/cost_model.md") << md.str();
  std::ofstream(dir + "/cost_model.csv") << csv.str();
  return summary;
}

}  // namespace cost
