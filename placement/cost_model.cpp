// placement/cost_model.cpp — decode/prefill time prediction (formulas in cost_model.h).
#include "placement/cost_model.h"

#include <algorithm>
#include <cmath>

#include "ds4/splitmix64.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::placement {

namespace {

int64_t tensor_bytes(uint32_t type, int64_t ne0, int64_t rows) {
  const GgmlTypeGeometry* g = ggml_type_geometry(type);
  DS4_CHECK(g != nullptr && ne0 % g->block_elems == 0);
  return rows * (ne0 / g->block_elems) * g->block_bytes;
}

constexpr int kMaxRanks = 64;
constexpr int kMaxNodes = 64;

}  // namespace

double decode_attention_flops(const ModelShape& s, int l, int64_t pos) {
  DS4_CHECK(l >= 0 && l < int(s.compress_ratios.size()) && pos >= 0);
  const int64_t visible = pos + 1;
  const int ratio = s.compress_ratios[size_t(l)];
  double selected = double(std::min<int64_t>(s.window, visible));
  double indexer = 0;
  if (ratio == 4) {
    selected += double(std::min<int64_t>(s.index_topk, visible / 4));
    indexer = 2.0 * s.index_n_heads * double(s.index_head_dim) * double(visible / 4);
  } else if (ratio == 128) {
    selected += double(visible / 128);
  }
  return 4.0 * s.n_heads * double(s.head_dim) * selected + indexer;
}

double cache_resident_fraction(int64_t llc_bytes, int64_t working_set_bytes) {
  if (llc_bytes <= 0 || working_set_bytes <= 0) return 0.0;
  return std::min(1.0, double(llc_bytes) / double(working_set_bytes));
}

double cache_hit_share(const std::vector<ReusePoint>& c, double reuse_bytes) {
  if (c.size() < 2) return 0.0;
  const double t_first = 1.0 / c.front().gbps, t_last = 1.0 / c.back().gbps;
  if (t_first >= t_last) return 1.0;
  double t = t_last;
  if (reuse_bytes <= c.front().bytes) {
    t = t_first;
  } else if (reuse_bytes < c.back().bytes) {
    size_t i = 1;
    while (c[i].bytes < reuse_bytes) ++i;
    const double a = std::log(reuse_bytes / c[i - 1].bytes) / std::log(c[i].bytes / c[i - 1].bytes);
    t = (1 - a) / c[i - 1].gbps + a / c[i].gbps;
  }
  return std::clamp((t - t_last) / (t_first - t_last), 0.0, 1.0);
}

double decode_reuse_bytes(double non_routed_bytes, double routed_total_bytes, double p, double q) {
  DS4_CHECK(q > 0 && q <= 1 && p >= 0 && p <= 1);
  return non_routed_bytes + routed_total_bytes * (1.0 - std::pow(1.0 - p, 1.0 / q));
}

CpuHotShares cpu_hot_shares(const CpuDecodeProfile& prof, const ModelShape& shape, const ModelSizes& sizes) {
  if (prof.reuse_curve.size() < 2) {
    const double f = cache_resident_fraction(prof.llc_bytes, cpu_working_set_bytes(sizes));
    return {f, f};
  }
  double non_routed = 0, routed = 0;
  for (const auto& t : sizes.tensors) {
    if (t.cls == TensorClass::ExpertGateUp || t.cls == TensorClass::ExpertDown) routed += double(t.bytes);
    else if (t.read_per_token) non_routed += double(t.bytes);
  }
  const double p = shape.n_experts > 0 ? std::min(1.0, double(shape.top_k) / shape.n_experts) : 1.0;
  CpuHotShares h;
  h.non_routed = cache_hit_share(prof.reuse_curve, decode_reuse_bytes(non_routed, routed, p, 1.0));
  h.routed = p > 0 ? cache_hit_share(prof.reuse_curve, decode_reuse_bytes(non_routed, routed, p, p)) : 0.0;
  return h;
}

double cpu_matvec_seconds(const CpuDecodeMode& m, const std::string& type_name, double bytes, double hot_fraction) {
  double hot = m.hot_for(type_name), cold = m.cold_for(type_name);
  if (hot <= 0) hot = cold;
  if (cold <= 0) cold = hot;
  DS4_CHECK(hot > 0 && cold > 0);
  const double f = std::clamp(hot_fraction, 0.0, 1.0);
  return bytes * (f / hot + (1.0 - f) / cold) / 1e9;
}

int64_t cpu_working_set_bytes(const ModelSizes& sizes) {
  int64_t ws = 0;
  for (const auto& t : sizes.tensors)
    if (t.read_per_token || t.cls == TensorClass::ExpertGateUp || t.cls == TensorClass::ExpertDown) ws += t.bytes;
  return ws;
}

double cpu_decode_matvec_seconds(const ModelShape& shape, const ModelSizes& sizes, const CpuDecodeMode& m,
                                 const CpuHotShares& hot) {
  double t = 0;
  for (const auto& ts : sizes.tensors) {
    const std::string type(ggml_type_name(ts.type));
    if (ts.cls == TensorClass::ExpertGateUp || ts.cls == TensorClass::ExpertDown) {
      DS4_CHECK(shape.n_experts > 0);
      t += cpu_matvec_seconds(m, type, double(ts.bytes) / shape.n_experts * shape.top_k, hot.routed);
    } else if (ts.read_per_token) {
      t += cpu_matvec_seconds(m, type, double(ts.bytes), hot.non_routed);
    }
  }
  return t;
}

Result<DecodeFixedFit> fit_decode_fixed_costs(const std::vector<DecodeProbeSample>& samples) {
  if (samples.size() < 3)
    return Error{"decode calibration: expected at least 3 micro-run samples, found " + std::to_string(samples.size())};
  for (const auto& x : samples)
    if (!std::isfinite(x.measured_s) || !std::isfinite(x.modeled_s) || !std::isfinite(x.attn_flops) ||
        x.measured_s <= 0 || x.modeled_s < 0 || x.attn_flops < 0 || x.n_layers < 0)
      return Error{"decode calibration: expected finite non-negative sample times and FLOPs"};
  // Terms: 0 = 1 (per token), 1 = n_layers, 2 = attention FLOPs (scaled to GFLOP for conditioning).
  auto term = [](const DecodeProbeSample& x, int k) {
    return k == 0 ? 1.0 : k == 1 ? double(x.n_layers) : x.attn_flops * 1e-9;
  };
  DecodeFixedFit best;
  double best_sse = -1;
  for (int mask = 0; mask < 8; ++mask) {
    int idx[3], n = 0;
    for (int k = 0; k < 3; ++k)
      if (mask & (1 << k)) idx[n++] = k;
    // Normal equations A^T A c = A^T r for the chosen terms (Gaussian elimination, partial pivoting).
    double a[3][4] = {};
    for (const auto& x : samples) {
      const double r = x.measured_s - x.modeled_s;
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) a[i][j] += term(x, idx[i]) * term(x, idx[j]);
        a[i][n] += term(x, idx[i]) * r;
      }
    }
    double scale = 0;
    for (int i = 0; i < n; ++i) scale = std::max(scale, std::fabs(a[i][i]));
    bool singular = false;
    for (int c = 0; c < n && !singular; ++c) {
      int piv = c;
      for (int i = c + 1; i < n; ++i)
        if (std::fabs(a[i][c]) > std::fabs(a[piv][c])) piv = i;
      if (std::fabs(a[piv][c]) <= 1e-12 * scale) { singular = true; break; }
      for (int j = 0; j <= n; ++j) std::swap(a[c][j], a[piv][j]);
      for (int i = 0; i < n; ++i) {
        if (i == c) continue;
        const double f = a[i][c] / a[c][c];
        for (int j = c; j <= n; ++j) a[i][j] -= f * a[c][j];
      }
    }
    if (singular) continue;
    double coef[3] = {0, 0, 0};
    bool feasible = true;
    for (int i = 0; i < n; ++i) {
      coef[idx[i]] = a[i][n] / a[i][i];
      if (coef[idx[i]] < 0) feasible = false;
    }
    if (!feasible) continue;
    double sse = 0;
    for (const auto& x : samples) {
      double e = x.measured_s - x.modeled_s;
      for (int k = 0; k < 3; ++k) e -= coef[k] * term(x, k);
      sse += e * e;
    }
    if (best_sse < 0 || sse < best_sse * (1 - 1e-12)) {
      best_sse = sse;
      best.token_s = coef[0];
      best.layer_s = coef[1];
      best.attn_gflops = coef[2] > 0 ? 1.0 / coef[2] : kUnmeasuredAttnGflops;  // coef[2]: s per GFLOP
      best.rms_residual_s = std::sqrt(sse / double(samples.size()));
    }
  }
  DS4_CHECK(best_sse >= 0);  // the empty subset is always feasible
  return best;
}

RoutingSamples draw_routing_samples(const RoutingStats& stats, int n, uint64_t seed) {
  DS4_CHECK(n > 0 && stats.top_k > 0);
  RoutingSamples out;
  out.n = n;
  out.top_k = stats.top_k;
  const int k = stats.top_k;
  if (const int64_t N = stats.n_routes(); N > 0) {
    out.from_routes = true;
    for (int l = 0; l < stats.n_layers(); ++l) {
      const auto& r = stats.routes[size_t(l)];
      DS4_CHECK(int(stats.routes.size()) == stats.n_layers() && int64_t(r.size()) == N * k);
      std::vector<uint16_t> ids;
      ids.reserve(size_t(n) * size_t(k));
      for (int s = 0; s < n; ++s) {
        const int64_t i = int64_t(s) * N / n;
        ids.insert(ids.end(), r.begin() + std::ptrdiff_t(i * k), r.begin() + std::ptrdiff_t((i + 1) * k));
      }
      out.ids.push_back(std::move(ids));
    }
    return out;
  }
  for (int l = 0; l < stats.n_layers(); ++l) {
    const auto& p = stats.p[size_t(l)];
    const int E = int(p.size());
    double total = 0;
    for (double v : p) total += v;
    const double step = total / k;  // == 1 when the row sums to top_k
    SplitMix64 rng{seed ^ (0xD1B54A32D192ED03ull * uint64_t(l + 1))};
    std::vector<uint16_t> ids;
    ids.reserve(size_t(n) * size_t(k));
    std::vector<int> order(static_cast<size_t>(E));
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i < E; ++i) order[size_t(i)] = i;
      for (int i = E - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.next() % uint64_t(i + 1))]);
      // Madow's systematic sampling: thresholds u, u+1, ... over the cumulative p in this order.
      double threshold = rng.uniform() * step, cum = 0;
      int picked = 0;
      for (int i = 0; i < E && picked < k; ++i) {
        const int e = order[size_t(i)];
        cum += p[size_t(e)];
        if (threshold < cum) {
          ids.push_back(uint16_t(e));
          ++picked;
          threshold += step;
        }
      }
      // Rounding can leave the last threshold a hair above the total: take the last unpicked.
      for (int i = E - 1; picked < k && i >= 0; --i) {
        const uint16_t e = uint16_t(order[size_t(i)]);
        if (std::find(ids.end() - picked, ids.end(), e) == ids.end()) { ids.push_back(e); ++picked; }
      }
    }
    out.ids.push_back(std::move(ids));
  }
  return out;
}

CostModel::CostModel(const CostInputs& in) : in_(in) {
  DS4_CHECK(in.shape && in.sizes && in.mix && in.hw && in.stats && in.samples);
  const HwProfile& hw = *in.hw;
  ranks_ = int(hw.gpus.size());
  DS4_CHECK(ranks_ <= kMaxRanks && int(hw.nodes.size()) <= kMaxNodes);
  ranks_on_node_.assign(hw.nodes.size(), 0);
  for (const auto& g : hw.gpus) {
    const int ni = hw.node_index(g.numa_node);
    DS4_CHECK(ni >= 0);
    gpu_node_.push_back(ni);
    ranks_on_node_[size_t(ni)] += 1;
    gpu_bw_.push_back(g.vram_gbps * g.kernel_efficiency * 1e9);
  }
  for (const auto& d : hw.nvme) nvme_gbps_ += d.read_gbps;
  const ModelShape& s = *in.shape;
  if (ranks_ == 0)
    if (auto it = hw.cpu_decode.modes.find(in.activations); it != hw.cpu_decode.modes.end()) {
      cal_ = &it->second;
      hot_ = cpu_hot_shares(hw.cpu_decode, *in.shape, *in.sizes);
    }
  for (int l = 0; l < s.n_layers; ++l) {
    const uint32_t t_gu = in.mix->type_for(TensorClass::ExpertGateUp, l);
    const uint32_t t_dn = in.mix->type_for(TensorClass::ExpertDown, l);
    const double b_gu = double(tensor_bytes(t_gu, s.dim, 2 * s.moe_inter));
    const double b_dn = double(tensor_bytes(t_dn, s.moe_inter, s.dim));
    std::vector<double> per_node;
    for (const auto& n : hw.nodes) {
      if (cal_) {  // calibrated: the measured fixed costs include the expert calls' dispatch
        per_node.push_back(cpu_matvec_seconds(*cal_, std::string(ggml_type_name(t_gu)), b_gu, hot_.routed) +
                           cpu_matvec_seconds(*cal_, std::string(ggml_type_name(t_dn)), b_dn, hot_.routed));
        continue;
      }
      const double t = b_gu / (n.cpu_gbps_for(std::string(ggml_type_name(t_gu))) * 1e9) +
                       b_dn / (n.cpu_gbps_for(std::string(ggml_type_name(t_dn))) * 1e9) +
                       hw.cpu_expert_latency_us * 1e-6;
      per_node.push_back(t);
    }
    cpu_s_per_expert_.push_back(std::move(per_node));
  }
}

double CostModel::cpu_dense_seconds(int l) const {
  DS4_CHECK(cal_ != nullptr);
  double t = 0;
  for (const auto& ts : in_.sizes->tensors)
    if (ts.layer == l && ts.read_per_token && ts.cls != TensorClass::ExpertGateUp && ts.cls != TensorClass::ExpertDown)
      t += cpu_matvec_seconds(*cal_, std::string(ggml_type_name(ts.type)), double(ts.bytes), hot_.non_routed);
  return t;
}

double CostModel::h2d_gbps(int gpu, int node_index, bool pinned) const {
  const GpuProfile& g = in_.hw->gpus[size_t(gpu)];
  double bw = node_index == gpu_node_[size_t(gpu)] ? g.h2d_gbps : std::min(g.h2d_gbps, in_.hw->inter_socket_gbps);
  if (!pinned) bw = std::min(bw, in_.hw->pageable_h2d_gbps);
  return bw;
}

double CostModel::moe_sample_time(const Plan& plan, int l, int s) const {
  const HwProfile& hw = *in_.hw;
  const int R = ranks_, k = in_.samples->top_k;
  const double b = double(in_.sizes->expert_bytes[size_t(l)]);
  const double lat = hw.copy_latency_us * 1e-6;
  double link[kMaxRanks] = {}, gpu[kMaxRanks] = {}, cpu[kMaxNodes] = {};
  double agg = 0, nvme = 0;
  const uint16_t* ids = in_.samples->ids[size_t(l)].data() + size_t(s) * size_t(k);
  const bool split = plan.mode[size_t(l)] == StageMode::Split;
  for (int i = 0; i < k; ++i) {
    const ExpertPlacement& pl = plan.experts[size_t(l)][ids[i]];
    switch (pl.tier) {
      case Tier::Vram:
        gpu[pl.owner] += b / gpu_bw_[size_t(pl.owner)];
        break;
      case Tier::Cpu:
        cpu[pl.node] += cpu_s_per_expert_[size_t(l)][size_t(pl.node)];
        break;
      case Tier::Host:
      case Tier::Nvme: {
        if (pl.tier == Tier::Nvme) {
          nvme += b;
          if (pl.cpu_compute) {
            const int ni = pl.owner >= 0 ? gpu_node_[size_t(pl.owner)] : 0;
            cpu[ni] += cpu_s_per_expert_[size_t(l)][size_t(ni)];
            break;
          }
        }
        agg += b;
        const bool pinned = pl.tier == Tier::Nvme || pl.pinned;
        if (split) {
          for (int r = 0; r < R; ++r) {
            link[r] += b / R / (h2d_gbps(r, gpu_node_[size_t(r)], pinned) * 1e9) + lat;
            gpu[r] += b / R / gpu_bw_[size_t(r)];
          }
        } else {
          const int o = pl.owner;
          const int src = pl.tier == Tier::Host ? pl.node : gpu_node_[size_t(o)];
          link[o] += b / (h2d_gbps(o, src, pinned) * 1e9) + lat;
          gpu[o] += b / gpu_bw_[size_t(o)];
        }
        break;
      }
    }
  }
  double stage = 0;
  for (int r = 0; r < R; ++r) stage = std::max(stage, link[r] + gpu[r]);
  if (R > 0 && agg > 0) stage = std::max(stage, agg / (hw.h2d_aggregate_gbps * 1e9));
  double cpu_max = 0;
  for (size_t n = 0; n < hw.nodes.size(); ++n) cpu_max = std::max(cpu_max, cpu[n]);
  const double nv = nvme > 0 ? nvme / (nvme_gbps_ * 1e9) : 0.0;
  return std::max(stage, cpu_max) + nv;
}

double CostModel::moe_layer_time(const Plan& plan, int l) const {
  double t = 0;
  for (int s = 0; s < in_.samples->n; ++s) t += moe_sample_time(plan, l, s);
  return t / in_.samples->n;
}

double CostModel::prefill_layer_time(const Plan& plan, int l) const {
  const HwProfile& hw = *in_.hw;
  const ModelShape& sh = *in_.shape;
  const int R = ranks_;
  const double C = double(in_.prefill_chunk), P = double(in_.prefill_position);
  const double b = double(in_.sizes->expert_bytes[size_t(l)]);
  const double eflops_per_token = 2.0 * double(sh.expert_params());
  const double lat = hw.copy_latency_us * 1e-6;
  // Dense + attention FLOPs of the chunk (split across ranks).
  const int ratio = sh.compress_ratios[size_t(l)];
  double n_sel = std::min(double(sh.window), P);
  if (ratio == 4) n_sel += std::min(512.0, std::floor(P / 4));
  if (ratio == 128) n_sel += std::floor(P / 128);
  double dense_flops = 2.0 * double(in_.sizes->layer_dense_params[size_t(l)]) * C +
                       4.0 * sh.n_heads * double(sh.head_dim) * n_sel * C;
  if (ratio == 4) dense_flops += 2.0 * sh.index_n_heads * double(sh.index_head_dim) * std::floor(P / 4) * C;

  struct Load {
    double link[kMaxRanks] = {}, gflop[kMaxRanks] = {}, cpu_flop[kMaxNodes] = {}, cpu_read[kMaxNodes] = {};
    double agg = 0;
  };
  Load a, bl;  // a: CPU-tier experts on the CPU; bl: CPU-tier experts staged (split) instead
  double nvme = 0;
  auto stage = [&](Load& ld, const ExpertPlacement& pl, double bytes, double flops, bool split) {
    ld.agg += bytes;
    const bool pinned = pl.tier == Tier::Nvme || pl.pinned;
    if (split || pl.owner < 0) {
      for (int r = 0; r < R; ++r) {
        ld.link[r] += bytes / R / (h2d_gbps(r, gpu_node_[size_t(r)], pinned) * 1e9) + (bytes > 0 ? lat : 0);
        ld.gflop[r] += flops / R;
      }
    } else {
      const int o = pl.owner;
      const int src = pl.tier == Tier::Host ? pl.node : gpu_node_[size_t(o)];
      ld.link[o] += bytes / (h2d_gbps(o, src, pinned) * 1e9) + lat;
      ld.gflop[o] += flops;
    }
  };
  const bool split = plan.mode[size_t(l)] == StageMode::Split;
  const auto& p = in_.stats->p[size_t(l)];
  for (int e = 0; e < in_.shape->n_experts; ++e) {
    const double pe = p[size_t(e)];
    if (pe <= 0) continue;
    const double q = pe >= 1 ? 1.0 : 1.0 - std::pow(1.0 - pe, C);
    const double flops = eflops_per_token * C * pe;
    const ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
    const bool on_cpu = pl.tier == Tier::Cpu || (pl.tier == Tier::Nvme && pl.cpu_compute);
    if (pl.tier == Tier::Nvme) nvme += q * b;
    if (pl.tier == Tier::Vram) {
      a.gflop[pl.owner] += flops;
      bl.gflop[pl.owner] += flops;
    } else if (!on_cpu) {
      stage(a, pl, q * b, flops, split);
      stage(bl, pl, q * b, flops, split);
    } else {
      const int ni = pl.tier == Tier::Cpu ? pl.node : (pl.owner >= 0 ? gpu_node_[size_t(pl.owner)] : 0);
      a.cpu_flop[ni] += flops;
      a.cpu_read[ni] += q * b;
      if (R > 0) stage(bl, pl, q * b, flops, true);
    }
  }
  auto layer_time = [&](const Load& ld) {
    double t = 0;
    for (int r = 0; r < R; ++r) {
      t = std::max(t, ld.link[r]);
      t = std::max(t, (ld.gflop[r] + dense_flops / R) / (hw.gpus[size_t(r)].tflops * 1e12));
    }
    if (R > 0) t = std::max(t, ld.agg / (hw.h2d_aggregate_gbps * 1e9));
    double node_flops = 0;
    for (const auto& n : hw.nodes) node_flops += n.cpu_gflops * 1e9;
    for (size_t n = 0; n < hw.nodes.size(); ++n) {
      double c = std::max(ld.cpu_flop[n] / (hw.nodes[n].cpu_gflops * 1e9),
                          ld.cpu_read[n] / (hw.nodes[n].mem_read_gbps * 1e9));
      if (R == 0) c += dense_flops / node_flops;  // CPU-only machine: dense work shares the cores
      t = std::max(t, c);
    }
    return t;
  };
  double t = layer_time(a);
  if (R > 0) t = std::min(t, layer_time(bl));
  if (nvme > 0) t += nvme / (nvme_gbps_ * 1e9);
  if (R > 1) {
    const double bytes = C * double(sh.dim) * 4.0;
    t += 2 * (hw.allreduce_latency_us * 1e-6 + bytes * 2.0 * (R - 1) / R / (hw.allreduce_gbps * 1e9));
  }
  return t + hw.layer_overhead_us * 1e-6;
}

Prediction CostModel::predict(const Plan& plan) const {
  const HwProfile& hw = *in_.hw;
  const ModelSizes& sz = *in_.sizes;
  const int R = ranks_, L = in_.shape->n_layers;
  Prediction pr;
  pr.vram_bytes_per_token.assign(size_t(R), 0);
  pr.link_bytes_per_token.assign(size_t(R), 0);
  pr.cpu_bytes_per_token.assign(hw.nodes.size(), 0);
  double cpu_dense_bps = 0;  // CPU-only machines: dense weights read at the nodes' default rate
  for (const auto& n : hw.nodes) cpu_dense_bps += n.cpu_gbps_for("default") * 1e9;
  for (int l = 0; l < L; ++l) {
    double dense = 0;
    if (R > 0) {
      for (int r = 0; r < R; ++r)
        dense = std::max(dense, double(sz.layer_read_bytes_per_rank(l, R)) / gpu_bw_[size_t(r)]);
    } else if (cal_) {
      dense = cpu_dense_seconds(l);
      pr.attn_s += decode_attention_flops(*in_.shape, l, in_.decode_position) / (cal_->attn_gflops * 1e9);
    } else {
      dense = double(sz.layer_read_bytes_per_rank(l, 1)) / cpu_dense_bps;
    }
    pr.dense_s += dense;
    pr.moe_s += moe_layer_time(plan, l);
    if (!cal_) pr.sync_s += (R > 1 ? 2 * hw.allreduce_latency_us * 1e-6 : 0.0) + hw.layer_overhead_us * 1e-6;
    // Expected bytes per token from the probabilities (exact, not sampled).
    const double b = double(sz.expert_bytes[size_t(l)]);
    const bool split = plan.mode[size_t(l)] == StageMode::Split;
    for (int e = 0; e < in_.shape->n_experts; ++e) {
      const double pe = in_.stats->p[size_t(l)][size_t(e)];
      const ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
      const bool on_cpu = pl.tier == Tier::Cpu || (pl.tier == Tier::Nvme && pl.cpu_compute);
      if (pl.tier == Tier::Vram) pr.share_vram += pe;
      else if (pl.tier == Tier::Host) pr.share_host += pe;
      else if (pl.tier == Tier::Cpu) pr.share_cpu += pe;
      else pr.share_nvme += pe;
      if (pl.tier == Tier::Nvme) pr.nvme_bytes_per_token += pe * b;
      if (pl.tier == Tier::Vram) {
        pr.vram_bytes_per_token[size_t(pl.owner)] += pe * b;
        continue;
      }
      if (on_cpu) {
        const int ni = pl.tier == Tier::Cpu ? pl.node : (pl.owner >= 0 ? gpu_node_[size_t(pl.owner)] : 0);
        pr.cpu_bytes_per_token[size_t(ni)] += pe * b;
      } else if (split) {
        for (int r = 0; r < R; ++r) pr.link_bytes_per_token[size_t(r)] += pe * b / R;
      } else {
        pr.link_bytes_per_token[size_t(pl.owner)] += pe * b;
      }
    }
  }
  // Output head: vocab-parallel, read once per token.
  if (R > 0) {
    double head = 0;
    for (int r = 0; r < R; ++r) head = std::max(head, double(sz.head_read_bytes) / R / gpu_bw_[size_t(r)]);
    pr.dense_s += head;
  } else if (cal_) {
    pr.dense_s += cpu_dense_seconds(-1);
    pr.fixed_s = (cal_->token_us + L * cal_->layer_us) * 1e-6;
    pr.cpu_calibrated = true;
  } else {
    pr.dense_s += double(sz.head_read_bytes) / cpu_dense_bps;
  }
  pr.decode_step_s = pr.dense_s + pr.moe_s + pr.sync_s + pr.attn_s + pr.fixed_s;
  pr.decode_tok_s = 1.0 / pr.decode_step_s;
  const double total = pr.share_vram + pr.share_host + pr.share_cpu + pr.share_nvme;
  if (total > 0) {
    pr.share_vram /= total; pr.share_host /= total; pr.share_cpu /= total; pr.share_nvme /= total;
  }
  for (int l = 0; l < L; ++l) pr.prefill_chunk_s += prefill_layer_time(plan, l);
  pr.prefill_tok_s = double(in_.prefill_chunk) / pr.prefill_chunk_s;
  return pr;
}

}  // namespace ds4::placement
