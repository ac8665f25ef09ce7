// placement/plan_report.cpp — dry-run tables and the plan JSON.
#include "placement/plan_report.h"

#include "ds4/file_io.h"
#include "placement/json_text.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/quant/ggml_type.h"

namespace ds4::placement {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

double gib(int64_t b) { return double(b) / kGiB; }

struct TierCount {
  int n = 0;
  int64_t bytes = 0;
};

// Tier counts of a plan: [vram, host, cpu, nvme].
std::vector<TierCount> tier_counts(const CostModel& cm, const Plan& p) {
  std::vector<TierCount> c(4);
  for (int l = 0; l < p.n_layers; ++l)
    for (int e = 0; e < p.n_experts; ++e) {
      auto& t = c[size_t(p.experts[size_t(l)][size_t(e)].tier)];
      t.n += 1;
      t.bytes += cm.inputs().sizes->expert_bytes[size_t(l)];
    }
  return c;
}

nlohmann::json prediction_json(const Prediction& pr) {
  return {{"decode_tok_s", pr.decode_tok_s},       {"decode_step_ms", pr.decode_step_s * 1e3},
          {"dense_ms", pr.dense_s * 1e3},          {"moe_ms", pr.moe_s * 1e3},
          {"sync_ms", pr.sync_s * 1e3},            {"prefill_tok_s", pr.prefill_tok_s},
          {"attn_ms", pr.attn_s * 1e3},            {"fixed_ms", pr.fixed_s * 1e3},
          {"cpu_calibrated", pr.cpu_calibrated},
          {"prefill_chunk_ms", pr.prefill_chunk_s * 1e3},
          {"vram_bytes_per_token", pr.vram_bytes_per_token},
          {"link_bytes_per_token", pr.link_bytes_per_token},
          {"cpu_bytes_per_token", pr.cpu_bytes_per_token},
          {"nvme_bytes_per_token", pr.nvme_bytes_per_token},
          {"share", {{"vram", pr.share_vram}, {"host", pr.share_host}, {"cpu", pr.share_cpu}, {"nvme", pr.share_nvme}}}};
}

}  // namespace

std::string format_dry_run(const CostModel& cm, const PlanOptions& opt, const std::string& hw_source,
                           const PlannedPolicy& chosen, const std::vector<PlannedPolicy>& baselines) {
  const auto& in = cm.inputs();
  const ModelSizes& sz = *in.sizes;
  const HwProfile& hw = *in.hw;
  const Plan& p = chosen.plan;
  std::string o;
  const int64_t n_routed = int64_t(in.shape->n_layers) * in.shape->n_experts;
  o += fmt("ds4-offload plan --dry-run\n");
  o += fmt("model      %s, %d layers x %d routed experts (top-%d), quant mix %s\n", in.shape->name.c_str(),
           in.shape->n_layers, in.shape->n_experts, in.shape->top_k, in.mix->name.c_str());
  o += fmt("           %s\n", in.mix->description.c_str());
  o += fmt("weights    total %.2f GiB (%.1f GB): routed %.2f GiB (%lld experts, %.2f MB each on layer 0),"
           " non-routed %.2f GiB\n",
           gib(sz.total_bytes), double(sz.total_bytes) / 1e9, gib(sz.routed_bytes), (long long)n_routed,
           double(sz.expert_bytes[0]) / 1e6, gib(sz.total_bytes - sz.routed_bytes));
  std::string types;
  for (const auto& [t, n] : sz.tensor_count_by_type)
    types += fmt("%s%s x%d %.2f GiB", types.empty() ? "" : ", ", std::string(ggml_type_name(t)).c_str(), n,
                 gib(sz.bytes_by_type.at(t)));
  o += fmt("           by type: %s\n", types.c_str());
  o += fmt("hardware   %s (%s)\n", hw.name.c_str(), hw_source.c_str());
  o += fmt("routing    %s; decode expectations over %d sampled tokens per layer\n", in.stats->source.c_str(),
           in.samples->n);
  o += fmt("context    %lld tokens; prefill chunk %lld tokens\n\n", (long long)opt.ctx, (long long)opt.prefill_chunk);

  if (!p.gpus.empty()) {
    o += "VRAM per GPU (GiB)          total reserved  dense     kv  work  slots  expert room  resident (experts)\n";
    for (size_t g = 0; g < p.gpus.size(); ++g) {
      const GpuBudget& b = p.gpus[g];
      o += fmt("GPU%-2zu %-20s %6.2f %8.2f %6.2f %6.2f %5.2f %6.2f %12.2f %9.2f (%d)\n", g, hw.gpus[g].name.c_str(),
               gib(b.total), gib(b.reserved), gib(b.dense), gib(b.kv), gib(b.workspace), gib(b.cache),
               gib(b.expert_capacity), gib(b.experts_used), b.resident_experts);
    }
    o += "\n";
  }
  auto tc = tier_counts(cm, p);
  o += fmt("Experts by tier (%s)       experts      GiB   share of activations\n", p.policy.c_str());
  const double share[4] = {chosen.prediction.share_vram, chosen.prediction.share_host, chosen.prediction.share_cpu,
                           chosen.prediction.share_nvme};
  const char* label[4] = {"vram (resident)", "host (staged)", "cpu (computed)", "nvme (streamed)"};
  for (int t = 0; t < 4; ++t)
    o += fmt("  %-24s %8d %8.2f   %5.1f%%\n", label[t], tc[size_t(t)].n, gib(tc[size_t(t)].bytes), 100 * share[t]);
  if (!p.rule.empty() && p.rule != p.policy)
    o += fmt("  placement rule: %s (the planner keeps a baseline's placement when it predicts faster)\n", p.rule.c_str());
  int split_layers = 0;
  for (auto m : p.mode) split_layers += m == StageMode::Split;
  o += fmt("  staging mode: %d layers split across ranks, %d layers whole-expert by owner\n", split_layers,
           p.n_layers - split_layers);
  o += "Host memory per node (GiB)  capacity  staged copies  pinned   cpu-computed\n";
  for (const auto& n : p.nodes)
    o += fmt("  node %-3d %25.1f %14.2f %7.2f %14.2f\n", n.id, gib(n.capacity), gib(n.host_bytes), gib(n.pinned_bytes),
             gib(n.cpu_bytes));
  o += fmt("  pinned total %.2f GiB (memlock %s); NVMe-streamed %.2f GiB\n", gib(p.pinned_bytes),
           p.memlock_bytes < 0 ? "unlimited" : fmt("%.3f GiB", gib(p.memlock_bytes)).c_str(), gib(p.nvme_bytes));
  o += "\nBytes per decode token (expected)        MB/token   link time at profile rate\n";
  const Prediction& pr = chosen.prediction;
  for (size_t g = 0; g < pr.link_bytes_per_token.size(); ++g)
    o += fmt("  H2D GPU%-2zu (node %d, %5.1f GB/s) %14.1f   %6.2f ms\n", g, hw.gpus[g].numa_node, hw.gpus[g].h2d_gbps,
             pr.link_bytes_per_token[g] / 1e6, pr.link_bytes_per_token[g] / (hw.gpus[g].h2d_gbps * 1e9) * 1e3);
  for (size_t n = 0; n < pr.cpu_bytes_per_token.size(); ++n)
    o += fmt("  CPU node %-3d (read by cores) %14.1f\n", hw.nodes[n].id, pr.cpu_bytes_per_token[n] / 1e6);
  if (!hw.nvme.empty()) o += fmt("  NVMe                          %14.1f\n", pr.nvme_bytes_per_token / 1e6);
  for (const auto& note : p.notes) o += "  note: " + note + "\n";

  std::vector<const PlannedPolicy*> all = {&chosen};
  for (const auto& b : baselines) all.push_back(&b);
  if (const CpuDecodeMode* c = cm.cpu_calibration())
    o += fmt("\nall-CPU decode calibrated (%s activations, profile cpu_decode): token %.1f us + %d x layer %.1f us, "
             "attention %.2f GFLOP/s at position %lld, reads cache-served: non-routed %.0f%%, experts %.0f%% (%s)\n",
             in.activations.c_str(), c->token_us, in.shape->n_layers, c->layer_us, c->attn_gflops,
             (long long)in.decode_position, 100 * cm.hot_shares().non_routed, 100 * cm.hot_shares().routed,
             hw.cpu_decode.reuse_curve.size() >= 2
                 ? "measured reuse curve"
                 : fmt("no reuse curve in the profile: reported LLC %.0f MiB", double(hw.cpu_decode.llc_bytes) / kMiB).c_str());
  o += "\nPredictions (batch 1)     ";
  for (auto* a : all) o += fmt("%18s", a->plan.policy.c_str());
  o += "\n";
  auto row = [&](const char* name, auto get, const char* f) {
    o += fmt("  %-24s", name);
    for (auto* a : all) o += fmt(f, get(*a));
    o += "\n";
  };
  row("decode tok/s", [](const PlannedPolicy& a) { return a.prediction.decode_tok_s; }, "%18.2f");
  row("  step ms", [](const PlannedPolicy& a) { return a.prediction.decode_step_s * 1e3; }, "%18.1f");
  row("  dense ms", [](const PlannedPolicy& a) { return a.prediction.dense_s * 1e3; }, "%18.1f");
  row("  routed experts ms", [](const PlannedPolicy& a) { return a.prediction.moe_s * 1e3; }, "%18.1f");
  row("  all-reduce+launch ms", [](const PlannedPolicy& a) { return a.prediction.sync_s * 1e3; }, "%18.1f");
  if (chosen.prediction.cpu_calibrated) {
    row("  attention ms", [](const PlannedPolicy& a) { return a.prediction.attn_s * 1e3; }, "%18.1f");
    row("  fixed token+layer ms", [](const PlannedPolicy& a) { return a.prediction.fixed_s * 1e3; }, "%18.1f");
  }
  row("prefill tok/s", [](const PlannedPolicy& a) { return a.prediction.prefill_tok_s; }, "%18.1f");
  row("activations in VRAM %", [](const PlannedPolicy& a) { return 100 * a.prediction.share_vram; }, "%18.1f");
  row("max H2D MB/token", [](const PlannedPolicy& a) {
    double m = 0;
    for (double v : a.prediction.link_bytes_per_token) m = std::max(m, v);
    return m / 1e6;
  }, "%18.1f");
  row("CPU-read MB/token", [](const PlannedPolicy& a) {
    double m = 0;
    for (double v : a.prediction.cpu_bytes_per_token) m += v;
    return m / 1e6;
  }, "%18.1f");
  return o;
}

std::string plan_to_json(const CostModel& cm, const PlanOptions& opt, const PlannedPolicy& chosen,
                         const std::vector<PlannedPolicy>& baselines) {
  using nlohmann::json;
  const auto& in = cm.inputs();
  const Plan& p = chosen.plan;
  json j;
  j["format"] = "ds4-placement-plan";
  j["version"] = 1;
  j["policy"] = p.policy;
  j["rule"] = p.rule.empty() ? p.policy : p.rule;
  j["model"] = {{"name", in.shape->name}, {"n_layers", in.shape->n_layers}, {"n_experts", in.shape->n_experts},
                {"top_k", in.shape->top_k}, {"total_bytes", in.sizes->total_bytes},
                {"routed_bytes", in.sizes->routed_bytes}};
  j["quant_mix"] = in.mix->name;
  j["hw_profile"] = in.hw->name;
  j["ctx"] = opt.ctx;
  j["prefill_chunk"] = opt.prefill_chunk;
  j["routing"] = in.stats->source;
  j["ranks"] = p.ranks;
  j["gpus"] = json::array();
  for (const auto& b : p.gpus)
    j["gpus"].push_back({{"total", b.total}, {"reserved", b.reserved}, {"dense", b.dense}, {"kv", b.kv},
                         {"workspace", b.workspace}, {"cache", b.cache}, {"expert_capacity", b.expert_capacity},
                         {"experts_used", b.experts_used}, {"resident_experts", b.resident_experts}});
  j["nodes"] = json::array();
  for (const auto& n : p.nodes)
    j["nodes"].push_back({{"id", n.id}, {"capacity", n.capacity}, {"host_bytes", n.host_bytes},
                          {"cpu_bytes", n.cpu_bytes}, {"pinned_bytes", n.pinned_bytes}});
  j["layers"] = json::array();
  for (int l = 0; l < p.n_layers; ++l) {
    std::string tiers;
    std::vector<int> owner, node;
    for (const auto& pl : p.experts[size_t(l)]) {
      char c = '?';
      switch (pl.tier) {
        case Tier::Vram: c = 'V'; break;
        case Tier::Host: c = pl.pinned ? 'H' : 'P'; break;
        case Tier::Cpu: c = 'C'; break;
        case Tier::Nvme: c = pl.cpu_compute ? 'M' : 'N'; break;
      }
      tiers += c;
      owner.push_back(pl.owner);
      node.push_back(pl.node);
    }
    j["layers"].push_back({{"layer", l}, {"mode", p.mode[size_t(l)] == StageMode::Split ? "split" : "whole"},
                           {"expert_bytes", in.sizes->expert_bytes[size_t(l)]}, {"tier", tiers},
                           {"owner", owner}, {"node", node}});
  }
  j["notes"] = p.notes;
  j["prediction"] = prediction_json(chosen.prediction);
  j["baselines"] = json::array();
  for (const auto& b : baselines)
    j["baselines"].push_back({{"policy", b.plan.policy}, {"prediction", prediction_json(b.prediction)}});
  return j.dump(1) + "\n";
}

Result<Plan> load_plan(const std::string& path, int n_layers, int n_experts, int ranks, int n_nodes) {
  using nlohmann::json;
  DS4_TRY(const std::string text, read_file_bounded(path, kMaxJsonBytes, "plan file"));
  DS4_TRY(json j, parse_json_text(text, path));
  // String keys are type-checked first: json::value() would throw on another type.
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "ds4-placement-plan")
    return Error{path + ": expected \"format\": \"ds4-placement-plan\""};
  if (j.contains("policy") && !j["policy"].is_string())
    return Error{path + ": policy: expected a string, found " + j["policy"].dump().substr(0, 60)};
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    return Error{path + ": expected \"version\": 1"};
  if (!j.contains("ranks") || !j["ranks"].is_number_integer() || j["ranks"].get<int64_t>() != ranks)
    return Error{path + ": ranks: expected " + std::to_string(ranks) + " (this machine's GPUs), found " +
                 (j.contains("ranks") ? j["ranks"].dump() : std::string("nothing"))};
  if (!j.contains("layers") || !j["layers"].is_array() || int(j["layers"].size()) != n_layers)
    return Error{path + ": layers: expected an array of " + std::to_string(n_layers) + " layers"};
  Plan p;
  p.policy = j.value("policy", std::string("unknown"));
  p.n_layers = n_layers;
  p.n_experts = n_experts;
  p.ranks = ranks;
  for (int l = 0; l < n_layers; ++l) {
    const json& lj = j["layers"][size_t(l)];
    const std::string where = path + ": layers[" + std::to_string(l) + "]";
    if (!lj.is_object() || !lj.contains("mode") || !lj.contains("tier") || !lj.contains("owner") || !lj.contains("node"))
      return Error{where + ": expected keys mode, tier, owner, node"};
    // The array position is the layer; a "layer" index that disagrees (a hand-edited or reordered
    // file) would put this entry's placements on another layer without a word.
    if (lj.contains("layer") && (!lj["layer"].is_number_integer() || lj["layer"].get<int64_t>() != l))
      return Error{where + ".layer: expected " + std::to_string(l) +
                   " (layers listed in order, one per model layer), found " + lj["layer"].dump().substr(0, 60)};
    const std::string mode = lj["mode"].is_string() ? lj["mode"].get<std::string>() : std::string();
    if (mode != "split" && mode != "whole")
      return Error{where + ".mode: expected \"split\" or \"whole\", found " + lj["mode"].dump()};
    p.mode.push_back(mode == "split" ? StageMode::Split : StageMode::Whole);
    if (!lj["tier"].is_string() || int(lj["tier"].get<std::string>().size()) != n_experts)
      return Error{where + ".tier: expected a string of " + std::to_string(n_experts) + " tier letters (bytes)"};
    const std::string tiers = lj["tier"].get<std::string>();
    const json &owners = lj["owner"], &nodes = lj["node"];
    if (!owners.is_array() || int(owners.size()) != n_experts || !nodes.is_array() || int(nodes.size()) != n_experts)
      return Error{where + ": owner and node: expected arrays of " + std::to_string(n_experts) + " integers"};
    std::vector<ExpertPlacement> row(static_cast<size_t>(n_experts));
    for (int e = 0; e < n_experts; ++e) {
      ExpertPlacement& pl = row[size_t(e)];
      const std::string at = where + " expert " + std::to_string(e);
      switch (tiers[size_t(e)]) {
        case 'V': pl.tier = Tier::Vram; break;
        case 'H': pl.tier = Tier::Host; pl.pinned = true; break;
        case 'P': pl.tier = Tier::Host; break;
        case 'C': pl.tier = Tier::Cpu; break;
        case 'N': pl.tier = Tier::Nvme; break;
        case 'M': pl.tier = Tier::Nvme; pl.cpu_compute = true; break;
        default: {  // a byte outside printable ASCII (NUL, half a UTF-8 sequence) shown as \xNN
          const unsigned char c = static_cast<unsigned char>(tiers[size_t(e)]);
          char shown[8];
          if (c >= 0x20 && c < 0x7F)
            std::snprintf(shown, sizeof shown, "%c", c);
          else
            std::snprintf(shown, sizeof shown, "\\x%02X", c);
          return Error{at + ": unknown tier '" + shown + "' (expected V H P C N M)"};
        }
      }
      if (!owners[size_t(e)].is_number_integer() || !nodes[size_t(e)].is_number_integer())
        return Error{at + ": owner/node: expected integers"};
      const int64_t owner = owners[size_t(e)].get<int64_t>(), node = nodes[size_t(e)].get<int64_t>();
      if (ranks == 0 ? owner != -1 : (owner < 0 || owner >= ranks))
        return Error{at + ": owner: expected " + (ranks == 0 ? std::string("-1 (no GPUs)") : "0.." + std::to_string(ranks - 1)) +
                     ", found " + std::to_string(owner)};
      if ((pl.tier == Tier::Vram || pl.tier == Tier::Host) && ranks == 0)
        return Error{at + ": tier " + std::string(tier_name(pl.tier)) + " needs a GPU, the machine has none"};
      const int node_limit = pl.tier == Tier::Nvme ? 64 : n_nodes;
      if (node < 0 || node >= node_limit)
        return Error{at + ": node: expected 0.." + std::to_string(node_limit - 1) + ", found " + std::to_string(node)};
      pl.owner = int8_t(owner);
      pl.node = int8_t(node);
    }
    p.experts.push_back(std::move(row));
  }
  return p;
}

}  // namespace ds4::placement
