// Shape and sizes read from a real GGUF header (the dsv4-tiny fixture), and a plan made from them.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/gguf_file.h"
#include "placement/cost_model.h"
#include "placement/gguf_sizes.h"
#include "placement/planner.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

TEST(GgufSizes, TinyFixture) {
  const auto path = test::fixtures_dir() / "dsv4-tiny/dsv4-tiny-mxfp4.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture missing: " << path;
  gguf::OpenOptions oo;
  oo.map_data = false;
  auto file = gguf::GgufModel::open(path.string(), oo);
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto pm = plan_model_from_gguf(file.value());
  ASSERT_TRUE(pm.ok()) << pm.error().message;
  // fixtures/dsv4-tiny/README.md: 6 layers, dim 256, 16 experts top-4, moe_inter 128, ratios 0,0,4,128,4,128.
  EXPECT_EQ(pm->shape.n_layers, 6);
  EXPECT_EQ(pm->shape.dim, 256);
  EXPECT_EQ(pm->shape.n_experts, 16);
  EXPECT_EQ(pm->shape.top_k, 4);
  EXPECT_EQ(pm->shape.moe_inter, 128);
  EXPECT_EQ(pm->shape.compress_ratios, (std::vector<int>{0, 0, 4, 128, 4, 128}));
  // MXFP4: 17 bytes per 32 weights; one expert = 3 x 256 x 128 weights.
  for (int64_t b : pm->sizes.expert_bytes) EXPECT_EQ(b, 3 * 256 * 128 / 32 * 17);
  // Every tensor is counted once: used + skipped equals the sum over the file's tensor infos,
  // which must fit in the file after its data offset.
  uint64_t sum = 0;
  for (const auto& t : file->tensors()) sum += t.nbytes;
  EXPECT_EQ(uint64_t(pm->sizes.total_bytes + pm->skipped_bytes), sum);
  uint64_t data = 0;
  for (const auto& s : file->shards()) data += s.file_size - s.data_offset;
  EXPECT_LE(sum, data);

  // A plan for it on a one-GPU machine places everything.
  RoutingStats st = uniform_routing(6, 16, 4);
  RoutingSamples smp = draw_routing_samples(st, 32, 1);
  HwProfile hw;
  hw.name = "t";
  NumaNodeProfile n;
  n.memory_bytes = int64_t(4) << 30;
  n.cores = 2;
  n.mem_read_gbps = 8;
  n.cpu_expert_gbps["default"] = 4;
  n.cpu_gflops = 50;
  hw.nodes = {n};
  hw.gpus = {{"g", 0, int64_t(1) << 30, 10, 500, 0.5, 5, ""}};
  hw.h2d_aggregate_gbps = 10;
  hw.inter_socket_gbps = 10;
  hw.pageable_h2d_gbps = 10;
  hw.allreduce_gbps = 1;
  hw.host_reserved_bytes = int64_t(1) << 30;
  ASSERT_TRUE(validate_hw_profile(hw, "t").ok());
  CostInputs in{&pm->shape, &pm->sizes, &pm->mix, &hw, &st, &smp, 64, 32};
  CostModel cm(in);
  PlanOptions opt;
  opt.ctx = 512;
  opt.prefill_chunk = 64;
  auto plan = make_plan(cm, opt, Policy::Planner);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->gpus[0].resident_experts, 6 * 16);  // 1 GiB holds the whole tiny model
}

}  // namespace
}  // namespace ds4::placement
