// tests/staging/test_h2d_probe_gpu.cpp — staging/h2d_probe.h on a real device (label gpu; exit 77 =
// skipped without one, after checking that the probe refuses with a clear message): one link per GPU per
// source node with positive pinned and pageable figures, a positive all-GPU figure, bad options
// refused. The figures themselves are printed, not asserted (speed lives in benchmarks).
#include <gtest/gtest.h>

#include <cstdio>

#include "staging/h2d_probe.h"

namespace ds4::staging {
namespace {

TEST(H2dProbe, MeasuresEveryGpuOrRefusesClearly) {
  H2dProbeOptions o;
  o.bytes = 64ull << 20;
  o.reps = 3;
  auto r = probe_h2d(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->links.empty());
  for (const H2dLink& l : r->links) {
    std::printf("  GPU %d %s (%s) node %d: pinned %.2f GB/s, pageable %.2f GB/s\n", l.gpu, l.name.c_str(),
                l.pci_bus_id.c_str(), l.numa_node, l.pinned_gbps, l.pageable_gbps);
    EXPECT_GT(l.pinned_gbps, 0.0);
    EXPECT_GT(l.pageable_gbps, 0.0);
    EXPECT_FALSE(l.pci_bus_id.empty());
  }
  std::printf("  all GPUs at once: %.2f GB/s\n", r->all_gpus_gbps);
  EXPECT_GT(r->all_gpus_gbps, 0.0);
  o.bytes = 0;
  auto bad = probe_h2d(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("expected bytes > 0"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace ds4::staging

// Without a device: check the refusal message, then exit 77 (ctest reports the test skipped).
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!ds4::staging::h2d_probe_available()) {
    auto r = ds4::staging::probe_h2d(ds4::staging::H2dProbeOptions{});
    if (r.ok() || r.error().message.find("expected a CUDA GPU") == std::string::npos) {
      std::printf("no CUDA device, but probe_h2d did not refuse with 'expected a CUDA GPU': %s\n",
                  r.ok() ? "it succeeded" : r.error().message.c_str());
      return 1;
    }
    std::printf("no CUDA device (%s): skipped\n", r.error().message.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
