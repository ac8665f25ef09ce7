// cuda_emu_graphs_test (label emu): decode steps as CUDA graph regions (issue 20 item 3;
// dev::Device::begin_graph, kernels/cuda/graph_cuda.h, Forward::set_graphs) on the CUDA backend
// compiled against the emulation (tests/cuda_emu), whose stream capture runs nothing until the
// graph is launched and fails (aborting the backend) on any host wait inside a region.
// - Device level: ops queued in a region run only when it ends, with the by-value arguments of
//   their capture; the same key captured again with other values updates the executable graph
//   and runs the new values; a download inside a region aborts naming it.
// - The dsv4-tiny fixture: prefill + greedy tokens and every step's logits bits with graphs on
//   equal graphs off and the CPU backend's, at tp 1 and tp 2 (router and indexer traced, so the
//   compressed layers' regions are split around the indexer download). Each rank launched as
//   many graphs as the step structure implies (per decode step: one region per layer up to its
//   router, one per ratio-4 layer after the traced indexer download, one for the head; none in
//   the prefill), each launch either instantiated (a key's first region, or after a refused
//   update) or updated an executable graph, and the emulator counted those launches.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/dsv4_model.h"
#include "golden_data.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_cuda_factory.h"
#include "tests/cuda_engine/emu_greedy.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 4;  // prompt tokens (the emulator is slow)
constexpr int kGen = 4;     // greedy tokens: the first from the prefill, then kGen - 1 decode steps

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// ---- device level ------------------------------------------------------------------------------

TEST(CudaEmuGraphs, RegionRunsItsOpsWhenItEndsWithTheCapturedArguments) {
  auto d = dev::make_device(dev::BackendKind::Cuda, 1, 0);
  dev::OwnedTensor x = d->alloc_tensor(GgmlType::F32, 1000, 3);
  dev::Stream& s = d->stream();
  std::vector<float> got(3000);
  for (float v : {3.0f, 5.0f}) {
    ASSERT_TRUE(d->begin_graph(s, 7));
    d->fill(s, x.t, v);
    d->scale(s, x.t, 2.0f);
    d->end_graph(s);
    d->download(s, x.t, got.data(), got.size() * 4);
    EXPECT_EQ(got, std::vector<float>(3000, 2 * v));
  }
  const dev::GraphStats g = d->graph_stats();
  EXPECT_EQ(g.launches, 2u);
  EXPECT_EQ(g.instantiations, 1u);
  EXPECT_EQ(g.updates, 1u);  // the second capture's fill value went in by cudaGraphExecUpdate
  EXPECT_EQ(g.update_failures, 0u);
  EXPECT_EQ(dev::make_cpu_device(1)->begin_graph(dev::make_cpu_device(1)->stream(), 0), false);
}

TEST(CudaEmuGraphsDeathTest, ADownloadInsideARegionAbortsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto d = dev::make_device(dev::BackendKind::Cuda, 1, 0);
        dev::OwnedTensor x = d->alloc_tensor(GgmlType::F32, 16, 1);
        float h[16];
        d->begin_graph(d->stream(), 42);
        d->fill(d->stream(), x.t, 1.0f);
        d->download(d->stream(), x.t, h, sizeof h);
      },
      "download inside graph region 42");
}

// ---- the tiny model ----------------------------------------------------------------------------

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [step] last-position logits
  ForwardTrace trace;
  std::vector<dev::GraphStats> graphs;  // [rank]
  uint64_t emu_graph_launches = 0;      // the emulator's cudaGraphLaunch count during the run
  int layers = 0, ratio4_layers = 0;    // the model's
  /// Graph regions of one decode step on rank k: one per layer up to its router, one for the head,
  /// and on rank 0 (the rank that traces) one more per ratio-4 layer (split by the indexer download).
  int regions_per_step(int k) const { return layers + 1 + (k == 0 ? ratio4_layers : 0); }
};

GenRun generate(const std::string& backend, int tp, bool graphs) {
  GenRun r;
  ModelOptions o;
  o.backend = backend;
  o.tp = tp;
  o.threads = 1;
  o.cuda_graphs = graphs;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return r;
  const ModelConfig& c = (*m)->config();
  r.layers = c.n_layer;
  for (int l = 0; l < c.n_layer; ++l) r.ratio4_layers += c.ratio(l) == 4 ? 1 : 0;
  const uint64_t before = ds4::emu::stats().graph_launches;
  {
    Dsv4Session s(*m);
    emu_test::greedy(s, emu_test::golden_prompt(kPrompt), kGen, &r.trace, r.tokens, r.logits);
  }
  r.emu_graph_launches = ds4::emu::stats().graph_launches - before;
  for (int k = 0; k < tp; ++k) r.graphs.push_back((*m)->device(k).graph_stats());
  return r;
}

const GenRun& cpu_run() {
  static const GenRun r = generate("cpu", 1, true);
  return r;
}

void expect_same(const GenRun& got, const GenRun& want, const char* what) {
  ASSERT_EQ(got.tokens.size(), size_t(kGen)) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t i = 0; i < got.logits.size(); ++i) EXPECT_TRUE(same_bits(got.logits[i], want.logits[i])) << what << ": step " << i;
  EXPECT_EQ(got.trace.router, want.trace.router) << what;
  EXPECT_EQ(got.trace.indexer, want.trace.indexer) << what;
}

/// Each rank's counters for a run with graphs on: the launches the step structure implies.
void expect_graph_counts(const GenRun& r, int tp) {
  ASSERT_EQ(r.graphs.size(), size_t(tp));
  ASSERT_GT(r.ratio4_layers, 0) << "the fixture has compressed ratio-4 layers";
  uint64_t total = 0;
  for (int k = 0; k < tp; ++k) {
    const uint64_t want = uint64_t(kGen - 1) * uint64_t(r.regions_per_step(k));
    total += want;
    const dev::GraphStats& g = r.graphs[size_t(k)];
    EXPECT_EQ(g.launches, want) << "rank " << k;
    EXPECT_EQ(g.instantiations + g.updates, g.launches) << "rank " << k;
    EXPECT_EQ(g.instantiations, uint64_t(r.regions_per_step(k)) + g.update_failures) << "rank " << k;
    EXPECT_GT(g.updates, 0u) << "rank " << k;
    std::printf("rank %d: %llu graph launches, %llu instantiations, %llu updates (%llu refused)\n", k,
                static_cast<unsigned long long>(g.launches), static_cast<unsigned long long>(g.instantiations),
                static_cast<unsigned long long>(g.updates), static_cast<unsigned long long>(g.update_failures));
  }
  EXPECT_EQ(r.emu_graph_launches, total);
}

TEST(CudaEmuGraphs, Tp1GraphsOnEqualGraphsOffAndTheCpuBackend) {
  const GenRun& cpu = cpu_run();
  ASSERT_EQ(cpu.tokens.size(), size_t(kGen));
  EXPECT_EQ(cpu.graphs[0].launches, 0u);  // the CPU backend has no graphs
  const GenRun off = generate("cuda", 1, false);
  expect_same(off, cpu, "graphs off");
  EXPECT_EQ(off.graphs[0].launches, 0u);
  EXPECT_EQ(off.emu_graph_launches, 0u);
  const GenRun on = generate("cuda", 1, true);
  expect_same(on, cpu, "graphs on");
  expect_graph_counts(on, 1);
}

TEST(CudaEmuGraphs, Tp2GraphsOnEqualGraphsOffAndTheCpuBackend) {
  ASSERT_GE(cuda::cuda_device_count(), 2) << "expected DS4_CUDA_EMU_DEVICES >= 2 (CMake sets it)";
  const GenRun& cpu = cpu_run();  // every tp gives the tp 1 bits (engine/tensor_parallel.md)
  const GenRun off = generate("cuda", 2, false);
  expect_same(off, cpu, "tp 2, graphs off");
  const GenRun on = generate("cuda", 2, true);
  expect_same(on, cpu, "tp 2, graphs on");
  expect_graph_counts(on, 2);
}

}  // namespace
}  // namespace ds4
