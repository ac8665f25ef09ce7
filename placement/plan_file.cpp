// placement/plan_file.cpp — read_plan_file and plan_bytes_for_routing (see plan_file.h).
#include "placement/plan_file.h"

#include "ds4/file_io.h"
#include "placement/json_text.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "placement/plan_report.h"

namespace ds4::placement {

namespace {

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

using nlohmann::json;

// What an error says was found at key `k` of `o`: "nothing" when absent, else its JSON type
// ("array", "string", "null", ...).
std::string found_at(const json& o, const char* k) {
  return o.is_object() && o.contains(k) ? std::string(o[k].type_name()) : std::string("nothing");
}

// Reads key `k` of object `o` as an integer; error names `where.k`, expected and found.
Result<int64_t> get_int(const json& o, const std::string& where, const char* k) {
  if (!o.is_object()) return Error{where + ": expected an object, found " + o.dump().substr(0, 60)};
  if (!o.contains(k)) return Error{where + "." + k + ": expected an integer, found nothing"};
  if (!o[k].is_number_integer()) return Error{where + "." + k + ": expected an integer, found " + o[k].dump().substr(0, 60)};
  if (o[k].is_number_unsigned() && o[k].get<uint64_t>() > uint64_t(INT64_MAX))
    return Error{where + "." + k + ": expected an integer up to " + std::to_string(INT64_MAX) + ", found " +
                 o[k].dump().substr(0, 60)};
  return o[k].get<int64_t>();
}

// Reads an array of `n` numbers at `o[k]`.
Result<std::vector<double>> get_numbers(const json& o, const std::string& where, const char* k, size_t n) {
  if (!o.is_object() || !o.contains(k) || !o[k].is_array())
    return Error{where + "." + k + ": expected an array of " + std::to_string(n) + " numbers, found " +
                 (o.is_object() && o.contains(k) ? o[k].dump().substr(0, 60) : std::string("nothing"))};
  const json& a = o[k];
  if (a.size() != n)
    return Error{where + "." + k + ": expected " + std::to_string(n) + " numbers, found " + std::to_string(a.size())};
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) {
    if (!a[i].is_number() || !std::isfinite(a[i].get<double>()) || a[i].get<double>() < 0)
      return Error{where + "." + k + "[" + std::to_string(i) + "]: expected a non-negative number, found " + a[i].dump()};
    v.push_back(a[i].get<double>());
  }
  return v;
}

}  // namespace

double TierBytes::vram_total() const { return sum(vram); }
double TierBytes::link_total() const { return sum(link); }
double TierBytes::cpu_total() const { return sum(cpu); }

Result<PlanFile> read_plan_file(const std::string& path, int n_layers, int n_experts, int top_k) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Error{path + ": expected a plan file, found a directory"};
  DS4_TRY(const std::string text, read_file_bounded(path, kMaxJsonBytes, "plan file"));
  DS4_TRY(const json j, parse_json_text(text, path));
  if (!j.is_object()) return Error{path + ": expected a ds4-placement-plan object, found " + std::string(j.type_name())};
  const std::string& w = path;
  // Keys read as strings or small integers here and in load_plan: wrong JSON types are named
  // (not left to the JSON library's type error, nor truncated to int).
  for (const char* k : {"format", "policy", "rule", "routing"})
    if (j.contains(k) && !j[k].is_string())
      return Error{w + "." + k + ": expected a string, found " + j[k].dump().substr(0, 60)};
  if (j.value("format", std::string()) != "ds4-placement-plan")
    return Error{w + ".format: expected \"ds4-placement-plan\", found " +
                 (j.contains("format") ? j["format"].dump().substr(0, 60) : std::string("nothing"))};
  DS4_TRY(int64_t version, get_int(j, w, "version"));
  if (version != 1) return Error{w + ".version: expected 1, found " + std::to_string(version)};
  // Model shape first: a plan for another model is refused with the counts.
  if (!j.contains("model") || !j["model"].is_object())
    return Error{w + ": model: expected an object, found " + found_at(j, "model")};
  const json& m = j["model"];
  DS4_TRY(int64_t fl, get_int(m, w + ": model", "n_layers"));
  DS4_TRY(int64_t fe, get_int(m, w + ": model", "n_experts"));
  DS4_TRY(int64_t fk, get_int(m, w + ": model", "top_k"));
  if (fl != n_layers || fe != n_experts || fk != top_k)
    return Error{w + ": the plan is for a model with " + std::to_string(fl) + " layers x " + std::to_string(fe) +
                 " experts (top-" + std::to_string(fk) + "), this model has " + std::to_string(n_layers) + " x " +
                 std::to_string(n_experts) + " (top-" + std::to_string(top_k) + ")"};
  DS4_TRY(int64_t ranks, get_int(j, w, "ranks"));
  if (ranks < 0 || ranks > 64) return Error{w + ".ranks: expected 0..64, found " + std::to_string(ranks)};
  if (!j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty())
    return Error{w + ".nodes: expected a non-empty array of NUMA nodes"};
  PlanFile f;
  for (size_t i = 0; i < j["nodes"].size(); ++i) {
    DS4_TRY(int64_t id, get_int(j["nodes"][i], w + ".nodes[" + std::to_string(i) + "]", "id"));
    f.node_ids.push_back(int(id));
  }
  if (!j.contains("layers") || !j["layers"].is_array() || int(j["layers"].size()) != n_layers)
    return Error{w + ".layers: expected " + std::to_string(n_layers) + " layers, found " +
                 (j.contains("layers") && j["layers"].is_array() ? std::to_string(j["layers"].size()) : std::string("none"))};
  for (int l = 0; l < n_layers; ++l) {
    const json& lj = j["layers"][size_t(l)];
    const std::string where = w + ": layers[" + std::to_string(l) + "]";
    if (lj.is_object() && lj.contains("tier") && lj["tier"].is_string() &&
        int(lj["tier"].get<std::string>().size()) != n_experts)
      return Error{where + ".tier: expected " + std::to_string(n_experts) + " tier letters (one per expert), found " +
                   std::to_string(lj["tier"].get<std::string>().size())};
    DS4_TRY(int64_t b, get_int(lj, where, "expert_bytes"));
    if (b <= 0) return Error{where + ".expert_bytes: expected > 0, found " + std::to_string(b)};
    f.expert_bytes.push_back(b);
  }
  // Placement (tiers, owners, nodes) through the shared reader.
  DS4_TRY(f.plan, load_plan(path, n_layers, n_experts, int(ranks), int(f.node_ids.size())));
  f.rule = j.value("rule", f.plan.policy);
  f.plan.rule = f.rule;
  f.top_k = top_k;
  f.routing = j.value("routing", std::string());
  if (!j.contains("prediction") || !j["prediction"].is_object())
    return Error{w + ".prediction: expected an object, found " + found_at(j, "prediction")};
  const json& pr = j["prediction"];
  const std::string pw = w + ": prediction";
  DS4_TRY(f.predicted.vram, get_numbers(pr, pw, "vram_bytes_per_token", size_t(ranks)));
  DS4_TRY(f.predicted.link, get_numbers(pr, pw, "link_bytes_per_token", size_t(ranks)));
  DS4_TRY(f.predicted.cpu, get_numbers(pr, pw, "cpu_bytes_per_token", f.node_ids.size()));
  if (!pr.contains("nvme_bytes_per_token") || !pr["nvme_bytes_per_token"].is_number() ||
      !std::isfinite(pr["nvme_bytes_per_token"].get<double>()) || pr["nvme_bytes_per_token"].get<double>() < 0)
    return Error{pw + ".nvme_bytes_per_token: expected a non-negative number, found " +
                 (pr.contains("nvme_bytes_per_token") ? pr["nvme_bytes_per_token"].dump().substr(0, 60)
                                                      : std::string("nothing"))};
  f.predicted.nvme = pr["nvme_bytes_per_token"].get<double>();
  // Optional (plans written before bench compared against it, the tests' plans): 0 = unknown.
  if (pr.contains("decode_tok_s") && pr["decode_tok_s"].is_number() && std::isfinite(pr["decode_tok_s"].get<double>()) &&
      pr["decode_tok_s"].get<double>() > 0)
    f.predicted_tok_s = pr["decode_tok_s"].get<double>();
  return f;
}

Result<void> check_plan_expert_bytes(const PlanFile& f, const std::vector<int64_t>& model_expert_bytes,
                                     const std::string& path) {
  if (f.expert_bytes.size() != model_expert_bytes.size())
    return Error{path + ": the plan lists expert_bytes for " + std::to_string(f.expert_bytes.size()) +
                 " layers, this model has " + std::to_string(model_expert_bytes.size())};
  for (size_t l = 0; l < f.expert_bytes.size(); ++l)
    if (f.expert_bytes[l] != model_expert_bytes[l])
      return Error{path + ": layers[" + std::to_string(l) + "].expert_bytes: expected " +
                   std::to_string(model_expert_bytes[l]) + " (one routed expert of this model), found " +
                   std::to_string(f.expert_bytes[l]) + " (a plan made for another model or expert type?)"};
  return ok();
}

TierBytes plan_bytes_for_routing(const Plan& plan, const std::vector<int64_t>& expert_bytes, int n_nodes,
                                 const std::vector<int>& gpu_node_index,
                                 const std::vector<std::vector<std::vector<int32_t>>>& routes) {
  TierBytes t;
  const int R = plan.ranks;
  t.vram.assign(size_t(R), 0);
  t.link.assign(size_t(R), 0);
  t.cpu.assign(size_t(n_nodes), 0);
  for (size_t l = 0; l < routes.size() && l < plan.experts.size(); ++l) {
    const double b = double(expert_bytes[l]);
    const bool split = plan.mode[l] == StageMode::Split;
    for (const auto& tok : routes[l])
      for (int32_t e : tok) {
        const ExpertPlacement& pl = plan.experts[l][size_t(e)];
        const bool on_cpu = pl.tier == Tier::Cpu || (pl.tier == Tier::Nvme && pl.cpu_compute);
        if (pl.tier == Tier::Nvme) t.nvme += b;
        if (pl.tier == Tier::Vram) {
          t.vram[size_t(pl.owner)] += b;
        } else if (on_cpu) {
          const int ni = pl.tier == Tier::Cpu ? pl.node
                                              : (pl.owner >= 0 && size_t(pl.owner) < gpu_node_index.size()
                                                     ? gpu_node_index[size_t(pl.owner)]
                                                     : 0);
          t.cpu[size_t(ni)] += b;
        } else if (split) {
          for (int r = 0; r < R; ++r) t.link[size_t(r)] += b / R;
        } else {
          t.link[size_t(pl.owner)] += b;
        }
      }
  }
  return t;
}

}  // namespace ds4::placement
