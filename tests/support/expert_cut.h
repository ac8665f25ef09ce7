// tests/support/expert_cut.h — where to cut a GGUF so that only one layer's routed-expert tensors
// are lost: the tests that make one rank's NVMe expert reads fail after load (tp_nvme_test,
// cuda_emu_tp_test) truncate a copy of the model there.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "gguf/gguf_file.h"

namespace ds4::test {

/// A cut of a GGUF file: `layer`, the layer whose `blk.L.ffn_*_exps.weight` tensors start last in
/// the file, and `offset`, the smallest file offset of those tensors. layer -1 when none is found.
struct ExpertCut {
  int layer = -1;
  uint64_t offset = 0;
};

/// The ExpertCut of GGUF `path`; a test failure (and layer -1) when the file does not open or a
/// tensor other than that layer's ffn tensors reaches past the cut.
inline ExpertCut last_layer_expert_cut(const std::string& path) {
  ExpertCut c;
  auto g = gguf::GgufModel::open(path);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return c;
  for (const auto& t : g->tensors())
    if (t.name.find("_exps.weight") != std::string::npos && t.file_offset >= c.offset) {
      c.offset = t.file_offset;
      c.layer = std::stoi(t.name.substr(4, t.name.find('.', 4) - 4));
    }
  if (c.layer < 0) return c;
  const std::string prefix = "blk." + std::to_string(c.layer) + ".";
  for (const auto& t : g->tensors())
    if (t.name.find("_exps.weight") != std::string::npos && t.name.rfind(prefix, 0) == 0)
      c.offset = std::min(c.offset, t.file_offset);
  for (const auto& t : g->tensors())
    if (t.file_offset + t.nbytes > c.offset && t.name.rfind(prefix + "ffn_", 0) != 0) {
      ADD_FAILURE() << t.name << " lies past the cut";
      c.layer = -1;
    }
  return c;
}

}  // namespace ds4::test
