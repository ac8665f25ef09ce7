// placement/hw_profile.cpp — hardware profile JSON parsing and validation.
#include "placement/hw_profile.h"
#include "ds4/format_number.h"

#include "ds4/file_io.h"
#include "placement/json_text.h"

#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ds4::placement {

using nlohmann::json;

double NumaNodeProfile::cpu_gbps_for(const std::string& type_name) const {
  if (auto it = cpu_expert_gbps.find(type_name); it != cpu_expert_gbps.end()) return it->second;
  auto it = cpu_expert_gbps.find("default");
  DS4_CHECK(it != cpu_expert_gbps.end());
  return it->second;
}

namespace {
double rate_for(const std::map<std::string, double>& m, const std::string& type_name) {
  if (auto it = m.find(type_name); it != m.end()) return it->second;
  auto it = m.find("default");
  return it == m.end() ? 0.0 : it->second;
}
}  // namespace

double CpuDecodeMode::hot_for(const std::string& type_name) const { return rate_for(hot_gbps, type_name); }
double CpuDecodeMode::cold_for(const std::string& type_name) const { return rate_for(cold_gbps, type_name); }

int HwProfile::node_index(int id) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].id == id) return int(i);
  return -1;
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Bounds on the magnitude of every non-zero rate, time and ratio of a profile (sizes excepted):
// 1e-6 .. 1e9 covers KB/s .. PB/s, ns-scale .. 1000 s in microseconds, and any FLOP rate in G/T.
constexpr double kMinMagnitude = 1e-6;
constexpr double kMaxMagnitude = 1e9;

/// "`where`.`key`: ..." when a per-type rate is not a positive number within the bounds above.
std::string rate_error(const std::string& where, const std::string& key, const json& v) {
  if (v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0) {
    char b[96];
    std::snprintf(b, sizeof b, ": expected a value in [%g, %g], found %.10g", kMinMagnitude, kMaxMagnitude,
                  v.get<double>());
    return where + "." + key + b;
  }
  return "";
}

// A JSON object being read: records which keys were consumed so unknown keys can be reported.
class ObjReader {
 public:
  ObjReader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  /// A rate (GB/s, GFLOP/s, TFLOP/s), a time (us) or a ratio: non-negative (positive when
  /// `require_positive`) and, unless 0, within [kMinMagnitude, kMaxMagnitude], so that a typo like
  /// 1e300 or 1e-300 is refused instead of giving 300-digit predictions.
  Result<double> number(const char* key, bool require_positive = true) {
    DS4_TRY(double d, raw_number(key, require_positive));
    if (d != 0 && (d < kMinMagnitude || d > kMaxMagnitude))
      return Error{where_ + ": " + key + ": expected " + (require_positive ? "" : "0 or ") + "a value in [" +
                   fmt_num(kMinMagnitude) + ", " + fmt_num(kMaxMagnitude) + "], found " + fmt_num(d)};
    return d;
  }
  /// A finite number >= 0 (> 0 when `require_positive`), no magnitude bound (sizes: see bytes()).
  Result<double> raw_number(const char* key, bool require_positive) {
    DS4_TRY(const json* v, get(key));
    if (!v->is_number()) return type_error(key, "a number", *v);
    double d = v->get<double>();
    if (!std::isfinite(d) || d < 0 || (require_positive && d == 0))
      return Error{where_ + ": " + key + ": expected a " + (require_positive ? "positive" : "non-negative") +
                   " number, found " + v->dump()};
    return d;
  }
  /// A size in `unit` bytes ("memory_gib": unit 2^30) as bytes: a number in [0, 2^50 bytes]
  /// (1 PiB; positive when `require_positive`), so that the conversion cannot overflow int64.
  Result<int64_t> bytes(const char* key, double unit, const char* unit_name, bool require_positive = true) {
    DS4_TRY(double d, raw_number(key, require_positive));
    const double max_units = std::ldexp(1.0, 50) / unit;
    if (d > max_units)
      return Error{where_ + ": " + key + ": expected at most " + fmt_num(max_units) + " " + unit_name +
                   " (1 PiB), found " + fmt_num(d)};
    return int64_t(d * unit);
  }
  static std::string fmt_num(double d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.10g", d);
    return b;
  }
  Result<int64_t> integer(const char* key, int64_t min_value) {
    DS4_TRY(const json* v, get(key));
    if (!v->is_number_integer()) return type_error(key, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT32_MAX))
      return Error{where_ + ": " + key + ": expected an integer <= " + std::to_string(INT32_MAX) + ", found " +
                   v->dump()};
    int64_t i = v->get<int64_t>();
    if (i > int64_t(INT32_MAX))  // stored as int (ids, cores)
      return Error{where_ + ": " + key + ": expected an integer <= " + std::to_string(INT32_MAX) + ", found " +
                   v->dump()};
    if (i < min_value)
      return Error{where_ + ": " + key + ": expected an integer >= " + std::to_string(min_value) +
                   ", found " + std::to_string(i)};
    return i;
  }
  Result<std::string> string(const char* key) {
    DS4_TRY(const json* v, get(key));
    if (!v->is_string()) return type_error(key, "a string", *v);
    return v->get<std::string>();
  }
  Result<const json*> array(const char* key) {
    DS4_TRY(const json* v, get(key));
    if (!v->is_array()) return type_error(key, "an array", *v);
    return v;
  }
  Result<const json*> object(const char* key) {
    DS4_TRY(const json* v, get(key));
    if (!v->is_object()) return type_error(key, "an object", *v);
    return v;
  }
  const json* raw(const char* key) { return get(key).ok() ? &j_.at(key) : nullptr; }
  bool has(const char* key) const { return j_.contains(key); }
  /// Error for the first key that no reader asked for.
  Result<void> finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) return Error{where_ + ": unknown key '" + it.key() + "'"};
    return ok();
  }
  const std::string& where() const { return where_; }

 private:
  Result<const json*> get(const char* key) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return Error{where_ + ": missing key '" + key + "'"};
    return &*it;
  }
  Error type_error(const char* key, const char* expected, const json& v) const {
    std::string found = v.dump();
    if (found.size() > 40) found = found.substr(0, 40) + "...";
    return Error{where_ + ": " + key + ": expected " + expected + ", found " + found};
  }
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

Result<NumaNodeProfile> parse_node(const json& j, const std::string& where) {
  if (!j.is_object()) return Error{where + ": expected an object"};
  ObjReader r(j, where);
  NumaNodeProfile n;
  DS4_TRY(int64_t id, r.integer("id", 0));
  n.id = int(id);
  DS4_TRY(n.memory_bytes, r.bytes("memory_gib", kGiB, "GiB"));
  DS4_TRY(int64_t cores, r.integer("cores", 1));
  n.cores = int(cores);
  DS4_TRY(n.mem_read_gbps, r.number("mem_read_gbps"));
  DS4_TRY(const json* ce, r.object("cpu_expert_gbps"));
  for (auto it = ce->begin(); it != ce->end(); ++it) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
      return Error{where + ".cpu_expert_gbps." + it.key() + ": expected a positive number, found " + it->dump()};
    if (const double g = it->get<double>(); g < kMinMagnitude || g > kMaxMagnitude)
      return Error{rate_error(where + ".cpu_expert_gbps", it.key(), *it)};
    n.cpu_expert_gbps[it.key()] = it->get<double>();
  }
  if (!n.cpu_expert_gbps.count("default"))
    return Error{where + ".cpu_expert_gbps: missing key 'default'"};
  DS4_TRY(n.cpu_gflops, r.number("cpu_gflops"));
  DS4_TRY_VOID(r.finish());
  return n;
}

Result<GpuProfile> parse_gpu(const json& j, const std::string& where) {
  if (!j.is_object()) return Error{where + ": expected an object"};
  ObjReader r(j, where);
  GpuProfile g;
  DS4_TRY(g.name, r.string("name"));
  DS4_TRY(int64_t node, r.integer("numa_node", 0));
  g.numa_node = int(node);
  DS4_TRY(g.vram_bytes, r.bytes("vram_gib", kGiB, "GiB"));
  DS4_TRY(g.h2d_gbps, r.number("h2d_gbps"));
  DS4_TRY(g.vram_gbps, r.number("vram_gbps"));
  DS4_TRY(g.kernel_efficiency, r.number("kernel_efficiency"));
  if (g.kernel_efficiency > 1)
    return Error{where + ".kernel_efficiency: expected a fraction in (0, 1], found " +
                 format_number(g.kernel_efficiency)};
  DS4_TRY(g.tflops, r.number("tflops"));
  if (r.has("pci_bus_id")) { DS4_TRY(g.pci_bus_id, r.string("pci_bus_id")); }
  DS4_TRY_VOID(r.finish());
  return g;
}

Result<NvmeProfile> parse_nvme(const json& j, const std::string& where) {
  if (!j.is_object()) return Error{where + ": expected an object"};
  ObjReader r(j, where);
  NvmeProfile d;
  DS4_TRY(d.name, r.string("name"));
  DS4_TRY(int64_t node, r.integer("numa_node", 0));
  d.numa_node = int(node);
  DS4_TRY(d.read_gbps, r.number("read_gbps"));
  DS4_TRY_VOID(r.finish());
  return d;
}

Result<std::map<std::string, double>> parse_rates(const json& j, const std::string& where) {
  if (!j.is_object()) return Error{where + ": expected an object of GB/s per ggml type name"};
  std::map<std::string, double> m;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
      return Error{where + "." + it.key() + ": expected a positive number, found " + it->dump()};
    if (const double g = it->get<double>(); g < kMinMagnitude || g > kMaxMagnitude)
      return Error{rate_error(where, it.key(), *it)};
    m[it.key()] = it->get<double>();
  }
  if (!m.count("default")) return Error{where + ": missing key 'default'"};
  return m;
}

/// [[MiB, GB/s], ...]: at least 2 points, sizes strictly ascending and > 0, rates > 0.
Result<std::vector<ReusePoint>> parse_reuse_curve(const json& a, const std::string& where) {
  std::vector<ReusePoint> c;
  for (size_t i = 0; i < a.size(); ++i) {
    const json& e = a[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!e.is_array() || e.size() != 2 || !e[0].is_number() || !e[1].is_number())
      return Error{w + ": expected a pair [MiB, GB/s], found " + e.dump()};
    const double mib = e[0].get<double>(), g = e[1].get<double>();
    if (!std::isfinite(mib) || !std::isfinite(g) || mib <= 0 || g <= 0)
      return Error{w + ": expected a positive size and a positive rate, found " + e.dump()};
    if (g < kMinMagnitude || g > kMaxMagnitude) return Error{rate_error(where, std::to_string(i), e[1])};
    if (!c.empty() && mib * 1024.0 * 1024.0 <= c.back().bytes)
      return Error{w + ": expected sizes strictly ascending, found " + e.dump() + " after " +
                   format_number(c.back().bytes / (1024.0 * 1024.0)) + " MiB"};
    c.push_back({mib * 1024.0 * 1024.0, g});
  }
  if (c.size() < 2) return Error{where + ": expected at least 2 points, found " + std::to_string(c.size())};
  return c;
}

Result<CpuDecodeProfile> parse_cpu_decode(const json& j, const std::string& where) {
  if (!j.is_object()) return Error{where + ": expected an object"};
  ObjReader r(j, where);
  CpuDecodeProfile d;
  DS4_TRY(int64_t threads, r.integer("threads", 1));
  d.threads = int(threads);
  DS4_TRY(d.llc_bytes, r.bytes("llc_mib", 1024.0 * 1024.0, "MiB", false));
  DS4_TRY(const json* modes, r.object("modes"));
  for (auto it = modes->begin(); it != modes->end(); ++it) {
    const std::string mw = where + ".modes." + it.key();
    if (it.key() != "q8" && it.key() != "f32") return Error{mw + ": expected mode q8 or f32"};
    if (!it->is_object()) return Error{mw + ": expected an object"};
    ObjReader m(*it, mw);
    CpuDecodeMode cm;
    DS4_TRY(cm.token_us, m.number("token_us", false));
    DS4_TRY(cm.layer_us, m.number("layer_us", false));
    DS4_TRY(cm.attn_gflops, m.number("attn_gflops"));
    DS4_TRY(const json* hot, m.object("hot_gbps"));
    DS4_TRY(cm.hot_gbps, parse_rates(*hot, mw + ".hot_gbps"));
    DS4_TRY(const json* cold, m.object("cold_gbps"));
    DS4_TRY(cm.cold_gbps, parse_rates(*cold, mw + ".cold_gbps"));
    DS4_TRY_VOID(m.finish());
    d.modes[it.key()] = std::move(cm);
  }
  if (d.modes.empty()) return Error{where + ".modes: expected at least one of q8, f32"};
  if (r.has("reuse_curve")) {
    DS4_TRY(const json* curve, r.array("reuse_curve"));
    DS4_TRY(d.reuse_curve, parse_reuse_curve(*curve, where + ".reuse_curve"));
  }
  DS4_TRY_VOID(r.finish());
  return d;
}

}  // namespace

Result<void> validate_hw_profile(const HwProfile& p, const std::string& source) {
  if (p.nodes.empty()) return Error{source + ": numa_nodes: expected at least one node, found none"};
  if (p.nodes.size() > 64 || p.gpus.size() > 64)
    return Error{source + ": expected at most 64 NUMA nodes and 64 GPUs, found " + std::to_string(p.nodes.size()) +
                 " and " + std::to_string(p.gpus.size())};
  std::set<int> ids;
  for (const auto& n : p.nodes)
    if (!ids.insert(n.id).second) return Error{source + ": numa_nodes: duplicate id " + std::to_string(n.id)};
  for (size_t i = 0; i < p.gpus.size(); ++i)
    if (!ids.count(p.gpus[i].numa_node))
      return Error{source + ": gpus[" + std::to_string(i) + "].numa_node: expected one of the numa_nodes ids, found " +
                   std::to_string(p.gpus[i].numa_node)};
  for (size_t i = 0; i < p.nvme.size(); ++i)
    if (!ids.count(p.nvme[i].numa_node))
      return Error{source + ": nvme[" + std::to_string(i) + "].numa_node: expected one of the numa_nodes ids, found " +
                   std::to_string(p.nvme[i].numa_node)};
  if (!p.gpus.empty() && p.h2d_aggregate_gbps <= 0)
    return Error{source + ": links.h2d_aggregate_gbps: expected > 0 with GPUs present"};
  int64_t mem = 0;
  for (const auto& n : p.nodes) mem += n.memory_bytes;
  if (p.host_reserved_bytes >= mem)
    return Error{source + ": host.reserved_gib: expected less than the installed memory (" +
                 format_number(double(mem) / kGiB) + " GiB), found " +
                 format_number(double(p.host_reserved_bytes) / kGiB) + " GiB"};
  for (size_t i = 0; i < p.gpus.size(); ++i)
    if (p.vram_reserved_bytes >= p.gpus[i].vram_bytes)
      return Error{source + ": runtime.vram_reserved_mib: expected less than gpus[" + std::to_string(i) + "] VRAM"};
  return ok();
}

Result<HwProfile> parse_hw_profile(const std::string& text, const std::string& source) {
  DS4_TRY(json root, parse_json_text(text, source));
  if (!root.is_object()) return Error{source + ": expected a JSON object at the top level"};
  ObjReader r(root, source);
  HwProfile p;
  DS4_TRY(p.name, r.string("name"));
  if (r.has("description")) { DS4_TRY(p.description, r.string("description")); }
  DS4_TRY(const json* nodes, r.array("numa_nodes"));
  for (size_t i = 0; i < nodes->size(); ++i) {
    DS4_TRY(auto n, parse_node((*nodes)[i], source + ": numa_nodes[" + std::to_string(i) + "]"));
    p.nodes.push_back(std::move(n));
  }
  DS4_TRY(const json* gpus, r.array("gpus"));
  for (size_t i = 0; i < gpus->size(); ++i) {
    DS4_TRY(auto g, parse_gpu((*gpus)[i], source + ": gpus[" + std::to_string(i) + "]"));
    p.gpus.push_back(std::move(g));
  }
  if (r.has("nvme")) {
    DS4_TRY(const json* nv, r.array("nvme"));
    for (size_t i = 0; i < nv->size(); ++i) {
      DS4_TRY(auto d, parse_nvme((*nv)[i], source + ": nvme[" + std::to_string(i) + "]"));
      p.nvme.push_back(std::move(d));
    }
  }
  {
    DS4_TRY(const json* links, r.object("links"));
    ObjReader l(*links, source + ": links");
    DS4_TRY(p.h2d_aggregate_gbps, l.number("h2d_aggregate_gbps", false));
    DS4_TRY(p.inter_socket_gbps, l.number("inter_socket_gbps"));
    DS4_TRY(p.pageable_h2d_gbps, l.number("pageable_h2d_gbps"));
    DS4_TRY(p.copy_latency_us, l.number("copy_latency_us", false));
    DS4_TRY(p.allreduce_latency_us, l.number("allreduce_latency_us", false));
    DS4_TRY(p.allreduce_gbps, l.number("allreduce_gbps"));
    DS4_TRY_VOID(l.finish());
  }
  {
    DS4_TRY(const json* host, r.object("host"));
    ObjReader h(*host, source + ": host");
    const json* ml = h.raw("memlock_gib");
    if (!ml) return Error{source + ": host: missing key 'memlock_gib' (a number or \"unlimited\")"};
    if (ml->is_string() && ml->get<std::string>() == "unlimited") {
      p.memlock_bytes = -1;
    } else if (ml->is_number() && ml->get<double>() >= 0) {
      DS4_TRY(p.memlock_bytes, h.bytes("memlock_gib", kGiB, "GiB", false));
    } else {
      return Error{source + ": host.memlock_gib: expected a non-negative number or \"unlimited\", found " + ml->dump()};
    }
    DS4_TRY(p.host_reserved_bytes, h.bytes("reserved_gib", kGiB, "GiB", false));
    DS4_TRY_VOID(h.finish());
  }
  {
    DS4_TRY(const json* rt, r.object("runtime"));
    ObjReader t(*rt, source + ": runtime");
    DS4_TRY(p.vram_reserved_bytes, t.bytes("vram_reserved_mib", 1024.0 * 1024.0, "MiB", false));
    DS4_TRY(p.layer_overhead_us, t.number("layer_overhead_us", false));
    DS4_TRY(p.cpu_expert_latency_us, t.number("cpu_expert_latency_us", false));
    DS4_TRY_VOID(t.finish());
  }
  if (r.has("cpu_decode")) {
    DS4_TRY(const json* cd, r.object("cpu_decode"));
    DS4_TRY(p.cpu_decode, parse_cpu_decode(*cd, source + ": cpu_decode"));
  }
  DS4_TRY_VOID(r.finish());
  DS4_TRY_VOID(validate_hw_profile(p, source));
  return p;
}

Result<HwProfile> load_hw_profile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Error{path + ": expected a hardware profile file, found a directory"};
  DS4_TRY(const std::string text, read_file_bounded(path, kMaxJsonBytes, "hardware profile"));
  return parse_hw_profile(text, path);
}

std::string hw_profile_to_json(const HwProfile& p) {
  json j;
  j["name"] = p.name;
  j["description"] = p.description;
  j["numa_nodes"] = json::array();
  for (const auto& n : p.nodes) {
    json cj = json::object();
    for (const auto& [k, v] : n.cpu_expert_gbps) cj[k] = v;
    j["numa_nodes"].push_back({{"id", n.id}, {"memory_gib", double(n.memory_bytes) / kGiB}, {"cores", n.cores},
                               {"mem_read_gbps", n.mem_read_gbps}, {"cpu_expert_gbps", cj},
                               {"cpu_gflops", n.cpu_gflops}});
  }
  j["gpus"] = json::array();
  for (const auto& g : p.gpus) {
    json gj = {{"name", g.name}, {"numa_node", g.numa_node}, {"vram_gib", double(g.vram_bytes) / kGiB},
               {"h2d_gbps", g.h2d_gbps}, {"vram_gbps", g.vram_gbps}, {"kernel_efficiency", g.kernel_efficiency},
               {"tflops", g.tflops}};
    if (!g.pci_bus_id.empty()) gj["pci_bus_id"] = g.pci_bus_id;
    j["gpus"].push_back(gj);
  }
  j["nvme"] = json::array();
  for (const auto& d : p.nvme)
    j["nvme"].push_back({{"name", d.name}, {"numa_node", d.numa_node}, {"read_gbps", d.read_gbps}});
  j["links"] = {{"h2d_aggregate_gbps", p.h2d_aggregate_gbps}, {"inter_socket_gbps", p.inter_socket_gbps},
                {"pageable_h2d_gbps", p.pageable_h2d_gbps},
                {"copy_latency_us", p.copy_latency_us}, {"allreduce_latency_us", p.allreduce_latency_us},
                {"allreduce_gbps", p.allreduce_gbps}};
  j["host"] = {{"reserved_gib", double(p.host_reserved_bytes) / kGiB}};
  if (p.memlock_bytes < 0) j["host"]["memlock_gib"] = "unlimited";
  else j["host"]["memlock_gib"] = double(p.memlock_bytes) / kGiB;
  j["runtime"] = {{"vram_reserved_mib", double(p.vram_reserved_bytes) / (1024.0 * 1024.0)},
                  {"layer_overhead_us", p.layer_overhead_us}, {"cpu_expert_latency_us", p.cpu_expert_latency_us}};
  if (!p.cpu_decode.empty()) {
    json modes = json::object();
    for (const auto& [name, m] : p.cpu_decode.modes) {
      json hot = json::object(), cold = json::object();
      for (const auto& [k, v] : m.hot_gbps) hot[k] = v;
      for (const auto& [k, v] : m.cold_gbps) cold[k] = v;
      modes[name] = {{"token_us", m.token_us}, {"layer_us", m.layer_us}, {"attn_gflops", m.attn_gflops},
                     {"hot_gbps", hot}, {"cold_gbps", cold}};
    }
    j["cpu_decode"] = {{"threads", p.cpu_decode.threads},
                       {"llc_mib", double(p.cpu_decode.llc_bytes) / (1024.0 * 1024.0)}, {"modes", modes}};
    if (!p.cpu_decode.reuse_curve.empty()) {
      json curve = json::array();
      for (const ReusePoint& pt : p.cpu_decode.reuse_curve) curve.push_back({pt.bytes / (1024.0 * 1024.0), pt.gbps});
      j["cpu_decode"]["reuse_curve"] = curve;
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace ds4::placement
