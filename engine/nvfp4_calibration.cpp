// engine/nvfp4_calibration.cpp — see nvfp4_calibration.h.
#include "engine/nvfp4_calibration.h"
#include "ds4/format_number.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "kernels/quant/deepseek_formats.h"
#include "kernels/quant/math.h"

namespace ds4 {

Result<ExpertInputMaxima> ExpertInputMaxima::create(const ModelConfig& c, const gguf::SafetensorsCheckpoint& ck,
                                                    int threads) {
  ExpertInputMaxima m;
  m.L_ = c.n_layer;
  m.E_ = c.n_expert;
  m.K_ = c.n_expert_used;
  m.dim_ = c.dim;
  m.ff_ = c.expert_ff;
  m.threads_ = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  m.limit_.assign(size_t(m.L_), 0.0f);
  for (int l = 0; l < m.L_ && size_t(l) < c.swiglu_limit.size(); ++l) m.limit_[size_t(l)] = c.swiglu_limit[size_t(l)];
  if (m.dim_ % 32 != 0) return Error{"embedding_length " + std::to_string(m.dim_) + " is not a multiple of 32"};
  for (int l = 0; l < m.L_; ++l)
    for (int e = 0; e < m.E_; ++e)
      for (int p : {1, 3}) {
        const std::string base = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w" + std::to_string(p);
        const gguf::StTensor* w = ck.find(base + ".weight");
        const gguf::StTensor* s = ck.find(base + ".scale");
        if (!w || !s) return Error{ck.path() + ": tensor '" + base + (w ? ".scale" : ".weight") + "' missing (needed to recompute w2's input)"};
        if (w->dtype != gguf::StDtype::I8 || s->dtype != gguf::StDtype::F8_E8M0 ||
            w->shape != std::vector<int64_t>{m.ff_, m.dim_ / 2} || s->shape != std::vector<int64_t>{m.ff_, m.dim_ / 32})
          return Error{ck.path() + ": tensor '" + base + ".weight': expected I8 [" + std::to_string(m.ff_) + ", " +
                       std::to_string(m.dim_ / 2) + "] with F8_E8M0 [" + std::to_string(m.ff_) + ", " +
                       std::to_string(m.dim_ / 32) + "] scales (DeepSeek FP4)"};
        (p == 1 ? m.w1_ : m.w3_).push_back(w);
        (p == 1 ? m.w1s_ : m.w3s_).push_back(s);
      }
  m.in_.assign(size_t(m.L_) * size_t(m.E_), -1.0f);
  m.mid_.assign(m.in_.size(), -1.0f);
  m.count_.assign(m.in_.size(), 0);
  return m;
}

void ExpertInputMaxima::add(int l, int64_t n, std::span<const float> x, std::span<const int32_t> ids,
                            std::span<const float> weights) {
  if (l < 0 || l >= L_ || n <= 0) return;
  DS4_CHECK(x.size() == size_t(n * dim_) && ids.size() == size_t(n * K_) && weights.size() == ids.size());
  // Slots per expert, ascending (t, k); w1/w3's input maximum straight from the rows.
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(E_));
  for (int64_t t = 0; t < n; ++t) {
    float rmax = 0.0f;
    for (int64_t i = 0; i < dim_; ++i) rmax = std::max(rmax, std::fabs(x[size_t(t * dim_ + i)]));
    for (int k = 0; k < K_; ++k) {
      const int32_t e = ids[size_t(t * K_ + k)];
      if (e < 0 || e >= E_) continue;  // the engine refuses such ids before the hook
      float& a = in_[size_t(l) * size_t(E_) + size_t(e)];
      a = std::max(a, rmax);
      ++count_[size_t(l) * size_t(E_) + size_t(e)];
      slots[size_t(e)].push_back(t * K_ + k);
    }
  }
  // w2's input, recomputed per expert (decoded once per call), experts spread over threads.
  std::atomic<int> next{0};
  const float lim = limit_[size_t(l)];
  auto decode = [this](const gguf::StTensor& w, const gguf::StTensor& s, float* out) {
    for (int64_t j = 0; j < ff_; ++j)
      for (int64_t k = 0; k < dim_; ++k)
        out[j * dim_ + k] = quant::ds_fp4_value(quant::ds_fp4_code(w.data + j * (dim_ / 2), k), s.data[j * (dim_ / 32) + k / 32]);
  };
  auto work = [&] {
    std::vector<float> wg(size_t(ff_ * dim_)), wu(wg.size());
    for (int e; (e = next.fetch_add(1)) < E_;) {
      const auto& sl = slots[size_t(e)];
      if (sl.empty()) continue;
      const size_t i = size_t(l) * size_t(E_) + size_t(e);
      decode(*w1_[i], *w1s_[i], wg.data());
      decode(*w3_[i], *w3s_[i], wu.data());
      float amax = 0.0f;
      for (int64_t s : sl) {
        const float* xt = x.data() + (s / K_) * dim_;
        const float rw = weights[size_t(s)];
        for (int64_t j = 0; j < ff_; ++j) {
          double g = 0, u = 0;
          const float* a = wg.data() + j * dim_;
          const float* b = wu.data() + j * dim_;
          for (int64_t q = 0; q < dim_; ++q) {
            g += double(a[q]) * double(xt[q]);
            u += double(b[q]) * double(xt[q]);
          }
          float gf = float(g), uf = float(u);
          if (lim > 0) {
            gf = std::min(gf, lim);
            uf = std::clamp(uf, -lim, lim);
          }
          amax = std::max(amax, std::fabs(quant::silu_f32(gf) * uf * rw));
        }
      }
      float& m = mid_[size_t(l) * size_t(E_) + size_t(e)];
      m = std::max(m, amax);  // one thread per expert: no race
    }
  };
  const int nt = std::min<int>(threads_, E_);
  std::vector<std::thread> pool;
  for (int i = 1; i < nt; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

Result<std::map<std::string, float>> ExpertInputMaxima::input_scales(int* filled) const {
  std::map<std::string, float> out;
  int fill = 0;
  for (int l = 0; l < L_; ++l) {
    float top_in = -1, top_mid = -1;
    for (int e = 0; e < E_; ++e) {
      top_in = std::max(top_in, amax_in(l, e));
      top_mid = std::max(top_mid, amax_mid(l, e));
    }
    if (top_in < 0 || top_mid < 0)
      return Error{"layer " + std::to_string(l) + ": no calibration token reached any routed expert"};
    for (int e = 0; e < E_; ++e) {
      const std::string base = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w";
      const bool reached = amax_in(l, e) >= 0;
      fill += reached ? 0 : 3;
      const float ai = reached ? amax_in(l, e) : top_in, am = reached ? amax_mid(l, e) : top_mid;
      if (!(ai > 0) || !(am > 0))
        return Error{base + "*: calibrated activation maximum is " + format_number(ai > 0 ? am : ai) +
                     "; ModelOpt requires a positive input_scale"};
      out[base + "1"] = out[base + "3"] = nvfp4_input_scale(ai);
      out[base + "2"] = nvfp4_input_scale(am);
    }
  }
  if (filled) *filled = fill;
  return out;
}

Result<void> calibrate_expert_inputs(Session& session, std::span<const std::vector<int32_t>> prompts,
                                     const PromptRunOptions& o, ExpertInputMaxima& maxima, PromptRunStats* stats) {
  auto hook = [&maxima](int l, int64_t n, std::span<const float> x, std::span<const int32_t> ids,
                        std::span<const float> w) { maxima.add(l, n, x, ids, w); };
  DS4_TRY(PromptRunStats st, run_prompts(session, prompts, o, [&](ForwardTrace& t) { t.moe_input = hook; }, nullptr));
  if (stats) *stats = st;
  return ok();
}

}  // namespace ds4
