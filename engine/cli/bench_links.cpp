// engine/cli/bench_links.cpp — bench's per-link figures and the plan's prediction beside them
// (bench_links.h).
#include "engine/cli/bench_links.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace ds4::cli {
namespace {

using nlohmann::json;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string g4(double v) { return fmt("%.4g", v); }
/// "value" or "n/a" for a link whose timing is not measured.
std::string overlap_text(const dev::LinkTiming& l) { return l.has_overlap() ? fmt("%.3f", l.overlap()) : "n/a"; }
std::string ms_text(const dev::LinkTiming& l, double ms) { return l.measured ? fmt("%.4g", ms) : "n/a"; }
double at(const std::vector<double>& v, size_t i) { return i < v.size() ? v[i] : 0.0; }
json overlap_json(const dev::LinkTiming& l) { return l.has_overlap() ? json(l.overlap()) : json(nullptr); }
/// A per-token ms figure, or null / "n/a" when negative (not measured).
json ms_json(double ms) { return ms < 0 ? json(nullptr) : json(ms); }
std::string ms_or_na(double ms) { return ms < 0 ? std::string("n/a") : fmt("%.4g", ms); }

}  // namespace

double PlanPrediction::vram_total() const { return std::accumulate(vram.begin(), vram.end(), 0.0); }
double PlanPrediction::link_total() const { return std::accumulate(link.begin(), link.end(), 0.0); }

PlanPrediction plan_prediction(const placement::PlanFile* pf) {
  PlanPrediction p;
  if (!pf) return p;
  p.present = true;
  p.vram = pf->predicted.vram;
  p.link = pf->predicted.link;
  p.cpu = pf->predicted.cpu_total();
  p.nvme = pf->predicted.nvme;
  p.tok_s = pf->predicted_tok_s;
  return p;
}

double LinkRow::experts_resident_bpt() const {
  double r = 0;
  for (const RankPerToken& k : ranks) r += k.bytes.device_resident;
  return std::max(0.0, r - (dense_on_device ? dense_bpt : 0.0));
}
double LinkRow::experts_host_bpt() const {
  double h = 0;
  for (const RankPerToken& k : ranks) h += k.bytes.host;
  return std::max(0.0, h - (dense_on_device ? 0.0 : dense_bpt));
}

LinkRow link_row(const BenchTest& t, const std::string& test, double tok_s, double dense_bpt, bool dense_on_device,
                 double nvme_bpt) {
  LinkRow r;
  r.test = test;
  r.tok_s = tok_s;
  r.dense_bpt = dense_bpt;
  r.dense_on_device = dense_on_device;
  r.nvme_bpt = nvme_bpt;
  r.ranks = rank_per_token(t);
  for (const RankPerToken& k : r.ranks) r.link += k.link;
  r.cache_hits = t.cache_hits;
  r.cache_misses = t.cache_misses;
  return r;
}

std::string links_markdown(const std::vector<LinkRow>& rows, const PlanPrediction& p) {
  std::string o =
      "| test | link | resident B/tok | staged B/tok | H2D B/tok | host B/tok | NVMe B/tok | copy ms/tok | "
      "stall ms/tok | host wait ms/tok | overlap | cache hits/misses | t/s |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  auto line = [&](const std::vector<std::string>& c) {
    o += "|";
    for (const std::string& x : c) o += " " + x + " |";
    o += "\n";
  };
  for (const LinkRow& r : rows) {
    for (size_t k = 0; k < r.ranks.size(); ++k) {
      const RankPerToken& q = r.ranks[k];
      // Experts computed on the CPU beside this GPU: the host's ms and the GPU's idle wait per token.
      const std::string cpu = q.cpu_expert_ms < 0 ? std::string()
                                                  : " (CPU experts " + ms_or_na(q.cpu_expert_ms) + " ms, GPU idle " +
                                                        ms_or_na(q.cpu_idle_ms) + " ms)";
      line({r.test, (r.dense_on_device ? "GPU " : "rank ") + std::to_string(k), g4(q.bytes.device_resident), g4(q.bytes.staged), g4(q.bytes.h2d_staged),
            g4(q.bytes.host) + cpu, "-", ms_text(q.link, q.copy_ms), ms_text(q.link, q.stall_ms),
            ms_text(q.link, q.host_wait_ms), overlap_text(q.link), "-", "-"});
    }
    double res = 0, stg = 0, h2d = 0, host = 0, cms = 0, sms = 0, hms = 0;
    for (const RankPerToken& q : r.ranks) {
      res += q.bytes.device_resident, stg += q.bytes.staged, h2d += q.bytes.h2d_staged, host += q.bytes.host;
      cms += q.copy_ms, sms += q.stall_ms, hms += q.host_wait_ms;
    }
    line({r.test, "all", g4(res) + " (experts " + g4(r.experts_resident_bpt()) + ")", g4(stg), g4(h2d),
          g4(host) + " (experts " + g4(r.experts_host_bpt()) + ")", g4(r.nvme_bpt), ms_text(r.link, cms),
          ms_text(r.link, sms), ms_text(r.link, hms), overlap_text(r.link),
          std::to_string(r.cache_hits) + " / " + std::to_string(r.cache_misses), fmt("%.2f", r.tok_s)});
    if (!p.present) continue;
    for (size_t k = 0; k < std::max(p.vram.size(), r.ranks.size()); ++k)
      line({r.test, "plan rank " + std::to_string(k), "experts " + g4(at(p.vram, k)), g4(at(p.link, k)),
            g4(at(p.link, k)), "-", "-", "-", "-", "-", "-", "-", "-"});
    line({r.test, "plan all", "experts " + g4(p.vram_total()), g4(p.link_total()), g4(p.link_total()),
          "experts " + g4(p.cpu), g4(p.nvme), "-", "-", "-", "-", "-", p.tok_s > 0 ? fmt("%.2f", p.tok_s) : "-"});
  }
  return o;
}

json links_json(const LinkRow& r, const PlanPrediction& p) {
  json ranks = json::array();
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const RankPerToken& q = r.ranks[k];
    json j{{"rank", k},
           {"bytes_per_token_device_resident", q.bytes.device_resident},
           {"bytes_per_token_device_staged", q.bytes.staged},
           {"bytes_per_token_h2d_staged", q.bytes.h2d_staged},
           {"bytes_per_token_device_host", q.bytes.host},
           {"link_timed", q.link.measured},
           {"copies", q.link.copies},
           {"copy_bytes", q.link.bytes},
           {"copy_ms_per_token", q.link.measured ? json(q.copy_ms) : json(nullptr)},
           {"stall_ms_per_token", q.link.measured ? json(q.stall_ms) : json(nullptr)},
           {"host_wait_ms_per_token", q.link.measured ? json(q.host_wait_ms) : json(nullptr)},
           {"overlap", overlap_json(q.link)},
           {"cpu_experts_ms_per_token", ms_json(q.cpu_expert_ms)},
           {"cpu_experts_gpu_idle_ms_per_token", ms_json(q.cpu_idle_ms)}};
    j["plan_vram_bytes_per_token"] = p.present ? json(at(p.vram, k)) : json(nullptr);
    j["plan_link_bytes_per_token"] = p.present ? json(at(p.link, k)) : json(nullptr);
    ranks.push_back(j);
  }
  double cms = 0, sms = 0, hms = 0;
  for (const RankPerToken& q : r.ranks) cms += q.copy_ms, sms += q.stall_ms, hms += q.host_wait_ms;
  json o{{"ranks", ranks},
         {"overlap", overlap_json(r.link)},
         {"copy_ms_per_token", r.link.measured ? json(cms) : json(nullptr)},
         {"stall_ms_per_token", r.link.measured ? json(sms) : json(nullptr)},
         {"host_wait_ms_per_token", r.link.measured ? json(hms) : json(nullptr)},
         {"cache_hits", r.cache_hits},
         {"cache_misses", r.cache_misses},
         {"bytes_per_token_experts_resident", r.experts_resident_bpt()},
         {"bytes_per_token_experts_host", r.experts_host_bpt()}};
  if (p.present)
    o["plan"] = json{{"vram_bytes_per_token", p.vram},   {"link_bytes_per_token", p.link},
                     {"vram_bytes_per_token_total", p.vram_total()}, {"link_bytes_per_token_total", p.link_total()},
                     {"cpu_bytes_per_token", p.cpu},     {"nvme_bytes_per_token", p.nvme},
                     {"decode_tok_s", p.tok_s > 0 ? json(p.tok_s) : json(nullptr)}};
  else
    o["plan"] = nullptr;
  return o;
}

std::vector<std::pair<std::string, std::string>> links_csv(const LinkRow* r, const PlanPrediction& p) {
  std::vector<std::pair<std::string, std::string>> c;
  auto add = [&](const char* name, const std::string& v) { c.emplace_back(name, r ? v : std::string()); };
  std::string per_rank;  // "rank:resident/staged/h2d/host/overlap" joined by ';'
  double cms = 0, sms = 0, hms = 0;
  if (r)
    for (size_t k = 0; k < r->ranks.size(); ++k) {
      const RankPerToken& q = r->ranks[k];
      per_rank += (k ? ";" : "") + std::to_string(k) + ":" + fmt("%.0f", q.bytes.device_resident) + "/" +
                  fmt("%.0f", q.bytes.staged) + "/" + fmt("%.0f", q.bytes.h2d_staged) + "/" +
                  fmt("%.0f", q.bytes.host) + "/" + overlap_text(q.link);
      cms += q.copy_ms, sms += q.stall_ms, hms += q.host_wait_ms;
    }
  const dev::LinkTiming none;
  const dev::LinkTiming& l = r ? r->link : none;
  add("overlap", overlap_text(l));
  add("copy_ms_per_token", ms_text(l, cms));
  add("stall_ms_per_token", ms_text(l, sms));
  add("host_wait_ms_per_token", ms_text(l, hms));
  add("cache_hits", r ? std::to_string(r->cache_hits) : "");
  add("cache_misses", r ? std::to_string(r->cache_misses) : "");
  add("bytes_per_token_experts_resident", r ? fmt("%.0f", r->experts_resident_bpt()) : "");
  add("bytes_per_token_experts_host", r ? fmt("%.0f", r->experts_host_bpt()) : "");
  add("ranks_resident_staged_h2d_host_overlap", "\"" + per_rank + "\"");
  add("plan_vram_bytes_per_token", p.present ? fmt("%.0f", p.vram_total()) : "n/a");
  add("plan_link_bytes_per_token", p.present ? fmt("%.0f", p.link_total()) : "n/a");
  add("plan_cpu_bytes_per_token", p.present ? fmt("%.0f", p.cpu) : "n/a");
  add("plan_nvme_bytes_per_token", p.present ? fmt("%.0f", p.nvme) : "n/a");
  add("plan_decode_tok_s", p.present && p.tok_s > 0 ? fmt("%.3f", p.tok_s) : "n/a");
  return c;
}

}  // namespace ds4::cli
