// placement/planner.cpp — the placement planner and the baseline policies (see planner.h).
#include "placement/planner.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "staging/memory_limits.h"

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
    return Error{"hardware profile '" + hw.name.substr(0, 80) + "': routed experts need " + staging::format_bytes(uint64_t(nvme_bytes)) +
                 " more host memory than the " + staging::format_bytes(uint64_t(cap)) +
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

// Mean over the samples of max over ranks of the number of the token's experts owned by the rank:
// the staged load of one layer in expert units when every expert is fetched whole by its owner.
double sampled_max_owned(const RoutingSamples& smp, int l, const std::vector<int>& owner, int R) {
  const int k = smp.top_k;
  const uint16_t* ids = smp.ids[size_t(l)].data();
  int64_t sum = 0;
  std::vector<int> cnt(static_cast<size_t>(R));
  for (int s = 0; s < smp.n; ++s) {
    std::fill(cnt.begin(), cnt.end(), 0);
    int mx = 0;
    for (int i = 0; i < k; ++i) mx = std::max(mx, ++cnt[size_t(owner[ids[size_t(s) * size_t(k) + size_t(i)]])]);
    sum += mx;
  }
  return double(sum) / double(smp.n);
}

// Step 2b (planner.h): pairwise swaps of owners within layer `l` that lower the expected number
// of same-owner co-firing pairs, sum over same-owner pairs {a, b} of c(a, b) (c from
// coactivation_rates), keeping every rank's expected load sum p within `hi` = mean + max(snake's
// excess, 5% of mean). `owner` is updated in place; returns the number of experts whose owner
// changed (0 when the statistics have no co-activation data or R < 2).
int coactivation_swaps(const RoutingStats& st, const RoutingSamples& smp, int l, int R, int max_passes,
                       std::vector<int>& owner) {
  const int E = st.n_experts();
  if (R < 2 || max_passes <= 0) return 0;
  const std::vector<double> c = coactivation_rates(st, l);
  if (c.empty()) return 0;
  const auto& p = st.p[size_t(l)];
  const std::vector<int> snake = owner;
  std::vector<double> load(size_t(R), 0.0);
  for (int e = 0; e < E; ++e) load[size_t(owner[size_t(e)])] += p[size_t(e)];
  double total = 0, max_load = 0;
  for (double v : load) { total += v; max_load = std::max(max_load, v); }
  const double mean = total / R, hi = mean + std::max(max_load - mean, 0.05 * mean);
  // a[e * R + r] = sum of c(e, m) over experts m owned by r (c(e, e) = 0).
  std::vector<double> a(size_t(E) * size_t(R), 0.0);
  for (int e = 0; e < E; ++e)
    for (int m = 0; m < E; ++m) a[size_t(e) * size_t(R) + size_t(owner[size_t(m)])] += c[size_t(e) * size_t(E) + size_t(m)];
  const double eps = 1e-12 * std::max(1.0, double(st.top_k) * st.top_k);
  for (int pass = 0; pass < max_passes; ++pass) {
    bool improved = false;
    for (int i = 0; i < E; ++i)
      for (int j = i + 1; j < E; ++j) {
        const int oi = owner[size_t(i)], oj = owner[size_t(j)];
        if (oi == oj) continue;
        const double cij = c[size_t(i) * size_t(E) + size_t(j)];
        const double d = a[size_t(i) * R + oj] + a[size_t(j) * R + oi] - 2 * cij - a[size_t(i) * R + oi] -
                         a[size_t(j) * R + oj];
        if (!(d < -eps)) continue;
        const double dp = p[size_t(j)] - p[size_t(i)];
        if (load[size_t(oi)] + dp > hi || load[size_t(oj)] - dp > hi) continue;
        load[size_t(oi)] += dp;
        load[size_t(oj)] -= dp;
        for (int m = 0; m < E; ++m) {
          const double cmi = c[size_t(m) * size_t(E) + size_t(i)], cmj = c[size_t(m) * size_t(E) + size_t(j)];
          a[size_t(m) * R + oi] += cmj - cmi;
          a[size_t(m) * R + oj] += cmi - cmj;
        }
        owner[size_t(i)] = oj;
        owner[size_t(j)] = oi;
        improved = true;
      }
    if (!improved) break;
  }
  // With recorded routes the samples see co-activation: keep the swaps only if they do not raise
  // the sampled E[max over ranks] of whole-expert staged load (the quantity the cost model charges).
  if (smp.from_routes && sampled_max_owned(smp, l, owner, R) > sampled_max_owned(smp, l, snake, R)) {
    owner = snake;
    return 0;
  }
  int changed = 0;
  for (int e = 0; e < E; ++e) changed += owner[size_t(e)] != snake[size_t(e)];
  return changed;
}

void assign_contiguous_owners(Plan& plan) {
  for (int l = 0; l < plan.n_layers; ++l)
    for (int e = 0; e < plan.n_experts; ++e)
      plan.experts[size_t(l)][size_t(e)].owner =
          plan.ranks > 0 ? int8_t(int64_t(e) * plan.ranks / plan.n_experts) : int8_t(-1);
}

/// True when the engine can run a Split layer at R ranks: it computes a split layer's staged
/// experts as row slices over the ranks (engine/tensor_parallel.md, "Split staging"), so the
/// expert's rows (moe_inter for gate/up, dim for down) must be multiples of R (else it refuses the
/// plan at load). R <= 1: trivially (split and whole are the same).
bool splittable(const ModelShape& s, int R) { return R <= 1 || (s.moe_inter % R == 0 && s.dim % R == 0); }

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
  // Whole where the engine cannot split the experts' rows over the ranks (splittable).
  plan.mode.assign(size_t(s.n_layers), splittable(s, plan.ranks) ? StageMode::Split : StageMode::Whole);
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
    // Step 2: snake ownership per layer; step 2b: co-activation swaps.
    int changed = 0, layers_changed = 0;
    for (int l = 0; l < L; ++l) {
      std::vector<int> owner(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) {
        const int i = rank[size_t(l)][size_t(e)], round = i / R, pos = i % R;
        owner[size_t(e)] = round % 2 == 0 ? pos : R - 1 - pos;
      }
      if (opt.coactivation) {
        const int n = coactivation_swaps(st, *in.samples, l, R, opt.coactivation_passes, owner);
        changed += n;
        layers_changed += n > 0;
      }
      for (int e = 0; e < E; ++e) plan.experts[size_t(l)][size_t(e)].owner = int8_t(owner[size_t(e)]);
    }
    if (changed > 0)
      plan.notes.push_back("co-activation ownership (step 2b): " + std::to_string(changed) +
                           " experts changed owner in " + std::to_string(layers_changed) + " layers (statistics " +
                           (in.samples->from_routes ? "with recorded routes" : "with pair counts only") + ")");
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
    // Step 5: per-layer staging mode and CPU cut-off, chosen on the sampled routing; Split only
    // where the engine can run it (splittable).
    const bool can_split = splittable(*in.shape, R);
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
        if (mode == StageMode::Split && !can_split) continue;
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
                           format_number(in.hw->pageable_h2d_gbps) + " GB/s; raise `ulimit -l` to pin them");
  }
  account(cm, plan);
  DS4_TRY_VOID(check_plan(cm, plan));
  return plan;
}

}  // namespace

Result<Plan> make_plan(const CostModel& cm, const PlanOptions& opt, Policy policy) {
  DS4_TRY(Plan plan, make_rule_plan(cm, opt, policy));
  if (policy != Policy::Planner) return plan;
  // Step 2b is a heuristic on the pair rates: when it changed owners, keep it only if the cost
  // model does not predict it slower than snake ownership alone (ties keep step 2b), and say both.
  if (opt.coactivation && plan.ranks > 1 && cm.inputs().stats->has_coactivation()) {
    PlanOptions snake_only = opt;
    snake_only.coactivation = false;
    DS4_TRY(Plan snake, make_rule_plan(cm, snake_only, policy));
    const double t_co = cm.predict(plan).decode_step_s, t_snake = cm.predict(snake).decode_step_s;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "co-activation ownership: predicted decode step %.3f ms (%.2f tok/s) vs %.3f ms (%.2f tok/s) "
                  "with snake ownership only; %s",
                  t_co * 1e3, 1.0 / t_co, t_snake * 1e3, 1.0 / t_snake,
                  t_co <= t_snake ? "co-activation ownership kept" : "snake ownership kept");
    if (t_co > t_snake) plan = std::move(snake);
    plan.notes.push_back(buf);
  }
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
