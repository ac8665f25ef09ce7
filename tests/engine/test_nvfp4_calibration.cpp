// `convert --to nvfp4 --prompts` (label golden): the calibrated input_scale of every routed-expert
// matrix of ../shared/fixtures/dsv4-tiny equals amax / (6 * 448) (ModelOpt's convention,
// engine/nvfp4_calibration.h) for maxima this test computes itself from recorded activations:
// the MoE input rows recorded through ForwardTrace::moe_input, the experts decoded through the
// fixture GGUF's MXFP4 blocks (not the safetensors FP4 path the calibrator uses), w1 x / w3 x
// summed in another order. Every other byte of the output equals the uncalibrated cast's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/checkpoint_convert.h"
#include "engine/dsv4_model.h"
#include "engine/nvfp4_calibration.h"
#include "golden_data.h"
#include "gguf/gguf_file.h"
#include "gguf/safetensors.h"
#include "kernels/cpu/quant_ref.h"
#include "support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(Nvfp4Calibration, InputScalesEqualIndependentMaxima) {
  // Prompts: the two golden prompts, token ids (the fixture folder has no tokenizer.json).
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : test::load_goldens()) prompts.push_back(p.ids);
  ASSERT_EQ(prompts.size(), 2u);
  ModelOptions mo;
  mo.threads = 2;
  auto model = Dsv4Model::open(test::tiny_dir().string(), mo);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  const int L = c.n_layer, E = c.n_expert, K = c.n_expert_used;
  const int64_t dim = c.dim, ff = c.expert_ff;

  // Oracle. Record every MoE call of a plain run (windows of 4096 = whole prompts, one eval each).
  struct Call {
    int layer;
    std::vector<float> x, w;
    std::vector<int32_t> ids;
  };
  std::vector<Call> calls;
  {
    Dsv4Session s(*model);
    for (const auto& ids : prompts) {
      s.reset();
      ForwardTrace tr;
      tr.moe_input = [&](int l, int64_t, std::span<const float> x, std::span<const int32_t> id, std::span<const float> w) {
        calls.push_back({l, {x.begin(), x.end()}, {w.begin(), w.end()}, {id.begin(), id.end()}});
      };
      s.set_trace(&tr);
      ASSERT_TRUE(s.eval(ids, nullptr, nullptr).ok());
      s.set_trace(nullptr);
    }
  }
  ASSERT_EQ(calls.size(), size_t(L) * prompts.size());
  auto gg = gguf::GgufModel::open(test::tiny_gguf().string());
  ASSERT_TRUE(gg.ok()) << gg.error().message;
  std::vector<double> in(size_t(L * E), -1), mid(size_t(L * E), -1);
  std::vector<float> wg(size_t(ff * dim)), wu(wg.size());
  for (int l = 0; l < L; ++l) {
    const gguf::TensorInfo* G = gg->find("blk." + std::to_string(l) + ".ffn_gate_exps.weight");
    const gguf::TensorInfo* U = gg->find("blk." + std::to_string(l) + ".ffn_up_exps.weight");
    ASSERT_TRUE(G && U);
    const float lim = c.swiglu_limit[size_t(l)];
    for (int e = 0; e < E; ++e) {
      for (int64_t j = 0; j < ff; ++j) {
        cpu::dequantize_row(GgmlType(G->type), G->data + (e * ff + j) * G->row_bytes(), wg.data() + j * dim, dim);
        cpu::dequantize_row(GgmlType(U->type), U->data + (e * ff + j) * U->row_bytes(), wu.data() + j * dim, dim);
      }
      for (const Call& cl : calls) {
        if (cl.layer != l) continue;
        for (size_t s = 0; s < cl.ids.size(); ++s) {
          if (cl.ids[s] != e) continue;
          const float* xt = cl.x.data() + (s / size_t(K)) * size_t(dim);
          double& a = in[size_t(l * E + e)];
          for (int64_t i = 0; i < dim; ++i) a = std::max(a, double(std::fabs(xt[i])));
          for (int64_t j = 0; j < ff; ++j) {
            double g = 0, u = 0;
            for (int64_t i = dim - 1; i >= 0; --i) {  // reverse order on purpose
              g += double(wg[size_t(j * dim + i)]) * xt[i];
              u += double(wu[size_t(j * dim + i)]) * xt[i];
            }
            g = std::min(g, double(lim));
            u = std::clamp(u, -double(lim), double(lim));
            const double h = g / (1 + std::exp(-g)) * u * cl.w[s];
            mid[size_t(l * E + e)] = std::max(mid[size_t(l * E + e)], std::fabs(h));
          }
        }
      }
    }
  }

  // The calibrator, through the same entry points `convert --prompts` uses.
  auto ck = gguf::SafetensorsCheckpoint::open(test::tiny_dir().string());
  ASSERT_TRUE(ck.ok());
  auto maxima = ExpertInputMaxima::create(c, *ck, 2);
  ASSERT_TRUE(maxima.ok()) << maxima.error().message;
  {
    Dsv4Session s(*model);
    PromptRunStats st;
    ASSERT_TRUE(calibrate_expert_inputs(s, prompts, PromptRunOptions{.window = 4096, .chunk = 512}, *maxima, &st).ok());
    EXPECT_EQ(st.tokens, int64_t(prompts[0].size() + prompts[1].size()));
  }
  int filled = -1;
  auto scales = maxima->input_scales(&filled);
  ASSERT_TRUE(scales.ok()) << scales.error().message;
  ASSERT_EQ(scales->size(), size_t(L * E * 3));
  int unreached = 0, checked = 0;
  double worst_mid = 0;
  for (int l = 0; l < L; ++l) {
    double top_in = -1, top_mid = -1;
    for (int e = 0; e < E; ++e) top_in = std::max(top_in, in[size_t(l * E + e)]), top_mid = std::max(top_mid, mid[size_t(l * E + e)]);
    for (int e = 0; e < E; ++e) {
      const bool reached = in[size_t(l * E + e)] >= 0;
      unreached += !reached;
      EXPECT_EQ(maxima->routed(l, e) > 0, reached) << l << "/" << e;
      const double ai = reached ? in[size_t(l * E + e)] : top_in, am = reached ? mid[size_t(l * E + e)] : top_mid;
      const std::string b = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w";
      // w1/w3: max |x| is exact in FP32, so the scale is exactly float(amax) / 2688.
      EXPECT_EQ(scales->at(b + "1"), float(ai) / 2688.0f) << b;
      EXPECT_EQ(scales->at(b + "3"), float(ai) / 2688.0f) << b;
      // w2: recomputed sums in another order and precision: equal to a few FP32 ulps.
      const double rel = std::fabs(double(scales->at(b + "2")) * 2688.0 - am) / am;
      worst_mid = std::max(worst_mid, rel);
      EXPECT_LT(rel, 2e-6) << b << ".w2: " << scales->at(b + "2") * 2688.0 << " vs " << am;
      checked += 3;
    }
  }
  EXPECT_EQ(filled, 3 * unreached);
  std::printf("  %d input_scales checked (%d (layer, expert) pairs unreached, filled with the layer's max); "
              "w2 worst relative difference %.2e\n", checked, unreached, worst_mid);

  // The cast with the calibrated scales vs the plain cast: only input_scale bytes differ.
  const fs::path dir = test::scratch_dir("nvfp4_calibrated");
  fs::remove_all(dir / "cal");
  fs::remove_all(dir / "plain");
  auto rc = cast_checkpoint_to_nvfp4(test::tiny_dir().string(), (dir / "cal").string(), {}, *scales);
  ASSERT_TRUE(rc.ok()) << rc.error().message;
  EXPECT_EQ(rc->calibrated, L * E * 3);
  ASSERT_TRUE(cast_checkpoint_to_nvfp4(test::tiny_dir().string(), (dir / "plain").string()).ok());
  auto a = gguf::SafetensorsCheckpoint::open((dir / "cal").string());
  ASSERT_TRUE(a.ok()) << a.error().message;
  int is_seen = 0;
  for (const auto& t : a->tensors())
    if (t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, ".input_scale") == 0) {
      float v;
      ASSERT_EQ(t.nbytes, 4u);
      std::memcpy(&v, t.data, 4);
      EXPECT_EQ(v, scales->at(t.name.substr(0, t.name.size() - 12))) << t.name;
      ++is_seen;
    }
  EXPECT_EQ(is_seen, L * E * 3);
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir / "plain")) {
    const auto p = slurp(f.path()), q = slurp(dir / "cal" / f.path().filename());
    ASSERT_EQ(p.size(), q.size()) << f.path().filename();
    ++files;
    const std::string fname = f.path().filename().string();
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == q[i]) continue;
      // A differing byte must lie inside an input_scale tensor's data of this shard.
      bool inside = false;
      for (const auto& t : a->tensors())
        if (fs::path(a->shards()[size_t(t.shard)].path).filename() == fname && i >= t.file_offset && i < t.file_offset + t.nbytes)
          inside = t.name.find(".input_scale") != std::string::npos;
      ASSERT_TRUE(inside) << fname << " byte " << i << " differs outside any input_scale";
    }
  }
  EXPECT_GE(files, 4);
  // An incomplete map is refused before anything is written.
  auto partial = *scales;
  partial.erase("layers.3.ffn.experts.7.w2");
  auto rp = cast_checkpoint_to_nvfp4(test::tiny_dir().string(), (dir / "partial").string(), {}, partial);
  ASSERT_FALSE(rp.ok());
  EXPECT_NE(rp.error().message.find("layers.3.ffn.experts.7.w2"), std::string::npos) << rp.error().message;
  EXPECT_FALSE(fs::exists(dir / "partial" / "model.safetensors.index.json"));
}

TEST(Nvfp4Calibration, UnreachedExpertsTakeTheLayersLargest) {
  // One synthetic token per layer routed to experts 0..K-1 (ModelOpt's fallback for the others:
  // the largest amax of the same projection among the layer's calibrated experts).
  auto ck = gguf::SafetensorsCheckpoint::open(test::tiny_dir().string());
  ASSERT_TRUE(ck.ok());
  auto model = Dsv4Model::open(test::tiny_dir().string(), ModelOptions{});
  ASSERT_TRUE(model.ok());
  const ModelConfig& c = (*model)->config();
  auto m = ExpertInputMaxima::create(c, *ck, 1);
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto none = m->input_scales();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("layer 0: no calibration token"), std::string::npos) << none.error().message;
  const int K = c.n_expert_used;
  std::vector<float> x(static_cast<size_t>(c.dim));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 7) - 3) * 0.25f;  // max |x| = 0.75
  std::vector<int32_t> ids(static_cast<size_t>(K));
  std::vector<float> w(size_t(K), 0.5f);
  for (int k = 0; k < K; ++k) ids[size_t(k)] = k;
  for (int l = 0; l < c.n_layer; ++l) m->add(l, 1, x, ids, w);
  int filled = 0;
  auto s = m->input_scales(&filled);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(filled, 3 * (c.n_expert - K) * c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    float top = 0;
    for (int e = 0; e < K; ++e) top = std::max(top, m->amax_mid(l, e));
    for (int e = 0; e < c.n_expert; ++e) {
      const std::string b = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w";
      EXPECT_EQ(s->at(b + "1"), 0.75f / 2688.0f) << b;
      EXPECT_EQ(s->at(b + "2"), (e < K ? m->amax_mid(l, e) : top) / 2688.0f) << b;
      EXPECT_EQ(m->routed(l, e), e < K ? 1 : 0);
    }
  }
}

}  // namespace
}  // namespace ds4
