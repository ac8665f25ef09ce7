// cuda_emu_tp_test (label emu): tensor parallelism on the CUDA backend (kernels/cuda compiled as
// host C++ against tests/cuda_emu: 4 emulated GPUs, NCCL in process; DS4_CUDA_EMU_DEVICES=4 from
// CMake). One rank per emulated GPU; the collectives are ncclAllGather (+ the ordered-sum kernel)
// enqueued on each rank's compute stream.
// - The device collectives alone: all_gather / all_reduce_sum at R = 2, 3, 4 give the bits of
//   comm::ordered_sum_f32 over the ranks' inputs (the CPU group's definition).
// - The dsv4-tiny fixture at tp 2 and 4, experts resident (no --plan: every rank uploads the
//   experts it owns) and staged (a --plan written here: a third of the experts in VRAM, the rest
//   staged from pinned or pageable host memory, owners interleaved over the ranks): prefill + greedy
//   tokens equal the CPU backend's; the decode steps' bytes per tier (Model::device_tier_traffic,
//   summed over ranks, and each rank's device counters) equal the plan's bookkeeping for the CPU
//   run's routing (placement::plan_bytes_for_routing) plus the non-expert bytes the CPU backend's
//   run at the same tp read.
// - Split staging (a --plan whose layers 1, 3, 4, 5 are Split: their Host experts computed by
//   every rank from its row slices, h all-gathered), tp 2 (Q8_1 activations) and 4 (F32): tokens
//   and every step's logits bits equal the CPU backend's; each rank's copy engine moved exactly
//   its plan link bytes (1/R of every split expert, whole experts of whole layers by their owner).
// - NVMe experts at tp 2 (tiers V / H / N, the split layers as above: each rank reads its row
//   slices of a split NVMe expert with its own reader, whole layers' NVMe experts are read by
//   their owner): tokens and logits bits equal the CPU backend's, each rank's copy engine moved its
//   plan link bytes, and the store's bytes_nvme_to_device equal the plan's NVMe bytes.
// - --experts-tier host and nvme at tp 2 (no plan; every expert staged, default owners): tokens
//   and logits bits equal the CPU backend's, each rank stages the bytes of the routed experts it
//   owns, the NVMe tier's store read every routed expert once.
// - The hash-layer prefetch: each rank's split slices bound at the steps' start and the steps
//   whose prefetch the 24-slot ring cut short (WeightTraffic::prefetched_slices_by_rank,
//   prefetch_ring_stops_by_rank) equal what the routing and the plan imply (hash layer 1 is Split
//   in the split plans), and no staging slot is refilled before its reader is queued.
// - Two emulator seeds (random stream interleavings and delays) give the same logits bits.
// - Abort with a graph region that captured a collective: the region is dropped, not launched.
// - One rank's NVMe read error at tp 2 (the file cut after load): the NCCL group is aborted, eval
//   returns that rank's error naming the file instead of hanging, and once the file is restored
//   the same session gives the CPU backend's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/dsv4_model.h"
#include "gguf/gguf_file.h"
#include "golden_data.h"
#include "kernels/comm.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "placement/plan_file.h"
#include "support/expert_cut.h"
#include "support/test_env.h"
#include "tests/cuda_engine/emu_cuda_factory.h"
#include "tests/cuda_engine/emu_greedy.h"
#include "tests/cuda_engine/emu_plan.h"

namespace ds4 {
namespace {

constexpr int kPrompt = 4;  // prompt tokens (the emulator is slow)
constexpr int kGen = 6;     // greedy tokens: the first from the prefill, then kGen - 1 decode steps

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// ---- the device collectives ------------------------------------------------------------------

TEST(CudaEmuTp, DeviceCollectivesGiveTheCpuGroupsBits) {
  ASSERT_GE(cuda::cuda_device_count(), 4) << "expected DS4_CUDA_EMU_DEVICES=4 (CMake sets it)";
  for (int R : {2, 3, 4}) {
    std::vector<std::unique_ptr<dev::Device>> devs;
    for (int r = 0; r < R; ++r) devs.push_back(dev::make_device(dev::BackendKind::Cuda, 1, r));
    std::vector<int> ords;
    for (int r = 0; r < R; ++r) ords.push_back(r);
    auto g = comm::make_nccl_group(ords);
    ASSERT_TRUE(g.ok()) << g.error().message;
    for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{65537}}) {
      // Inputs with sums whose value depends on the order (mixed magnitudes and signs).
      std::vector<std::vector<float>> in(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(count)));
      std::mt19937 rng(uint32_t(R * 7919 + count));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (int r = 0; r < R; ++r)
        for (float& x : in[size_t(r)]) x = u(rng) * (r % 2 ? 1e-3f : 1e4f);
      std::vector<float> gathered, want(static_cast<size_t>(count));
      for (int r = 0; r < R; ++r) gathered.insert(gathered.end(), in[size_t(r)].begin(), in[size_t(r)].end());
      comm::ordered_sum_f32(gathered.data(), R, count, want.data());
      std::vector<std::vector<float>> got_gather(static_cast<size_t>(R)), got_sum(static_cast<size_t>(R));
      std::vector<std::string> err(static_cast<size_t>(R));
      auto rank = [&](int r) {
        dev::Device& d = *devs[size_t(r)];
        const uint64_t b = uint64_t(count) * 4;
        auto sb = d.alloc(b), rb = d.alloc(b * uint64_t(R));
        const dev::Tensor src{sb.get(), 0, GgmlType::F32, count, 1, 1, b, b};
        const dev::Tensor recv{rb.get(), 0, GgmlType::F32, count, R, 1, b, b * uint64_t(R)};
        d.upload(d.stream(), src, in[size_t(r)].data(), b);
        if (auto e = d.all_gather(d.stream(), *(*g)[size_t(r)], src, recv); !e.ok()) err[size_t(r)] = e.error().message;
        if (auto e = d.all_reduce_sum(d.stream(), *(*g)[size_t(r)], src); !e.ok()) err[size_t(r)] = e.error().message;
        got_gather[size_t(r)].resize(size_t(count) * size_t(R));
        got_sum[size_t(r)].resize(size_t(count));
        d.download(d.stream(), recv, got_gather[size_t(r)].data(), b * uint64_t(R));
        d.download(d.stream(), src, got_sum[size_t(r)].data(), b);
      };
      std::vector<std::thread> ts;
      for (int r = 1; r < R; ++r) ts.emplace_back(rank, r);
      rank(0);
      for (auto& t : ts) t.join();
      for (int r = 0; r < R; ++r) {
        EXPECT_EQ(err[size_t(r)], "") << "R=" << R << " rank " << r;
        EXPECT_TRUE(same_bits(got_gather[size_t(r)], gathered)) << "all_gather R=" << R << " count " << count << " rank " << r;
        EXPECT_TRUE(same_bits(got_sum[size_t(r)], want)) << "all_reduce_sum R=" << R << " count " << count << " rank " << r;
      }
    }
  }
  // A CPU group's endpoint is refused by name (the device needs NCCL's).
  auto d = dev::make_device(dev::BackendKind::Cuda, 1, 0);
  auto cpu = comm::make_cpu_group(2);
  auto buf = d->alloc(16);
  const dev::Tensor t{buf.get(), 0, GgmlType::F32, 4, 1, 1, 16, 16};
  auto e = d->all_reduce_sum(d->stream(), *cpu[0], t);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("expected an NCCL rank endpoint"), std::string::npos) << e.error().message;
}

// A graph region (a decode step's, Forward::set_graphs) that captured an ncclAllGather while
// another rank aborted the group is dropped at its end, not launched (the captured collective
// names a communicator ncclCommAbort freed: use after free on real NCCL); the rank's next
// collective returns kAbortedMessage. After rearm() regions with collectives launch and give
// the gathered bits again.
TEST(CudaEmuTp, AbortDropsAGraphRegionHoldingACollectiveAndRearmRestores) {
  constexpr int R = 2;
  constexpr int64_t count = 1000;
  constexpr uint64_t b = uint64_t(count) * 4;
  std::vector<std::unique_ptr<dev::Device>> devs;
  for (int r = 0; r < R; ++r) devs.push_back(dev::make_device(dev::BackendKind::Cuda, 1, r));
  const std::vector<int> ords{0, 1};
  auto g = comm::make_nccl_group(ords);
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::vector<std::vector<float>> in(R, std::vector<float>(size_t(count)));
  std::vector<float> gathered;
  for (int r = 0; r < R; ++r) {
    for (int64_t i = 0; i < count; ++i) in[size_t(r)][size_t(i)] = float(r * 10000 + i);
    gathered.insert(gathered.end(), in[size_t(r)].begin(), in[size_t(r)].end());
  }
  std::vector<std::unique_ptr<dev::Buffer>> sb, rb;
  std::vector<dev::Tensor> src, recv;
  for (int r = 0; r < R; ++r) {
    dev::Device& d = *devs[size_t(r)];
    sb.push_back(d.alloc(b));
    rb.push_back(d.alloc(b * R));
    src.push_back(dev::Tensor{sb.back().get(), 0, GgmlType::F32, count, 1, 1, b, b});
    recv.push_back(dev::Tensor{rb.back().get(), 0, GgmlType::F32, count, R, 1, b, b * R});
    d.upload(d.stream(), src.back(), in[size_t(r)].data(), b);
  }
  dev::Device& d0 = *devs[0];
  ASSERT_TRUE(d0.begin_graph(d0.stream(), 7)) << "graph regions are off (DS4_CUDA_CHECK_NAN?)";
  ASSERT_TRUE(d0.all_gather(d0.stream(), *(*g)[0], src[0], recv[0]));  // captured, not queued
  (*g)[1]->abort();  // rank 1 fails
  d0.end_graph(d0.stream());
  EXPECT_EQ(d0.graph_stats().discarded, 1u);
  EXPECT_EQ(d0.graph_stats().launches, 0u);
  auto e = d0.all_gather(d0.stream(), *(*g)[0], src[0], recv[0]);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, comm::kAbortedMessage);
  d0.synchronize(d0.stream());  // nothing of the group waits on the stream
  (*g)[0]->rearm();
  std::vector<std::vector<float>> got(R, std::vector<float>(size_t(count * R)));
  std::vector<std::string> err(R);
  auto rank = [&](int r) {
    dev::Device& d = *devs[size_t(r)];
    if (!d.begin_graph(d.stream(), 7)) err[size_t(r)] = "no region";
    if (auto x = d.all_gather(d.stream(), *(*g)[size_t(r)], src[size_t(r)], recv[size_t(r)]); !x)
      err[size_t(r)] = x.error().message;
    d.end_graph(d.stream());
    d.download(d.stream(), recv[size_t(r)], got[size_t(r)].data(), b * R);
  };
  std::thread t1(rank, 1);
  rank(0);
  t1.join();
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(err[size_t(r)], "") << "rank " << r;
    EXPECT_TRUE(same_bits(got[size_t(r)], gathered)) << "rank " << r << ": gathered bits after rearm";
  }
  EXPECT_EQ(d0.graph_stats().launches, 1u);
  EXPECT_EQ(d0.graph_stats().discarded, 1u);
}

// ---- the model at tp 2 and 4 -----------------------------------------------------------------

/// One greedy run: the tokens, every step's logits, the router trace, and the counters over the
/// decode steps (after the prefill): per rank device tiers, their sum as the model reports it, and
/// the engine's weight bytes.
struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [step] last-position logits
  ForwardTrace trace;
  std::vector<dev::WeightTierBytes> rank_tiers;  // [rank] decode-step differences
  DeviceTierTraffic tiers;                       // decode-step differences, summed over ranks
  std::vector<RankDeviceCounters> ranks;         // [rank] Model::rank_device_counters differences
  WeightTraffic traffic;                         // decode-step differences
  uint64_t nvme_to_device = 0;                   // the store's bytes_nvme_to_device, decode steps
  std::vector<uint64_t> prefetched_slices;       // [rank] split slices bound at the steps' start, all steps
  std::vector<uint64_t> prefetch_ring_stops;     // [rank] steps whose hash-layer prefetch the ring cut short
  std::vector<dev::StagedBindStats> bind_stats;  // [rank] the device's staged binds, all steps
  ModelConfig config;
  bool has_plan = false;  // the model carried a plan file
  double seconds = 0;
};

const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> p = emu_test::golden_prompt(kPrompt);
  return p;
}

GenRun generate(const std::string& backend, int tp, const std::string& plan, Activations act = Activations::F32,
                const std::string& tier = "") {
  GenRun r;
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<Dsv4Model> m = emu_test::open_tiny(backend, tp, plan, act, tier);
  if (!m) return r;
  r.config = m->config();
  r.has_plan = m->expert_plan() != nullptr;
  {
    Dsv4Session s(m);
    std::vector<dev::WeightTierBytes> t0r;  // the counters after the prefill
    DeviceTierTraffic d0;
    std::vector<RankDeviceCounters> k0;
    WeightTraffic w0;
    uint64_t n0 = 0;
    emu_test::greedy(s, prompt(), kGen, &r.trace, r.tokens, r.logits, [&] {
      n0 = m->expert_counters().bytes_nvme_to_device;
      for (int k = 0; k < tp; ++k) t0r.push_back(m->device(k).weight_tier_bytes());
      d0 = m->device_tier_traffic();
      k0 = m->rank_device_counters();
      w0 = s.weight_traffic();
    });
    for (int k = 0; k < tp; ++k) {
      const dev::WeightTierBytes a = t0r[size_t(k)], b = m->device(k).weight_tier_bytes();
      r.rank_tiers.push_back({b.device_resident - a.device_resident, b.staged - a.staged, b.host - a.host,
                              b.h2d_persistent - a.h2d_persistent, b.h2d_staged - a.h2d_staged});
    }
    const DeviceTierTraffic d1 = m->device_tier_traffic();
    const std::vector<RankDeviceCounters> k1 = m->rank_device_counters();
    EXPECT_EQ(k0.size(), size_t(tp));
    EXPECT_EQ(k1.size(), size_t(tp));
    for (size_t k = 0; k < k1.size() && k < k0.size(); ++k) {
      const DeviceTierTraffic &a = k0[k].tiers, &b = k1[k].tiers;
      r.ranks.push_back({{b.device_resident - a.device_resident, b.staged - a.staged, b.host - a.host,
                          b.h2d_staged - a.h2d_staged},
                         k1[k].link.since(k0[k].link)});
    }
    r.tiers = {d1.device_resident - d0.device_resident, d1.staged - d0.staged, d1.host - d0.host,
               d1.h2d_staged - d0.h2d_staged};
    r.nvme_to_device = m->expert_counters().bytes_nvme_to_device - n0;
    const WeightTraffic w1 = s.weight_traffic();
    r.traffic.total = w1.total - w0.total;
    r.traffic.routed_experts = w1.routed_experts - w0.routed_experts;
    for (size_t k = 0; k < w1.staged_by_rank.size() && k < w0.staged_by_rank.size(); ++k)
      r.traffic.staged_by_rank.push_back(w1.staged_by_rank[k] - w0.staged_by_rank[k]);
    r.prefetched_slices = w1.prefetched_slices_by_rank;
    r.prefetch_ring_stops = w1.prefetch_ring_stops_by_rank;
    for (int k = 0; k < tp; ++k) r.bind_stats.push_back(m->device(k).staged_bind_stats());
  }
  r.seconds = secs_since(t0);
  return r;
}

/// The CPU backend's run at tp `tp` (the reference tokens, routing and non-expert bytes).
const GenRun& cpu_run(int tp, Activations act = Activations::F32) {
  static std::map<std::pair<int, Activations>, GenRun> runs;
  if (!runs.count({tp, act})) runs.emplace(std::make_pair(tp, act), generate("cpu", tp, "", act));
  return runs.at({tp, act});
}

/// The decode steps' routing of `r` (positions kPrompt .. kPrompt + kGen - 2) as routes[l][t].
std::vector<std::vector<std::vector<int32_t>>> decode_routes(const GenRun& r) {
  std::vector<std::vector<std::vector<int32_t>>> routes;
  for (const auto& layer : r.trace.router) {
    EXPECT_EQ(layer.size(), size_t(kPrompt + kGen - 1));
    routes.emplace_back(layer.begin() + std::min<size_t>(kPrompt, layer.size()), layer.end());
  }
  return routes;
}

/// Experts owned by rank (l + e / 2) % R: neighbours on different ranks, every rank some of each tier.
int interleaved_owner(int l, int e, int R) { return (l + e / 2) % R; }

/// Layers of the split-staging plans: 1, 3, 4, 5 split, 0 and 2 whole (the hash layers' staged
/// experts, whole ones of 0 and 2 and every rank's slices of 1's split ones, are bound at the
/// step's start while the ring holds them: expected_prefetch).
bool split_layer(int l) { return l % 2 == 1 || l == 4; }

/// Tiers of the NVMe plans: V (VRAM), H (pinned host), N (NVMe, staged) in turn.
char nvme_tier(int l, int e) { return "VHN"[(l + e) % 3]; }

/// What the hash-layer prefetch (Forward::prefetch_hash_layers) of rank `rank` of `tp` does over
/// the run's steps (the prefill, then one position each) for routing `t`, the plan of plan_for
/// (split layers when `split`, NVMe tiers when `nvme`) and a staging ring of `ring` slots: per
/// step, hash layers in order, a layer's staged binds (3 per whole staged expert the rank owns,
/// 3 per split expert: its rank slices) are made at the step's start while the ring holds them
/// on top of the earlier layers'; a layer that does not fit stops the prefetch (a ring stop), as
/// does a whole expert whose bytes do not persist (NVMe). Returns {slices, ring stops}.
std::pair<uint64_t, uint64_t> expected_prefetch(const ForwardTrace& t, int rank, int tp, bool split, bool nvme,
                                                int n_hash, int ring) {
  std::pair<uint64_t, uint64_t> x{0, 0};
  std::vector<std::pair<size_t, size_t>> steps{{0, kPrompt}};
  for (size_t p = kPrompt; p < size_t(kPrompt + kGen - 1); ++p) steps.push_back({p, p + 1});
  for (const auto& [p0, p1] : steps) {
    int binds = 0;
    for (int l = 0; l < n_hash && l < int(t.router.size()); ++l) {
      std::set<int32_t> whole, sliced;
      bool persists = true;
      for (size_t p = p0; p < p1 && p < t.router[size_t(l)].size(); ++p)
        for (int32_t e : t.router[size_t(l)][p]) {
          const char tier = nvme ? nvme_tier(l, e) : emu_test::tier_of(l, e);
          if (tier == 'V') continue;  // resident: bound persistent, never staged
          if (tp > 1 && split && split_layer(l)) {
            sliced.insert(e);
          } else if (interleaved_owner(l, e, tp) == rank) {
            whole.insert(e);
            persists = persists && tier != 'N';
          }
        }
      if (!persists) break;
      if (whole.empty() && sliced.empty()) continue;
      const int need = 3 * int(whole.size() + sliced.size());
      if (binds + need > ring) {
        ++x.second;
        break;
      }
      binds += need;
      x.first += 3 * sliced.size();
    }
  }
  return x;
}

/// The staged plan for `tp` ranks (split_layer's layers Split when `split`; tiers V / H / P, or
/// V / H / N when `nvme`).
std::string plan_for(int tp, bool split = false, bool nvme = false) {
  const std::string model = test::tiny_gguf().string();
  ModelOptions o;
  o.backend = "cpu";
  auto m = Dsv4Model::open(model, o);
  EXPECT_TRUE(m.ok());
  if (!m.ok()) return "";
  const ModelConfig& c = (*m)->config();
  return emu_test::write_plan(c, emu_test::expert_bytes_from_header(model, c.n_layer), tp,
                              [tp](int l, int e) { return interleaved_owner(l, e, tp); },
                              std::string(nvme ? "cuda_emu_tp_nvme_" : split ? "cuda_emu_tp_split_" : "cuda_emu_tp_") +
                                  std::to_string(tp),
                              nullptr, nullptr, 0, 0, 0, split ? split_layer : std::function<bool(int)>{},
                              nvme ? nvme_tier : std::function<char(int, int)>{});
}

void check_resident(int tp) {
  const GenRun& cpu = cpu_run(tp);
  ASSERT_EQ(cpu.tokens.size(), size_t(kGen));
  const GenRun r = generate("cuda", tp, "");
  EXPECT_EQ(r.tokens, cpu.tokens) << "tp " << tp;
  EXPECT_EQ(r.trace.router, cpu.trace.router) << "tp " << tp;
  // Every weight byte of the decode steps read from device memory: the CPU run's bytes at this tp.
  EXPECT_GT(cpu.traffic.routed_experts, 0u);
  EXPECT_EQ(r.traffic.total, cpu.traffic.total);
  EXPECT_EQ(r.tiers.device_resident, cpu.traffic.total) << "tp " << tp;
  EXPECT_EQ(r.tiers.staged, 0u);
  EXPECT_EQ(r.tiers.h2d_staged, 0u);
  EXPECT_EQ(r.tiers.host, 0u);
  std::printf("  tp %d resident: %.1f s; decode bytes/token %.0f from device memory\n", tp, r.seconds,
              double(r.tiers.device_resident) / (kGen - 1));
}

/// Runs tp `tp` with the staged plan (split staging in split_layer's layers when `split`; NVMe
/// experts instead of pageable host ones when `nvme`) and activations `act`; checks tokens, logits
/// bits and bytes against the CPU backend's run at `act`; returns the run (seed checks).
GenRun check_staged(int tp, bool split = false, Activations act = Activations::F32, bool nvme = false) {
  const GenRun& cpu = cpu_run(tp, act);
  const std::string plan = plan_for(tp, split, nvme);
  GenRun r = generate("cuda", tp, plan, act);
  EXPECT_TRUE(r.has_plan) << "expected the model to carry the --plan file";
  if (!r.has_plan) return r;
  EXPECT_EQ(r.tokens, cpu.tokens) << "tp " << tp;
  EXPECT_EQ(r.trace.router, cpu.trace.router) << "tp " << tp;
  EXPECT_EQ(r.logits.size(), cpu.logits.size());
  for (size_t i = 0; i < r.logits.size() && i < cpu.logits.size(); ++i)
    EXPECT_TRUE(same_bits(r.logits[i], cpu.logits[i])) << "tp " << tp << " step " << i << ": logits bits";
  // The plan's bookkeeping for the CPU run's decode routing, the plan read back by the reader.
  const ModelConfig& c = r.config;
  auto pf = placement::read_plan_file(plan, c.n_layer, c.n_expert, c.n_expert_used);
  EXPECT_TRUE(pf.ok()) << (pf.ok() ? "" : pf.error().message);
  if (!pf.ok()) return r;
  const std::string model = test::tiny_gguf().string();
  const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(model, pf->plan.n_layers);
  const placement::TierBytes b =
      placement::plan_bytes_for_routing(pf->plan, eb, 1, std::vector<int>(size_t(tp), 0), decode_routes(cpu));
  EXPECT_GT(b.vram_total(), 0) << "expected the routing to use resident experts";
  EXPECT_GT(b.link_total(), 0) << "expected the routing to use staged experts";
  if (split) {  // the routing reaches split experts: the split bookkeeping differs from whole mode's
    placement::Plan whole = pf->plan;
    whole.mode.assign(whole.mode.size(), placement::StageMode::Whole);
    EXPECT_NE(placement::plan_bytes_for_routing(whole, eb, 1, std::vector<int>(size_t(tp), 0), decode_routes(cpu)).link,
              b.link);
  }
  if (nvme) {  // the store's NVMe bytes: the plan's link bytes of its N experts alone
    placement::Plan n = pf->plan;
    for (int l = 0; l < n.n_layers; ++l)
      for (int e = 0; e < int(n.experts[size_t(l)].size()); ++e)
        if (nvme_tier(l, e) != 'N') n.experts[size_t(l)][size_t(e)].tier = placement::Tier::Vram;
    const placement::TierBytes bn =
        placement::plan_bytes_for_routing(n, eb, 1, std::vector<int>(size_t(tp), 0), decode_routes(cpu));
    EXPECT_GT(bn.nvme, 0) << "expected the routing to reach NVMe experts";
    EXPECT_EQ(double(r.nvme_to_device), bn.nvme) << "tp " << tp << ": bytes_nvme_to_device";
    EXPECT_EQ(b.nvme, bn.nvme);
    if (split) {
      placement::Plan whole = n;
      whole.mode.assign(whole.mode.size(), placement::StageMode::Whole);
      EXPECT_NE(placement::plan_bytes_for_routing(whole, eb, 1, std::vector<int>(size_t(tp), 0), decode_routes(cpu)).link,
                bn.link)
          << "expected the routing to reach split NVMe experts";
    }
  }
  EXPECT_EQ(double(cpu.traffic.routed_experts), b.vram_total() + b.link_total()) << "the CPU run vs its routing";
  const double dense = double(cpu.traffic.total - cpu.traffic.routed_experts);
  EXPECT_EQ(double(r.tiers.staged), b.link_total()) << "tp " << tp;
  EXPECT_EQ(double(r.tiers.h2d_staged), b.link_total()) << "tp " << tp;
  EXPECT_EQ(double(r.tiers.device_resident), dense + b.vram_total()) << "tp " << tp;
  EXPECT_EQ(r.tiers.host, 0u);
  EXPECT_EQ(r.tiers.device_resident + r.tiers.staged, r.traffic.total);
  // Per rank: each rank stages exactly the bytes of the staged experts it owns.
  EXPECT_EQ(r.rank_tiers.size(), size_t(tp));
  if (r.rank_tiers.size() != size_t(tp)) return r;
  for (int k = 0; k < tp; ++k) {
    EXPECT_EQ(double(r.rank_tiers[size_t(k)].staged), b.link[size_t(k)]) << "tp " << tp << " rank " << k;
    EXPECT_EQ(double(r.rank_tiers[size_t(k)].h2d_staged), b.link[size_t(k)]) << "tp " << tp << " rank " << k;
    EXPECT_EQ(k < int(r.traffic.staged_by_rank.size()) ? double(r.traffic.staged_by_rank[size_t(k)]) : -1.0,
              b.link[size_t(k)])
        << "tp " << tp << " rank " << k << ": the engine's staged bytes";
  }
  // Model::rank_device_counters (what bench prints per GPU): the devices' tiers, summing to the
  // model's totals; each rank's copy engine moved (and timed) exactly its staged experts' bytes.
  EXPECT_EQ(r.ranks.size(), size_t(tp));
  if (r.ranks.size() != size_t(tp)) return r;
  DeviceTierTraffic sum;
  for (int k = 0; k < tp; ++k) {
    const RankDeviceCounters& q = r.ranks[size_t(k)];
    EXPECT_EQ(q.tiers.staged, r.rank_tiers[size_t(k)].staged) << "rank " << k;
    EXPECT_EQ(q.tiers.device_resident, r.rank_tiers[size_t(k)].device_resident) << "rank " << k;
    sum.device_resident += q.tiers.device_resident;
    sum.staged += q.tiers.staged;
    sum.h2d_staged += q.tiers.h2d_staged;
    EXPECT_TRUE(q.link.measured) << "rank " << k;
    EXPECT_EQ(double(q.link.bytes), b.link[size_t(k)]) << "tp " << tp << " rank " << k << ": copy-engine bytes";
    if (b.link[size_t(k)] > 0) {
      EXPECT_GT(q.link.copies, 0u) << "rank " << k;
      EXPECT_TRUE(q.link.has_overlap()) << "rank " << k;
      EXPECT_GE(q.link.overlap(), 0.0);
      EXPECT_LE(q.link.overlap(), 1.0);
    }
  }
  EXPECT_EQ(sum.device_resident, r.tiers.device_resident);
  EXPECT_EQ(sum.staged, r.tiers.staged);
  EXPECT_EQ(sum.h2d_staged, r.tiers.h2d_staged);
  // The hash-layer prefetch: the split slices each rank bound at the steps' start (before the
  // first layer) and the steps the ring cut short, as the routing and the plan imply (ring: the
  // device's default 24 slots); a split plan's hash layer 1 is prefetched in some step.
  EXPECT_EQ(r.prefetched_slices.size(), size_t(tp));
  EXPECT_EQ(r.prefetch_ring_stops.size(), size_t(tp));
  uint64_t slices = 0;
  for (int k = 0; k < tp && k < int(r.prefetched_slices.size()) && k < int(r.prefetch_ring_stops.size()); ++k) {
    const auto [xs, xstops] = expected_prefetch(cpu.trace, k, tp, split, nvme, c.n_hash_layers, 24);
    EXPECT_EQ(r.prefetched_slices[size_t(k)], xs) << "tp " << tp << " rank " << k << ": split slices prefetched";
    EXPECT_EQ(r.prefetch_ring_stops[size_t(k)], xstops) << "tp " << tp << " rank " << k << ": prefetch ring stops";
    slices += r.prefetched_slices[size_t(k)];
  }
  if (split) {
    EXPECT_GT(slices, 0u) << "expected a hash layer's split slices bound at a step's start";
  }
  // No staging slot (a prefetched slice's included) refilled before its reader was queued.
  for (size_t k = 0; k < r.bind_stats.size(); ++k)
    EXPECT_EQ(r.bind_stats[k].overwritten_unread, 0u) << "tp " << tp << " rank " << k;
  if (!split) {
    EXPECT_EQ(slices, 0u);
  }
  uint64_t stops = 0;
  for (uint64_t v : r.prefetch_ring_stops) stops += v;
  std::printf("  tp %d staged%s%s%s: %.1f s; decode bytes/token: device %.0f (routed %.0f), staged %.0f; "
              "%llu split slices prefetched, %llu prefetch ring stops (all ranks, all steps)\n",
              tp, split ? " (split layers)" : "", act == Activations::Q8 ? ", q8" : "", nvme ? ", nvme" : "", r.seconds,
              double(r.tiers.device_resident) / (kGen - 1), b.vram_total() / (kGen - 1), b.link_total() / (kGen - 1),
              static_cast<unsigned long long>(slices), static_cast<unsigned long long>(stops));
  return r;
}

TEST(CudaEmuTp, Tp2ResidentExpertsGiveTheCpuTokens) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check_resident(2);
}

TEST(CudaEmuTp, Tp4ResidentExpertsGiveTheCpuTokens) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check_resident(4);
}

TEST(CudaEmuTp, Tp2StagedExpertsGiveTheCpuTokensAndThePlansBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check_staged(2);
}

// tp 2 with Q8_1 activations (the h rows are quantized whole after the all-gather), tp 4 with F32.
TEST(CudaEmuTp, Tp2SplitStagingQ8GivesTheCpuBitsAndThePlansBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check_staged(2, true, Activations::Q8);
}

TEST(CudaEmuTp, Tp4SplitStagingGivesTheCpuBitsAndThePlansBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check_staged(4, true);
}

// NVMe experts (a third of them, staged; whole in layers 0 and 2, rank row slices read by each
// rank's own reader in the split layers): the CPU backend's bits, the plan's bytes per rank.
TEST(CudaEmuTp, Tp2NvmeExpertsGiveTheCpuBitsAndThePlansBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  check_staged(2, true, Activations::F32, true);
}

// --experts-tier host and nvme at tp 2 (every expert staged: host experts copied from their slabs,
// NVMe experts read by their owner's reader; no plan, default owners e*2/n_expert): the CPU
// backend's bits; each rank stages exactly the bytes of the routed experts it owns, the rest is
// the CPU run's non-expert bytes, and the NVMe tier's store read every routed expert once.
TEST(CudaEmuTp, Tp2ExpertsTierHostAndNvmeGiveTheCpuBitsAndTheTiersBytes) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  constexpr int tp = 2;
  const GenRun& cpu = cpu_run(tp);
  for (const char* tier : {"host", "nvme"}) {
    const GenRun r = generate("cuda", tp, "", Activations::F32, tier);
    ASSERT_FALSE(r.has_plan) << tier;
    EXPECT_EQ(r.tokens, cpu.tokens) << tier;
    EXPECT_EQ(r.trace.router, cpu.trace.router) << tier;
    ASSERT_EQ(r.logits.size(), cpu.logits.size()) << tier;
    for (size_t i = 0; i < r.logits.size(); ++i) EXPECT_TRUE(same_bits(r.logits[i], cpu.logits[i])) << tier << " step " << i;
    const ModelConfig& c = r.config;
    const std::vector<int64_t> eb = emu_test::expert_bytes_from_header(test::tiny_gguf().string(), c.n_layer);
    std::vector<uint64_t> owned(size_t(tp), 0);
    uint64_t all = 0;
    const auto routes = decode_routes(cpu);
    for (size_t l = 0; l < routes.size(); ++l)
      for (const auto& t : routes[l])
        for (int32_t e : t) {
          owned[size_t(e) * tp / size_t(c.n_expert)] += uint64_t(eb[l]);
          all += uint64_t(eb[l]);
        }
    ASSERT_GT(all, 0u);
    EXPECT_EQ(double(cpu.traffic.routed_experts), double(all)) << "the CPU run vs its routing";
    const uint64_t dense = cpu.traffic.total - cpu.traffic.routed_experts;
    EXPECT_EQ(r.tiers.staged, all) << tier;
    EXPECT_EQ(r.tiers.h2d_staged, all) << tier;
    EXPECT_EQ(r.tiers.device_resident, dense) << tier;
    EXPECT_EQ(r.nvme_to_device, std::string(tier) == "nvme" ? all : 0u) << tier << ": bytes_nvme_to_device";
    ASSERT_EQ(r.rank_tiers.size(), size_t(tp));
    ASSERT_EQ(r.traffic.staged_by_rank.size(), size_t(tp));
    for (int k = 0; k < tp; ++k) {
      EXPECT_EQ(r.rank_tiers[size_t(k)].h2d_staged, owned[size_t(k)]) << tier << " rank " << k;
      EXPECT_EQ(r.traffic.staged_by_rank[size_t(k)], owned[size_t(k)]) << tier << " rank " << k;
    }
    for (size_t k = 0; k < r.bind_stats.size(); ++k)
      EXPECT_EQ(r.bind_stats[k].overwritten_unread, 0u) << tier << " rank " << k;
    std::printf("  tp %d --experts-tier %s: %.1f s; decode bytes/token staged %.0f\n", tp, tier, r.seconds,
                double(all) / (kGen - 1));
  }
}

// tp 4 staged, under two emulator seeds (the random interleaving of streams and the start delays
// of the legacy stream): the same logits bits at every step.
TEST(CudaEmuTp, Tp4StagedExpertsGiveTheCpuTokensAndTheSameBitsUnderTwoSeeds) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  emu::set_seed(1);
  const GenRun a = check_staged(4);
  emu::set_seed(977);
  const GenRun b = generate("cuda", 4, plan_for(4));
  emu::set_seed(1);
  ASSERT_EQ(a.logits.size(), size_t(kGen));
  ASSERT_EQ(b.logits.size(), a.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) EXPECT_TRUE(same_bits(a.logits[i], b.logits[i])) << "step " << i;
  EXPECT_EQ(b.tokens, a.tokens);
  std::printf("  tp 4 staged, seed 977: %.1f s; logits bits equal seed 1's: %s\n", b.seconds,
              std::equal(a.logits.begin(), a.logits.end(), b.logits.begin(), same_bits) ? "yes" : "no");
}

// Each rank's device holds only its part of the tensor-parallel matrices (wq_b's heads, wo_a's
// and wo_b's groups, the indexer's heads, the head's vocabulary rows; token_embd stays whole) and
// its own experts: the load-time bytes of rank r at tp R equal tp 1's minus the experts other
// ranks own minus (R-1)/R of those matrices (every split is at a block boundary), counted here
// from the GGUF's tensors.
TEST(CudaEmuTp, RanksUploadOnlyTheirShardsAndExperts) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  auto open = [](int tp) { return emu_test::open_tiny("cuda", tp, ""); };
  const auto one = open(1);
  ASSERT_TRUE(one);
  const uint64_t all = one->device(0).weight_tier_bytes().h2d_persistent;
  const ModelConfig& c = one->config();
  const ModelWeights& w = one->weights();
  auto bytes = [](const dev::WeightMatrix& m) { return m.row_bytes * uint64_t(m.out); };
  uint64_t split = bytes(w.output);
  for (const LayerWeights& L : w.layers) {
    split += bytes(L.q_b) + bytes(L.out_a) + bytes(L.out_b);
    if (L.idx_q_b.data) split += bytes(L.idx_q_b) + bytes(L.idx_proj);
  }
  for (int tp : {2, 4}) {
    const auto m = open(tp);
    ASSERT_TRUE(m);
    for (int r = 0; r < tp; ++r) {
      uint64_t others = 0;
      for (int l = 0; l < c.n_layer; ++l)
        for (int e = 0; e < c.n_expert; ++e)
          if (!m->shard(r).owns_expert(l, e))
            for (auto p : {staging::ExpertProj::Gate, staging::ExpertProj::Up, staging::ExpertProj::Down}) {
              auto x = w.experts->get(l, e, p);
              ASSERT_TRUE(x.ok());
              others += bytes(*x);
            }
      EXPECT_EQ(m->device(r).weight_tier_bytes().h2d_persistent, all - others - split / tp * (tp - 1))
          << "tp " << tp << " rank " << r;
    }
  }
}

// One rank's NVMe expert read fails (the model file is cut after load; every expert is NVMe,
// the last layer's owned by rank 1, as tp_nvme_test's OneRanksReadErrorFailsTheEvalInsteadOfHanging
// on CPU ranks): rank 1 aborts the NCCL group (ncclCommAbort of every communicator), so rank 0's
// pending ncclAllGather ends and its host wait returns; eval reports rank 1's error naming the
// file, not kAbortedMessage, instead of hanging (on the emulator: its deadlock report, exit 134),
// twice. With the file restored, the same session (its group re-made by rearm) then gives the CPU
// backend's tokens and logits bits, as does a fresh session. A watchdog ends the process should
// an eval hang.
TEST(CudaEmuTp, Tp2OneRanksNvmeReadErrorFailsTheEvalAndTheSessionRecovers) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  const std::filesystem::path dir = test::scratch_dir("cuda_emu_tp_read_error");
  const std::filesystem::path copy = dir / "tiny.gguf";
  std::filesystem::copy_file(test::tiny_gguf(), copy, std::filesystem::copy_options::overwrite_existing);
  // The cut: where the expert tensors of the layer whose experts start last begin; everything
  // after it belongs to that layer's experts.
  const test::ExpertCut ec = test::last_layer_expert_cut(copy.string());
  ASSERT_GE(ec.layer, 0);
  const int last_layer = ec.layer;
  const uint64_t cut = ec.offset;
  const GenRun& cpu = cpu_run(2);
  ASSERT_EQ(cpu.tokens.size(), size_t(kGen));
  const ModelConfig& cfg = cpu.config;
  const std::string plan = emu_test::write_plan(
      cfg, emu_test::expert_bytes_from_header(copy.string(), cfg.n_layer), 2,
      [last_layer](int l, int) { return l == last_layer ? 1 : 0; }, "cuda_emu_tp_read_error_plan", nullptr, nullptr, 0,
      0, 0, {}, [](int, int) { return 'N'; });
  ModelOptions o;
  o.backend = "cuda";
  o.tp = 2;
  o.threads = 1;
  o.expert_plan = plan;
  auto m = Dsv4Model::open(copy.string(), o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  // Cut the file, keeping its tail to restore it.
  std::string tail;
  {
    std::ifstream in(copy, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(cut));
    tail.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(tail.size(), 0u);
  std::filesystem::resize_file(copy, cut);
  Dsv4Session s(*m);
  for (int call = 0; call < 2; ++call) {  // the group is re-armed, and fails the same way again
    std::promise<std::string> done;
    std::future<std::string> f = done.get_future();
    std::thread t([&] {
      std::vector<float> last;
      auto r = s.eval(prompt(), nullptr, &last);
      done.set_value(r.ok() ? std::string("ok") : r.error().message);
    });
    if (f.wait_for(std::chrono::seconds(600)) != std::future_status::ready) {
      std::fprintf(stderr, "FAILED: eval %d with one rank's read error still runs after 600 s (hangs)\n", call);
      std::fflush(stderr);
      std::_Exit(1);  // watchdog: the eval thread cannot be joined
    }
    t.join();
    const std::string msg = f.get();
    EXPECT_NE(msg, "ok") << "call " << call;
    EXPECT_EQ(msg.find(comm::kAbortedMessage), std::string::npos) << msg;  // the failing rank's own error
    EXPECT_NE(msg.find("tiny.gguf"), std::string::npos) << msg;             // names the file
    EXPECT_EQ(s.position(), 0) << "a failed eval must not move the session";
  }
  {
    std::ofstream out(copy, std::ios::binary | std::ios::app);
    out.write(tail.data(), static_cast<std::streamsize>(tail.size()));
  }
  ASSERT_EQ(std::filesystem::file_size(copy), cut + tail.size());
  // The same session, then a fresh one: the CPU backend's tokens and logits bits.
  for (int k = 0; k < 2; ++k) {
    Dsv4Session fresh(*m);
    Dsv4Session& ses = k == 0 ? s : fresh;
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;
    ForwardTrace trace;
    emu_test::greedy(ses, prompt(), kGen, &trace, tokens, logits);
    EXPECT_EQ(tokens, cpu.tokens) << (k == 0 ? "the failed session" : "a fresh session");
    ASSERT_EQ(logits.size(), cpu.logits.size());
    for (size_t i = 0; i < logits.size(); ++i)
      EXPECT_TRUE(same_bits(logits[i], cpu.logits[i])) << (k == 0 ? "the failed session" : "a fresh session")
                                                        << ", step " << i << ": logits bits";
  }
}

// Fewer GPUs than ranks: one clear error naming both counts.
TEST(CudaEmuTp, MoreRanksThanGpusIsRefused) {
  if (test::tiny_dir().empty()) GTEST_SKIP() << "fixture absent";
  ModelOptions o;
  o.backend = "cuda";
  o.tp = 8;
  auto m = Dsv4Model::open(test::tiny_gguf().string(), o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("expected 8 CUDA devices (one per rank), found 4"), std::string::npos)
      << m.error().message;
}

}  // namespace
}  // namespace ds4
