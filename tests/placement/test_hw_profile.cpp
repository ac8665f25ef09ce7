// Hardware profile parsing: shipped profiles load, bad input gives one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ds4/json_depth.h"
#include "placement/hw_profile.h"
#include "placement/topology.h"
#include "staging/h2d_probe.h"
#include "tests/support/test_env.h"

namespace ds4::placement {
namespace {

using nlohmann::json;

json minimal_profile() {
  return json::parse(R"({
    "name": "t",
    "numa_nodes": [{"id": 0, "memory_gib": 64, "cores": 8, "mem_read_gbps": 40,
                    "cpu_expert_gbps": {"default": 10, "IQ2_XXS": 5}, "cpu_gflops": 100}],
    "gpus": [{"name": "g", "numa_node": 0, "vram_gib": 22, "h2d_gbps": 11.5, "vram_gbps": 616,
              "kernel_efficiency": 0.6, "tflops": 10}],
    "links": {"h2d_aggregate_gbps": 11.5, "inter_socket_gbps": 16, "pageable_h2d_gbps": 11, "copy_latency_us": 8,
              "allreduce_latency_us": 0, "allreduce_gbps": 6},
    "host": {"memlock_gib": "unlimited", "reserved_gib": 4},
    "runtime": {"vram_reserved_mib": 700, "layer_overhead_us": 60, "cpu_expert_latency_us": 15}
  })");
}

std::string error_of(const json& j) {
  auto r = parse_hw_profile(j.dump(), "p.json");
  return r.ok() ? std::string("(no error)") : r.error().message;
}

TEST(HwProfile, ShippedProfilesLoad) {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(test::source_dir() / "configs/hw")) {
    if (f.path().extension() != ".json") continue;
    auto p = load_hw_profile(f.path().string());
    ASSERT_TRUE(p.ok()) << p.error().message;
    ++n;
  }
  EXPECT_GE(n, 4);
  auto p = load_hw_profile((test::source_dir() / "configs/hw/4x2080ti-22g-pcie3-2s.json").string());
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->gpus.size(), 4u);
  EXPECT_EQ(p->nodes.size(), 2u);
  EXPECT_DOUBLE_EQ(p->gpus[0].h2d_gbps, 11.5);
  EXPECT_DOUBLE_EQ(p->h2d_aggregate_gbps, 38.6);
  EXPECT_EQ(p->gpus[0].vram_bytes, int64_t(22) << 30);
  EXPECT_EQ(p->memlock_bytes, -1);
}

TEST(HwProfile, MinimalParsesAndRoundTrips) {
  auto p = parse_hw_profile(minimal_profile().dump(), "p.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_DOUBLE_EQ(p->nodes[0].cpu_gbps_for("IQ2_XXS"), 5);
  EXPECT_DOUBLE_EQ(p->nodes[0].cpu_gbps_for("Q2_K"), 10);  // default
  auto q = parse_hw_profile(hw_profile_to_json(p.value()), "again.json");
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->gpus[0].vram_bytes, p->gpus[0].vram_bytes);
  EXPECT_EQ(q->host_reserved_bytes, p->host_reserved_bytes);
  EXPECT_EQ(q->memlock_bytes, -1);
}

TEST(HwProfile, MissingKeyNamed) {
  json j = minimal_profile();
  j["gpus"][0].erase("h2d_gbps");
  const std::string e = error_of(j);
  EXPECT_NE(e.find("p.json: gpus[0]: missing key 'h2d_gbps'"), std::string::npos) << e;
}

TEST(HwProfile, UnknownKeyRejected) {
  json j = minimal_profile();
  j["links"]["h2d_gpbs"] = 3;  // typo must not fall back to a default
  const std::string e = error_of(j);
  EXPECT_NE(e.find("unknown key 'h2d_gpbs'"), std::string::npos) << e;
}

TEST(HwProfile, WrongTypeAndRange) {
  json j = minimal_profile();
  j["numa_nodes"][0]["memory_gib"] = "64";
  EXPECT_NE(error_of(j).find("memory_gib: expected a number, found \"64\""), std::string::npos) << error_of(j);
  j = minimal_profile();
  j["gpus"][0]["kernel_efficiency"] = 1.5;
  EXPECT_NE(error_of(j).find("kernel_efficiency"), std::string::npos);
  j = minimal_profile();
  j["gpus"][0]["vram_gib"] = -1;
  EXPECT_NE(error_of(j).find("vram_gib: expected a positive number"), std::string::npos) << error_of(j);
  j = minimal_profile();
  j["host"]["memlock_gib"] = "lots";
  EXPECT_NE(error_of(j).find("memlock_gib"), std::string::npos);
  j = minimal_profile();
  j["numa_nodes"][0]["cpu_expert_gbps"].erase("default");
  EXPECT_NE(error_of(j).find("cpu_expert_gbps: missing key 'default'"), std::string::npos) << error_of(j);
}

// Finite but absurd magnitudes (1e300, 1e-300) are refused, naming the file and the field.
TEST(HwProfile, AbsurdMagnitudesAreRefused) {
  json j = minimal_profile();
  j["numa_nodes"][0]["mem_read_gbps"] = 1e-300;
  std::string e = error_of(j);
  EXPECT_NE(e.find("p.json"), std::string::npos) << e;
  EXPECT_NE(e.find("mem_read_gbps: expected a value in [1e-06, 1000000000], found 1e-300"), std::string::npos) << e;
  j = minimal_profile();
  j["runtime"]["layer_overhead_us"] = 1e300;
  e = error_of(j);
  EXPECT_NE(e.find("p.json"), std::string::npos) << e;
  EXPECT_NE(e.find("layer_overhead_us: expected 0 or a value in"), std::string::npos) << e;
  j = minimal_profile();
  j["runtime"]["layer_overhead_us"] = 0;  // zero stays allowed where it was
  EXPECT_EQ(error_of(j), "(no error)");
  j = minimal_profile();
  j["numa_nodes"][0]["cpu_expert_gbps"]["IQ2_XXS"] = 1e-300;
  e = error_of(j);
  EXPECT_NE(e.find("cpu_expert_gbps.IQ2_XXS: expected a value in"), std::string::npos) << e;
  j = minimal_profile();
  j["cpu_decode"] = json::parse(R"({"threads": 2, "llc_mib": 32, "modes": {"q8": {"token_us": 10,
      "layer_us": 1e300, "attn_gflops": 5, "hot_gbps": {"default": 10}, "cold_gbps": {"default": 5}}}})");
  e = error_of(j);
  EXPECT_NE(e.find("p.json"), std::string::npos) << e;
  EXPECT_NE(e.find("modes.q8: layer_us: expected 0 or a value in"), std::string::npos) << e;
  j["cpu_decode"]["modes"]["q8"]["layer_us"] = 20;
  EXPECT_EQ(error_of(j), "(no error)");  // the block itself is well formed
  j["cpu_decode"]["modes"]["q8"]["cold_gbps"]["default"] = 1e-300;
  e = error_of(j);
  EXPECT_NE(e.find("cold_gbps.default: expected a value in"), std::string::npos) << e;
}

TEST(HwProfile, BadReferencesAndCapacities) {
  json j = minimal_profile();
  j["gpus"][0]["numa_node"] = 3;
  EXPECT_NE(error_of(j).find("gpus[0].numa_node: expected one of the numa_nodes ids, found 3"), std::string::npos)
      << error_of(j);
  j = minimal_profile();
  j["numa_nodes"].push_back(j["numa_nodes"][0]);
  EXPECT_NE(error_of(j).find("duplicate id 0"), std::string::npos);
  j = minimal_profile();
  j["host"]["reserved_gib"] = 100;
  EXPECT_NE(error_of(j).find("reserved_gib"), std::string::npos);
  j = minimal_profile();
  j["numa_nodes"] = json::array();
  EXPECT_NE(error_of(j).find("at least one node"), std::string::npos);
}

TEST(HwProfile, MalformedAndMissingFile) {
  auto r = parse_hw_profile("{\"name\": ", "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("x.json: malformed JSON at line 1, column 10: syntax error", 0), 0u)
      << r.error().message;
  // A missing comma on line 3: the position is the last byte of the unexpected token ("x" ends at
  // column 5), as nlohmann reports it.
  auto r3 = parse_hw_profile("{\n  \"name\": \"a\"\n  \"x\": 1}", "y.json");
  ASSERT_FALSE(r3.ok());
  EXPECT_EQ(r3.error().message.rfind("y.json: malformed JSON at line 3, column 5:", 0), 0u) << r3.error().message;
  auto f = load_hw_profile("/nonexistent/profile.json");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("hardware profile '/nonexistent/profile.json': file not found"), std::string::npos);
}

// A value nested 20,000 levels deep overflowed the stack inside the error message's dump() (found
// by fuzz_json); every placement/ JSON reader now refuses text nested over kMaxJsonFileDepth first.
TEST(HwProfile, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = "{\"name\": " + std::string(20000, '[') + std::string(20000, ']') + "}";
  auto r = parse_hw_profile(deep, "deep.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "deep.json: JSON nests deeper than 64 levels (expected at most 64)");
  // 64 levels is within the limit: the reader goes on to the key check.
  const std::string ok64 = "{\"name\": " + std::string(63, '[') + std::string(63, ']') + "}";
  auto r64 = parse_hw_profile(ok64, "ok.json");
  ASSERT_FALSE(r64.ok());
  EXPECT_EQ(r64.error().message.find("nests deeper"), std::string::npos) << r64.error().message;
  // Brackets inside strings do not count.
  EXPECT_EQ(json_depth("{\"a\": \"[[[[\\\"[[[\"}", 64), 1);
  EXPECT_EQ(json_depth("[[1],[[2]]]", 64), 3);
  EXPECT_EQ(json_depth(std::string(100, '['), 10), 11);
}

TEST(Topology, DiscoversThisMachine) {
  auto t = discover_topology();
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_FALSE(t->nodes.empty());
  int64_t mem = 0;
  for (const auto& n : t->nodes) {
    EXPECT_GT(n.cores, 0);
    mem += n.memory_bytes;
  }
  EXPECT_GT(mem, int64_t(256) << 20);
  for (const auto& d : t->devices) EXPECT_EQ(d.bus_id.size(), 12u) << d.bus_id;  // dddd:bb:dd.f
  bool gpu = false;
  for (const auto& d : t->devices) gpu = gpu || d.kind == PciDevice::Kind::Gpu;
  auto p = discover_hw_profile(uint64_t(16) << 20);
  if (gpu && !staging::h2d_probe_available()) {
    ASSERT_FALSE(p.ok());  // VRAM unknown without a CUDA device: the error asks for --hw
    EXPECT_NE(p.error().message.find("GPU"), std::string::npos);
    EXPECT_NE(p.error().message.find(staging::h2d_probe_unavailable_reason()), std::string::npos) << p.error().message;
    return;
  }
  ASSERT_TRUE(p.ok()) << p.error().message;
  if (staging::h2d_probe_available()) {
    EXPECT_FALSE(p->gpus.empty());  // every CUDA device measured
  } else {
    EXPECT_TRUE(p->gpus.empty());
    EXPECT_NE(p->description.find("No GPU probed: " + staging::h2d_probe_unavailable_reason()), std::string::npos)
        << p->description;
  }
  EXPECT_GT(p->nodes[0].mem_read_gbps, 0.05);
  // The discovered profile survives its own JSON format.
  auto again = parse_hw_profile(hw_profile_to_json(p.value()), "discovered.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->nodes.size(), p->nodes.size());
}

}  // namespace
}  // namespace ds4::placement
