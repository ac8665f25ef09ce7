// GPU part of a probed profile, built on the CPU from synthetic H2D probe results
// (placement/gpu_link_profile.h): two sockets with two GPUs each, local and remote figures; the
// hwloc locality match by PCI bus id (CUDA's spelling vs hwloc's); fallbacks; bad inputs; the
// estimate table; format_probe's GPU lines; and the probe's honest refusal on this build.
#include <gtest/gtest.h>

#include <cstdio>

#include "placement/gpu_estimates.h"
#include "placement/gpu_link_probe.h"
#include "placement/gpu_link_profile.h"
#include "placement/hw_probe.h"
#include "placement/hw_profile.h"
#include "staging/h2d_probe.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

constexpr int64_t kGiB = int64_t(1) << 30;

/// Two sockets; hwloc lists GPUs 3b, 5e on node 0 and 86, af on node 1 (lower-case, as hwloc
/// writes them), plus an NVMe on node 0.
Topology two_socket_topology() {
  Topology t;
  t.nodes = {{0, 512 * kGiB, 22}, {1, 512 * kGiB, 22}};
  auto gpu = [](const char* bus, int node) {
    PciDevice d{PciDevice::Kind::Gpu, bus, 0x10de, 0x1e07, node, 15.75};
    return d;
  };
  t.devices = {gpu("0000:3b:00.0", 0), gpu("0000:5e:00.0", 0), gpu("0000:86:00.0", 1), gpu("0000:af:00.0", 1),
               PciDevice{PciDevice::Kind::Nvme, "0000:d8:00.0", 0x144d, 0xa808, 0, 3.94}};
  return t;
}

staging::H2dLink link(int gpu, const char* bus, int node, double pinned, double pageable) {
  staging::H2dLink l;
  l.gpu = gpu;
  l.name = "NVIDIA GeForce RTX 2080 Ti";
  l.pci_bus_id = bus;
  l.vram_bytes = 22 * kGiB;
  l.numa_node = node;
  l.pinned_gbps = pinned;
  l.pageable_gbps = pageable;
  return l;
}

/// CUDA spells bus ids upper-case (and some drivers with an 8-digit domain). Local figures are
/// 11.5/11.4/11.3/11.2, remote ones 9.9/9.1 (the slowest)/9.8/9.7, pageable slowest 7.5.
staging::H2dProbeResult four_gpu_probe() {
  staging::H2dProbeResult r;
  r.links = {link(0, "0000:3B:00.0", 0, 11.5, 9.0), link(0, "0000:3B:00.0", 1, 9.9, 8.0),
             link(1, "0000:5E:00.0", 0, 11.4, 8.9), link(1, "0000:5E:00.0", 1, 9.1, 7.5),
             link(2, "00000000:86:00.0", 0, 9.8, 8.1), link(2, "00000000:86:00.0", 1, 11.3, 9.2),
             link(3, "0000:AF:00.0", 0, 9.7, 7.9), link(3, "0000:AF:00.0", 1, 11.2, 9.1)};
  r.all_gpus_gbps = 38.6;
  return r;
}

TEST(GpuLinkProfile, TwoSocketsFourGpusTakeLocalPinnedAndSlowestRemote) {
  auto g = gpu_profiles_from_h2d(four_gpu_probe(), two_socket_topology());
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_EQ(g->gpus.size(), 4u);
  const int want_node[4] = {0, 0, 1, 1};
  const double want_h2d[4] = {11.5, 11.4, 11.3, 11.2};
  const char* want_bus[4] = {"0000:3B:00.0", "0000:5E:00.0", "00000000:86:00.0", "0000:AF:00.0"};
  for (int i = 0; i < 4; ++i) {
    const GpuProfile& p = g->gpus[size_t(i)];
    EXPECT_EQ(p.numa_node, want_node[i]) << i;
    EXPECT_DOUBLE_EQ(p.h2d_gbps, want_h2d[i]) << i;
    EXPECT_EQ(p.pci_bus_id, want_bus[i]) << i;
    EXPECT_EQ(p.vram_bytes, 22 * kGiB) << i;
    EXPECT_EQ(p.name, "NVIDIA GeForce RTX 2080 Ti");
  }
  EXPECT_DOUBLE_EQ(g->h2d_aggregate_gbps, 38.6);
  EXPECT_DOUBLE_EQ(g->inter_socket_gbps, 9.1);
  EXPECT_DOUBLE_EQ(g->pageable_h2d_gbps, 7.5);
  EXPECT_TRUE(g->notes.empty());
  // The unmeasurable constants of a 2080 Ti are those of the shipped profile of that box.
  auto shipped = load_hw_profile((test::source_dir() / "configs/hw/4x2080ti-22g-pcie3-2s.json").string());
  ASSERT_TRUE(shipped.ok()) << shipped.error().message;
  for (const GpuProfile& p : g->gpus) {
    EXPECT_DOUBLE_EQ(p.vram_gbps, shipped->gpus[0].vram_gbps);
    EXPECT_DOUBLE_EQ(p.kernel_efficiency, shipped->gpus[0].kernel_efficiency);
    EXPECT_DOUBLE_EQ(p.tflops, shipped->gpus[0].tflops);
  }
  // Every estimated field is listed: four GPU lines and the runtime/all-reduce line.
  ASSERT_EQ(g->estimated.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_NE(g->estimated[size_t(i)].find("vram_gbps 616"), std::string::npos);
  EXPECT_NE(g->estimated[4].find("allreduce_gbps"), std::string::npos);

  // Into a profile: validated, and the JSON round trip keeps every GPU field.
  HwProfile p;
  p.name = "t";
  for (const auto& n : two_socket_topology().nodes) {
    NumaNodeProfile np;
    np.id = n.os_index;
    np.memory_bytes = n.memory_bytes;
    np.cores = n.cores;
    np.mem_read_gbps = 50;
    np.cpu_expert_gbps["default"] = 10;
    np.cpu_gflops = 100;
    p.nodes.push_back(np);
  }
  p.inter_socket_gbps = 16;
  p.pageable_h2d_gbps = 5;
  apply_gpu_link_profile(g.value(), &p);
  EXPECT_DOUBLE_EQ(p.inter_socket_gbps, 9.1);
  EXPECT_DOUBLE_EQ(p.pageable_h2d_gbps, 7.5);
  EXPECT_DOUBLE_EQ(p.h2d_aggregate_gbps, 38.6);
  EXPECT_EQ(p.vram_reserved_bytes, int64_t(700) << 20);
  ASSERT_TRUE(validate_hw_profile(p, "probed").ok());
  auto back = parse_hw_profile(hw_profile_to_json(p), "probed.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->gpus.size(), 4u);
  EXPECT_EQ(back->gpus[2].numa_node, 1);
  EXPECT_EQ(back->gpus[3].pci_bus_id, "0000:AF:00.0");
  EXPECT_DOUBLE_EQ(back->gpus[3].h2d_gbps, 11.2);
}

TEST(GpuLinkProfile, UnknownLocalityFallsBackToTheFirstNodeAndSaysSo) {
  Topology t = two_socket_topology();
  t.devices[2].numa_node = -1;  // hwloc does not know where 86 hangs
  auto g = gpu_profiles_from_h2d(four_gpu_probe(), t);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->gpus[2].numa_node, 0);
  EXPECT_DOUBLE_EQ(g->gpus[2].h2d_gbps, 9.8);  // node 0's figure, as the note says
  ASSERT_EQ(g->notes.size(), 1u);
  EXPECT_NE(g->notes[0].find("00000000:86:00.0"), std::string::npos) << g->notes[0];
  EXPECT_NE(g->notes[0].find("assumed node 0"), std::string::npos) << g->notes[0];
  // A bus id hwloc never listed (container without PCI info) is treated the same way.
  t = two_socket_topology();
  t.devices.clear();
  g = gpu_profiles_from_h2d(four_gpu_probe(), t);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->notes.size(), 4u);
  for (const auto& p : g->gpus) EXPECT_EQ(p.numa_node, 0);
}

TEST(GpuLinkProfile, OneNodeUnboundSourcesLeaveInterSocketEstimated) {
  Topology t;
  t.nodes = {{0, 64 * kGiB, 16}};
  t.devices = {PciDevice{PciDevice::Kind::Gpu, "0000:1a:00.0", 0x10de, 0x2335, 0, 63}};
  staging::H2dProbeResult r;
  r.links = {link(0, "0000:1A:00.0", -1, 52.0, 19.0)};
  r.links[0].name = "NVIDIA H200";
  r.links[0].vram_bytes = 141 * kGiB;
  r.all_gpus_gbps = 51.0;
  auto g = gpu_profiles_from_h2d(r, t);
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_EQ(g->gpus.size(), 1u);
  EXPECT_DOUBLE_EQ(g->gpus[0].h2d_gbps, 52.0);
  EXPECT_DOUBLE_EQ(g->gpus[0].vram_gbps, 4800);  // public H200 spec, 4.8 TB/s
  EXPECT_EQ(g->inter_socket_gbps, 0);
  EXPECT_TRUE(g->notes.empty());  // one node: unbound memory is local memory
  EXPECT_NE(g->estimated.back().find("inter_socket_gbps"), std::string::npos);
  HwProfile p;
  p.inter_socket_gbps = 16;
  apply_gpu_link_profile(g.value(), &p);
  EXPECT_DOUBLE_EQ(p.inter_socket_gbps, 16);  // kept: nothing measured it
  EXPECT_DOUBLE_EQ(p.pageable_h2d_gbps, 19.0);
}

TEST(GpuLinkProfile, BadProbeResultsAreRefusedByName) {
  const Topology t = two_socket_topology();
  auto expect_error = [&](const staging::H2dProbeResult& r, const std::string& what) {
    auto g = gpu_profiles_from_h2d(r, t);
    ASSERT_FALSE(g.ok()) << what;
    EXPECT_NE(g.error().message.find(what), std::string::npos) << g.error().message;
  };
  expect_error(staging::H2dProbeResult{}, "found none");
  auto r = four_gpu_probe();
  r.all_gpus_gbps = 0;
  expect_error(r, "all-GPUs");
  r = four_gpu_probe();
  r.links[3].pinned_gbps = 0;
  expect_error(r, "GPU 1 (NVIDIA GeForce RTX 2080 Ti) from node 1: expected a pinned rate > 0");
  r = four_gpu_probe();
  for (auto& l : r.links)
    if (l.gpu == 2) l.vram_bytes = 0;
  expect_error(r, "GPU 2 (NVIDIA GeForce RTX 2080 Ti): expected a VRAM size > 0");
  r = four_gpu_probe();
  r.links[1].numa_node = 0;
  expect_error(r, "GPU 0 from node 0 measured twice");
  r = four_gpu_probe();
  for (auto& l : r.links)
    if (l.gpu == 3) l.gpu = 5;
  expect_error(r, "expected CUDA ordinals 0..3, found up to 5");
  Topology empty;
  auto g = gpu_profiles_from_h2d(four_gpu_probe(), empty);
  ASSERT_FALSE(g.ok());
}

TEST(GpuLinkProfile, PciBusIdsCompareAsNumbers) {
  EXPECT_EQ(parse_pci_bus_id("0000:3B:00.0"), parse_pci_bus_id("0000:3b:00.0"));
  EXPECT_EQ(parse_pci_bus_id("00000000:3B:00.0"), parse_pci_bus_id("0000:3b:00.0"));
  EXPECT_NE(parse_pci_bus_id("0000:3b:00.0"), parse_pci_bus_id("0000:3b:00.1"));
  EXPECT_NE(parse_pci_bus_id("0000:3b:00.0"), parse_pci_bus_id("0001:3b:00.0"));
  EXPECT_EQ(parse_pci_bus_id("0000:3b:00.0"), (0x3b << 8));
  for (const char* bad : {"", "3b:00.0", "0000:3b:00", "0000:3b:00.0x", "0000:3b:20.0", "0000:3b:00.8",
                          "0x00:3b:00.0", "0000:-3b:00.0", "0000:3b:00.0 ", "0000:3b:00:0", "000000000:3b:00.0"})
    EXPECT_EQ(parse_pci_bus_id(bad), -1) << bad;
}

TEST(GpuEstimates, SpecificNamesBeforeGeneralOnesAndAConservativeDefault) {
  EXPECT_DOUBLE_EQ(gpu_estimate_for_name("NVIDIA H100 PCIe").vram_gbps, 2000);
  EXPECT_DOUBLE_EQ(gpu_estimate_for_name("NVIDIA H100 80GB HBM3").vram_gbps, 3350);
  EXPECT_DOUBLE_EQ(gpu_estimate_for_name("NVIDIA A100-SXM4-80GB").vram_gbps, 2039);
  EXPECT_DOUBLE_EQ(gpu_estimate_for_name("nvidia geforce rtx 2080 ti").vram_gbps, 616);
  const GpuEstimate d = gpu_estimate_for_name("Some Future Card");
  EXPECT_EQ(d.match, "");
  EXPECT_NE(d.source.find("conservative"), std::string::npos);
  // The default is below every listed card.
  for (const char* n : {"RTX 2080 Ti", "RTX 3080", "Tesla T4", "H200"}) {
    const GpuEstimate e = gpu_estimate_for_name(n);
    EXPECT_LT(d.vram_gbps * d.kernel_efficiency, e.vram_gbps * e.kernel_efficiency) << n;
    EXPECT_LT(d.tflops, e.tflops) << n;
  }
}

TEST(GpuLinkProfile, FormatProbePrintsOneLinePerGpuAndNodeOrWhyNone) {
  HwProbeResult r;
  r.gpu.probed = true;
  r.gpu.raw = four_gpu_probe();
  auto g = gpu_profiles_from_h2d(r.gpu.raw, two_socket_topology());
  ASSERT_TRUE(g.ok());
  r.gpu.profile = g.value();
  const std::string s = format_probe(r);
  EXPECT_NE(s.find("gpu 1 NVIDIA GeForce RTX 2080 Ti (0000:5E:00.0, 22.0 GiB) from node 1: pinned 9.10 GB/s  "
                   "pageable 7.50 GB/s\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("gpu: all 4 GPU(s) at once (pinned): 38.60 GB/s\n"), std::string::npos) << s;
  size_t lines = 0;  // 4 GPUs x 2 nodes
  for (size_t p = s.find(" from node "); p != std::string::npos; p = s.find(" from node ", p + 1)) ++lines;
  EXPECT_EQ(lines, 8u) << s;
  HwProbeResult none;
  none.gpu.why_not = "CUDA build, no device visible (cudaGetDeviceCount: 0 devices)";
  EXPECT_NE(format_probe(none).find("gpu: none probed: CUDA build, no device visible"), std::string::npos)
      << format_probe(none);
}

TEST(GpuLinkProbe, RefusesHonestlyWithoutADevice) {
  if (staging::h2d_probe_available()) GTEST_SKIP() << "a CUDA device is visible: the probe runs";
  const std::string why = staging::h2d_probe_unavailable_reason();
#if DS4_TEST_HAVE_CUDA
  EXPECT_NE(why.find("CUDA build, no device visible"), std::string::npos) << why;
#else
  EXPECT_EQ(why, "this build has no CUDA backend");
#endif
  Topology no_gpu = two_socket_topology();
  no_gpu.devices.resize(0);
  auto g = probe_gpu_links(no_gpu, 1 << 20, 1);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_FALSE(g->probed);
  EXPECT_EQ(g->why_not, why);
  EXPECT_EQ(describe_gpu_links(g.value()), "No GPU probed: " + why + ".");
  // GPUs on the bus that cannot be measured: an error naming the reason and the way out.
  auto e = probe_gpu_links(two_socket_topology(), 1 << 20, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("hwloc found 4 GPU(s)"), std::string::npos) << e.error().message;
  EXPECT_NE(e.error().message.find(why), std::string::npos) << e.error().message;
  EXPECT_NE(e.error().message.find("--hw"), std::string::npos) << e.error().message;
  // Size 0 skips GPUs even when hwloc sees some.
  auto skip = probe_gpu_links(two_socket_topology(), 0, 1);
  ASSERT_TRUE(skip.ok());
  EXPECT_FALSE(skip->probed);
  EXPECT_EQ(skip->hwloc_gpus, 4);
  EXPECT_NE(skip->why_not.find("skipped"), std::string::npos);
}

}  // namespace
}  // namespace ds4::placement
