// engine/sampler.cpp — see sampler.h for the exact order of operations.
#include "engine/sampler.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace ds4 {

Result<void> validate(const SamplerParams& p) {
  auto bad = [](const std::string& name, const std::string& range, double v) {
    return Error{"sampler: " + name + ": expected " + range + ", found " + format_number(v)};
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0) return bad("--temp", "a finite value >= 0", p.temperature);
  if (!(p.top_p > 0 && p.top_p <= 1)) return bad("--top-p", "a value in (0, 1]", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) return bad("--min-p", "a value in [0, 1]", p.min_p);
  if (!(p.repeat_penalty > 0) || !std::isfinite(p.repeat_penalty))
    return bad("--repeat-penalty", "a finite value > 0", p.repeat_penalty);
  if (p.top_k < 0) return bad("--top-k", "0 (off) or a count", p.top_k);
  if (p.repeat_last_n < -1) return bad("--repeat-last-n", "-1 (all), 0 (off) or a count", p.repeat_last_n);
  return ok();
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

int32_t argmax_lowest(std::span<const float> logits) {
  DS4_CHECK(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;  // strict: the first (lowest id) maximum wins
  return int32_t(best);
}

double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

std::vector<float> Sampler::penalized(std::span<const float> logits, std::span<const int32_t> history) const {
  std::vector<float> l(logits.begin(), logits.end());
  if (p_.repeat_penalty == 1.0f || p_.repeat_last_n == 0) return l;
  size_t n = p_.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(p_.repeat_last_n));
  std::unordered_set<int32_t> seen;
  for (size_t i = history.size() - n; i < history.size(); ++i) {
    int32_t id = history[i];
    if (id < 0 || size_t(id) >= l.size() || !seen.insert(id).second) continue;
    float& v = l[size_t(id)];
    v = v > 0 ? v / p_.repeat_penalty : v * p_.repeat_penalty;
  }
  return l;
}

namespace {
// Steps 3-6 on penalized logits `l`; returns kept ids in order (best first).
std::vector<int32_t> truncate(const std::vector<float>& l, const SamplerParams& p) {
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return l[size_t(a)] != l[size_t(b)] ? l[size_t(a)] > l[size_t(b)] : a < b; };
  size_t k = p.top_k > 0 ? std::min(size_t(p.top_k), ids.size()) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(), better);
  ids.resize(k);
  // softmax at temperature 1 over the kept candidates, in double, fixed order.
  const double mx = l[size_t(ids[0])];
  if (!std::isfinite(mx)) return {ids[0]};
  std::vector<double> pr(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += (pr[i] = std::exp(double(l[size_t(ids[i])]) - mx));
  for (auto& v : pr) v /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += pr[i];
      if (cum >= double(p.top_p)) {
        keep = i + 1;
        break;
      }
    }
    ids.resize(keep);
    pr.resize(keep);
  }
  if (p.min_p > 0.0f) {
    const double thr = double(p.min_p) * pr[0];  // pr[0] is the maximum
    size_t keep = 1;
    while (keep < ids.size() && pr[keep] >= thr) ++keep;
    ids.resize(keep);
  }
  return ids;
}
}  // namespace

std::vector<int32_t> Sampler::candidates(std::span<const float> logits, std::span<const int32_t> history) const {
  DS4_CHECK(!logits.empty());
  auto l = penalized(logits, history);
  if (p_.temperature <= 0) return {argmax_lowest(l)};
  return truncate(l, p_);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  DS4_CHECK(!logits.empty());
  auto l = penalized(logits, history);
  if (p_.temperature <= 0) return argmax_lowest(l);
  auto ids = truncate(l, p_);
  if (!std::isfinite(l[size_t(ids[0])])) return ids[0];  // best logit is +-inf: no distribution to draw from
  const double inv_t = 1.0 / double(p_.temperature);
  const double mx = l[size_t(ids[0])];
  std::vector<double> q(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += (q[i] = std::exp((double(l[size_t(ids[i])]) - mx) * inv_t));
  const double u = uniform01(rng_) * sum;
  double cum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cum += q[i];
    if (cum > u) return ids[i];
  }
  return ids.back();  // u * sum rounded to sum: the last candidate
}

}  // namespace ds4
