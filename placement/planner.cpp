// placement/planner.cpp — the placement planner and the baseline policies (see planner.h).
#include "placement/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace ds4::placement {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

std::string gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / kGiB);
  return buf;
}

struct ExpertRef {
  int l, e;
};

// (l, e) pairs in descending p, ties by lower layer then lower id.
std::vector<ExpertRef> hot_order(const RoutingStats& st, const std::vector<ExpertRef>& refs) {
  std::vector<ExpertRef> v = refs;
  std::stable_sort(v.begin(), v.end(), [&](const ExpertRef& a, const ExpertRef& b) {
    const double pa = st.p[size_t(a.l)][size_t(a.e)], pb = st.p[size_t(b.l)][size_t(b.e)];
    if (pa != pb) return pa > pb;
    if (a.l != b.l) return a.l < b.l;
    return a.e < b.e;
  });
  return v;
}

// Within-layer hot rank of each expert: rank[l][e] = position in descending p (ties by id).
std::vector<std::vector<int>> layer_ranks(const RoutingStats& st) {
  std::vector<std::vector<int>> rank;
  for (int l = 0; l < st.n_layers(); ++l) {
    const auto& p = st.p[size_t(l)];
    std::vector<int> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    std::vector<int> r(p.size());
    for (size_t i = 0; i < order.size(); ++i) r[size_t(order[i])] = int(i);
    rank.push_back(std::move(r));
  }
  return rank;
}

int home_node(const CostModel& cm, const ExpertPlacement& pl, int e) {
  const HwProfile& hw = *cm.inputs().hw;
  if (pl.owner >= 0) return hw.node_index(hw.gpus[size_t(pl.owner)].numa_node);
  return e % int(hw.nodes.size());  // no GPUs: interleave experts over the nodes
}

// Host bytes of one expert on each node under `mode`, for accounting.
void host_bytes_by_node(const CostModel& cm, const ExpertPlacement& pl, StageMode mode, int64_t b,
                        std::vector<int64_t>& out) {
  const HwProfile& hw = *cm.inputs().hw;
  const int R = int(hw.gpus.size());
  if (pl.tier == Tier::Host && mode == StageMode::Split && R > 0) {
    // rank slices of ceil(b / R) bytes, each on its rank's node
    for (int r = 0; r < R; ++r) out[size_t(hw.node_index(hw.gpus[size_t(r)].numa_node))] += (b + R - 1) / R;
  } else {
    out[size_t(pl.node)] += b;
  }
}

// Recomputes the usage fields of `plan` from its placements.
void account(const CostModel& cm, Plan& plan) {
  const ModelSizes& sz = *cm.inputs().sizes;
  for (auto& g : plan.gpus) { g.experts_used = 0; g.resident_experts = 0; }
  for (auto& n : plan.nodes) { n.host_bytes = n.cpu_bytes = n.pinned_bytes = 0; n.host_experts = n.cpu_experts = 0; }
  plan.pinned_bytes = plan.nvme_bytes = 0;
  std::vector<int64_t> tmp(plan.nodes.size());
  for (int l = 0; l < plan.n_layers; ++l) {
    const int64_t b = sz.expert_bytes[size_t(l)];
    for (int e = 0; e < plan.n_experts; ++e) {
      const ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
      switch (pl.tier) {
        case Tier::Vram:
          plan.gpus[size_t(pl.owner)].experts_used += b;
          plan.gpus[size_t(pl.owner)].resident_experts += 1;
          break;
        case Tier::Host: {
          std::fill(tmp.begin(), tmp.end(), 0);
          host_bytes_by_node(cm, pl, plan.mode[size_t(l)], b, tmp);
          for (size_t n = 0; n < tmp.size(); ++n) {
            plan.nodes[n].host_bytes += tmp[n];
            if (pl.pinned) plan.nodes[n].pinned_bytes += tmp[n];
          }
          plan.nodes[size_t(pl.node)].host_experts += 1;
          if (pl.pinned) plan.pinned_bytes += b;
          break;
        }
        case Tier::Cpu:
          plan.nodes[size_t(pl.node)].cpu_bytes += b;
          plan.nodes[size_t(pl.node)].cpu_experts += 1;
          break;
        case Tier::Nvme:
          plan.nvme_bytes += b;
          break;
      }
    }
  }
}

// Step 4: host copies in descending p while every node has room; the rest on NVMe. `is_host`
// receives true for experts that got a host copy. Returns an error when NVMe is needed but absent.
Result<void> choose_host_or_nvme(const CostModel& cm, Plan& plan, std::vector<std::vector<bool>>& is_host) {
  const auto& in = cm.inputs();
  const HwProfile& hw = *in.hw;
  const int R = plan.ranks;
  std::vector<int> ranks_on_node(hw.nodes.size(), 0);
  for (const auto& g : hw.gpus) ranks_on_node[size_t(hw.node_index(g.numa_node))] += 1;
  std::vector<ExpertRef> refs;
  for (int l = 0; l < plan.n_layers; ++l)
    for (int e = 0; e < plan.n_experts; ++e)
      if (plan.experts[size_t(l)][size_t(e)].tier != Tier::Vram) refs.push_back({l, e});
  std::vector<int64_t> used(hw.nodes.size(), 0);
  is_host.assign(size_t(plan.n_layers), std::vector<bool>(size_t(plan.n_experts), false));
  bool full = false;
  int64_t nvme_bytes = 0;
  for (const ExpertRef& x : hot_order(*in.stats, refs)) {
    const int64_t b = in.sizes->expert_bytes[size_t(x.l)];
    ExpertPlacement& pl = plan.experts[size_t(x.l)][size_t(x.e)];
    const int home = home_node(cm, pl, x.e);
    if (!full) {
      std::vector<int64_t> need(hw.nodes.size(), 0);
      for (size_t n = 0; n < need.size(); ++n) {
        const int64_t slice = R > 0 ? (b + R - 1) / R * ranks_on_node[n] : 0;
        need[n] = std::max(int(n) == home ? b : int64_t(0), slice);
      }
      bool fits = true;
      for (size_t n = 0; n < need.size(); ++n) fits = fits && used[n] + need[n] <= plan.nodes[n].capacity;
      if (fits) {
        for (size_t n = 0; n < need.size(); ++n) used[n] += need[n];
        is_host[size_t(x.l)][size_t(x.e)] = true;
        pl.node = int8_t(home);
        continue;
      }
      full = true;
    }
    pl.tier = Tier::Nvme;
    pl.node = 0;
    nvme_bytes += b;
  }
  if (nvme_bytes > 0 && hw.nvme.empty()) {
    int64_t cap = 0;
    for (const auto& n : plan.nodes) cap += n.capacity;
    return Error{"hardware profile '" + hw.name + "': routed experts need " + gib(nvme_bytes) +
                 " more host memory than the " + gib(cap) +
                 " available after host.reserved, and the profile lists no NVMe device to stream them from"};
  }
  if (nvme_bytes > 0)
    plan.notes.push_back(gib(nvme_bytes) + " of routed experts do not fit in host memory and are read from NVMe");
  return ok();
}

// Experts that may be page-locked: coldest first (ascending p, ties by higher layer/id) while the
// running total stays within memlock. Independent of residency.
std::vector<std::vector<bool>> pinnable_set(const CostModel& cm, int L, int E) {
  const auto& in = cm.inputs();
  std::vector<std::vector<bool>> pin(size_t(L), std::vector<bool>(size_t(E), true));
  const int64_t limit = in.hw->memlock_bytes;
  if (limit < 0) return pin;
  std::vector<ExpertRef> refs;
  for (int l = 0; l < L; ++l)
    for (int e = 0; e < E; ++e) refs.push_back({l, e});
  auto order = hot_order(*in.stats, refs);
  std::reverse(order.begin(), order.end());
  int64_t total = 0;
  bool over = false;
  for (const ExpertRef& x : order) {
    const int64_t b = in.sizes->expert_bytes[size_t(x.l)];
    if (!over && total + b <= limit) {
      total += b;
    } else {
      over = true;
      pin[size_t(x.l)][size_t(x.e)] = false;
    }
  }
  return pin;
}

void assign_contiguous_owners(Plan& plan) {
  for (int l = 0; l < plan.n_layers; ++l)
    for (int e = 0; e < plan.n_experts; ++e)
      plan.experts[size_t(l)][size_t(e)].owner =
          plan.ranks > 0 ? int8_t(int64_t(e) * plan.ranks / plan.n_experts) : int8_t(-1);
}

}  // namespace

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::Vram: return "vram";
    case Tier::Host: return "host";
    case Tier::Cpu: return "cpu";
    case Tier::Nvme: return "nvme";
  }
  return "?";
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::Planner: return "planner";
    case Policy::PocketLlm: return "pocketllm-like";
    case Policy::FrequencyGreedy: return "frequency-greedy";
    case Policy::AllCpu: return "all-cpu";
  }
  return "?";
}

Result<Plan> plan_budgets(const CostModel& cm, const PlanOptions& opt) {
  const auto& in = cm.inputs();
  const HwProfile& hw = *in.hw;
  const ModelShape& s = *in.shape;
  Plan plan;
  plan.n_layers = s.n_layers;
  plan.n_experts = s.n_experts;
  plan.ranks = int(hw.gpus.size());
  plan.memlock_bytes = hw.memlock_bytes;
  plan.mode.assign(size_t(s.n_layers), StageMode::Split);
  plan.experts.assign(size_t(s.n_layers), std::vector<ExpertPlacement>(size_t(s.n_experts)));
  const int64_t max_expert = *std::max_element(in.sizes->expert_bytes.begin(), in.sizes->expert_bytes.end());
  for (size_t g = 0; g < hw.gpus.size(); ++g) {
    GpuBudget b;
    b.total = hw.gpus[g].vram_bytes;
    b.reserved = hw.vram_reserved_bytes;
    b.dense = in.sizes->dense_bytes_per_rank(plan.ranks);
    b.kv = sequence_state_bytes(s, opt.ctx, opt.kv_elem_bytes);
    b.workspace = int64_t(512 * kMiB) + opt.prefill_chunk * int64_t(256 * 1024);
    b.cache = 2 * int64_t(s.top_k) * max_expert;
    b.expert_capacity = b.total - b.reserved - b.dense - b.kv - b.workspace - b.cache;
    if (b.expert_capacity < 0)
      return Error{"GPU " + std::to_string(g) + " (" + hw.gpus[g].name + ", " + gib(b.total) +
                   "): dense weights " + gib(b.dense) + " + state for ctx " + std::to_string(opt.ctx) + " " +
                   gib(b.kv) + " + workspace " + gib(b.workspace) + " + staging slots " + gib(b.cache) +
                   " + reserved " + gib(b.reserved) + " exceed its VRAM by " + gib(-b.expert_capacity)};
    plan.gpus.push_back(b);
  }
  int64_t mem = 0;
  for (const auto& n : hw.nodes) mem += n.memory_bytes;
  for (const auto& n : hw.nodes) {
    NodeBudget nb;
    nb.id = n.id;
    nb.capacity = n.memory_bytes - int64_t(double(hw.host_reserved_bytes) * double(n.memory_bytes) / double(mem));
    plan.nodes.push_back(nb);
  }
  return plan;
}

namespace {

// The placement of one rule (planner.h steps 1-5, or one baseline), without the comparison.
Result<Plan> make_rule_plan(const CostModel& cm, const PlanOptions& opt, Policy policy) {
  DS4_TRY(Plan plan, plan_budgets(cm, opt));
  plan.policy = policy_name(policy);
  plan.rule = plan.policy;
  const auto& in = cm.inputs();
  const RoutingStats& st = *in.stats;
  const int L = plan.n_layers, E = plan.n_experts, R = plan.ranks;
  DS4_CHECK(st.n_layers() == L && st.n_experts() == E);
  const auto rank = layer_ranks(st);

  if (policy == Policy::Planner && R > 0) {
    // Step 2: snake ownership per layer.
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < E; ++e) {
        const int i = rank[size_t(l)][size_t(e)], round = i / R, pos = i % R;
        plan.experts[size_t(l)][size_t(e)].owner = int8_t(round % 2 == 0 ? pos : R - 1 - pos);
      }
  } else {
    assign_contiguous_owners(plan);
  }

  // Step 3: residency.
  if (policy == Policy::Planner || policy == Policy::FrequencyGreedy) {
    for (int g = 0; g < R; ++g) {
      std::vector<ExpertRef> owned;
      for (int l = 0; l < L; ++l)
        for (int e = 0; e < E; ++e)
          if (plan.experts[size_t(l)][size_t(e)].owner == g) owned.push_back({l, e});
      int64_t used = 0;
      for (const ExpertRef& x : hot_order(st, owned)) {
        const int64_t b = in.sizes->expert_bytes[size_t(x.l)];
        // Prefix rule for both (monotone in the budget): stop at the first that does not fit.
        if (used + b > plan.gpus[size_t(g)].expert_capacity) break;
        used += b;
        plan.experts[size_t(x.l)][size_t(x.e)].tier = Tier::Vram;
      }
    }
  }

  // Step 4: host copy or NVMe for the rest.
  std::vector<std::vector<bool>> is_host;
  DS4_TRY_VOID(choose_host_or_nvme(cm, plan, is_host));

  if (policy == Policy::PocketLlm || policy == Policy::FrequencyGreedy) {
    for (int l = 0; l < L; ++l) {
      plan.mode[size_t(l)] = StageMode::Whole;
      for (int e = 0; e < E; ++e)
        if (is_host[size_t(l)][size_t(e)]) plan.experts[size_t(l)][size_t(e)].tier = Tier::Host;
    }
    if (R == 0) policy = Policy::AllCpu;  // nothing to stage to
  }
  if (policy == Policy::AllCpu || R == 0) {
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < E; ++e) {
        ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
        if (is_host[size_t(l)][size_t(e)]) pl.tier = Tier::Cpu;
        else if (pl.tier == Tier::Nvme) pl.cpu_compute = true;
      }
  } else if (policy == Policy::Planner) {
    // Step 5: per-layer staging mode and CPU cut-off, chosen on the sampled routing.
    const auto pin = pinnable_set(cm, L, E);
    int pageable = 0;
    const int cut[] = {E, E * 7 / 8, E * 3 / 4, E / 2, E * 3 / 8, E / 4, E / 8, E / 16, 0};
    for (int l = 0; l < L; ++l) {
      auto apply = [&](StageMode mode, int t) {
        plan.mode[size_t(l)] = mode;
        for (int e = 0; e < E; ++e) {
          ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
          const bool cold = rank[size_t(l)][size_t(e)] >= t;
          if (is_host[size_t(l)][size_t(e)]) {
            const bool can_pin = pin[size_t(l)][size_t(e)];
            pl.tier = cold ? Tier::Cpu : Tier::Host;
            pl.pinned = pl.tier == Tier::Host && can_pin;
          } else if (pl.tier == Tier::Nvme) {
            pl.cpu_compute = cold;
          }
        }
      };
      double best = 0;
      StageMode best_mode = StageMode::Split;
      int best_t = E;
      bool first = true;
      for (StageMode mode : {StageMode::Split, StageMode::Whole}) {
        if (R == 1 && mode == StageMode::Split) continue;  // identical to whole with one rank
        for (int t : cut) {
          apply(mode, t);
          const double time = cm.moe_layer_time(plan, l);
          if (first || time < best) { best = time; best_mode = mode; best_t = t; first = false; }
        }
      }
      apply(best_mode, best_t);
      for (int e = 0; e < E; ++e) {
        const ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
        pageable += pl.tier == Tier::Host && !pl.pinned;
      }
    }
    if (pageable > 0)
      plan.notes.push_back(std::to_string(pageable) + " staged experts stay pageable because memlock (" +
                           gib(in.hw->memlock_bytes) + ") cannot pin them; they copy at <= " +
                           std::to_string(in.hw->pageable_h2d_gbps) + " GB/s; raise `ulimit -l` to pin them");
  }
  account(cm, plan);
  DS4_TRY_VOID(check_plan(cm, plan));
  return plan;
}

}  // namespace

Result<Plan> make_plan(const CostModel& cm, const PlanOptions& opt, Policy policy) {
  DS4_TRY(Plan plan, make_rule_plan(cm, opt, policy));
  if (policy != Policy::Planner) return plan;
  // Never predict slower than a baseline on the same inputs: keep the fastest of the planner's
  // own placement and the baselines' (ties keep the planner's). Each candidate's step time is
  // non-increasing in the VRAM budget (pocketllm-like and all-cpu do not depend on it), so their
  // minimum is too.
  const double own = cm.predict(plan).decode_step_s;
  double best = own;
  for (Policy b : {Policy::PocketLlm, Policy::FrequencyGreedy, Policy::AllCpu}) {
    DS4_TRY(Plan cand, make_rule_plan(cm, opt, b));
    const double t = cm.predict(cand).decode_step_s;
    if (t < best) {
      best = t;
      cand.policy = policy_name(Policy::Planner);
      plan = std::move(cand);
    }
  }
  if (plan.rule != policy_name(Policy::Planner)) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "rule: the %s placement predicts a faster decode step (%.3f ms) than the planner's own (%.3f ms) "
                  "and is used",
                  plan.rule.c_str(), best * 1e3, own * 1e3);
    plan.notes.push_back(buf);
  }
  return plan;
}

Result<void> check_plan(const CostModel& cm, const Plan& plan) {
  const auto& in = cm.inputs();
  const HwProfile& hw = *in.hw;
  auto bad = [&](const std::string& m) { return Error{"plan '" + plan.policy + "': " + m}; };
  if (int(plan.experts.size()) != in.shape->n_layers || int(plan.mode.size()) != in.shape->n_layers)
    return bad("expected " + std::to_string(in.shape->n_layers) + " layers");
  std::vector<int64_t> vram(hw.gpus.size(), 0), host(hw.nodes.size(), 0);
  int64_t pinned = 0;
  for (int l = 0; l < plan.n_layers; ++l) {
    if (int(plan.experts[size_t(l)].size()) != in.shape->n_experts)
      return bad("layer " + std::to_string(l) + ": expected " + std::to_string(in.shape->n_experts) + " experts");
    const int64_t b = in.sizes->expert_bytes[size_t(l)];
    for (int e = 0; e < plan.n_experts; ++e) {
      const ExpertPlacement& pl = plan.experts[size_t(l)][size_t(e)];
      const std::string where = "expert (" + std::to_string(l) + ", " + std::to_string(e) + ")";
      if (pl.owner >= int(hw.gpus.size()) || (pl.owner < 0 && !hw.gpus.empty()))
        return bad(where + ": owner " + std::to_string(pl.owner) + " out of range");
      if ((pl.tier == Tier::Vram || pl.tier == Tier::Host) && hw.gpus.empty())
        return bad(where + ": tier " + tier_name(pl.tier) + " without GPUs");
      switch (pl.tier) {
        case Tier::Vram: vram[size_t(pl.owner)] += b; break;
        case Tier::Host:
        case Tier::Cpu: {
          if (pl.node < 0 || pl.node >= int(hw.nodes.size())) return bad(where + ": node out of range");
          std::vector<int64_t> tmp(hw.nodes.size(), 0);
          host_bytes_by_node(cm, pl, plan.mode[size_t(l)], b, tmp);
          for (size_t n = 0; n < tmp.size(); ++n) host[n] += tmp[n];
          if (pl.tier == Tier::Host && pl.pinned) pinned += b;
          break;
        }
        case Tier::Nvme:
          if (hw.nvme.empty()) return bad(where + ": on NVMe but the profile has no NVMe device");
          break;
      }
    }
  }
  for (size_t g = 0; g < vram.size(); ++g)
    if (vram[g] > plan.gpus[g].expert_capacity)
      return bad("GPU " + std::to_string(g) + ": resident experts " + gib(vram[g]) + " exceed the expert budget " +
                 gib(plan.gpus[g].expert_capacity));
  for (size_t n = 0; n < host.size(); ++n)
    if (host[n] > plan.nodes[n].capacity)
      return bad("node " + std::to_string(plan.nodes[n].id) + ": host experts " + gib(host[n]) +
                 " exceed its capacity " + gib(plan.nodes[n].capacity));
  if (hw.memlock_bytes >= 0 && pinned > hw.memlock_bytes)
    return bad("pinned experts " + gib(pinned) + " exceed memlock " + gib(hw.memlock_bytes));
  return ok();
}

}  // namespace ds4::placement
