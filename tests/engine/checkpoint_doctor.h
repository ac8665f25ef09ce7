// tests/engine/checkpoint_doctor.h — copies a safetensors checkpoint folder with edits (tensor
// bytes, config.json, dropped tensors), rewriting the shards with gguf/safetensors_writer.h, for
// tests that feed doctored checkpoints to the loader and the converter.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/safetensors.h"
#include "gguf/safetensors_writer.h"

namespace ds4::test {

/// Copies the fixture folder into `dst`, letting `edit` change tensors (name -> bytes), the config
/// JSON, drop tensors or rename them, before the shards are rewritten with the writer.
inline void doctor(const std::filesystem::path& src, const std::filesystem::path& dst,
            const std::function<void(const std::string&, std::vector<uint8_t>&)>& edit,
            const std::function<void(nlohmann::json&)>& edit_config = {},
            const std::function<bool(const std::string&)>& drop = {},
            const std::function<std::string(const std::string&)>& rename = {}) {
  auto ck = gguf::SafetensorsCheckpoint::open(src.string());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  std::vector<std::vector<uint8_t>> store;
  store.reserve(ck->tensors().size());
  std::vector<std::vector<gguf::StWriteTensor>> per(ck->shards().size());
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (const auto& t : ck->tensors()) {
    if (drop && drop(t.name)) continue;
    store.emplace_back(t.data, t.data + t.nbytes);
    edit(t.name, store.back());
    const std::string name = rename ? rename(t.name) : t.name;
    per[size_t(t.shard)].push_back({name, t.dtype, t.shape, store.back().data(), store.back().size()});
    index["weight_map"][name] = std::filesystem::path(ck->shards()[size_t(t.shard)].path).filename().string();
  }
  for (size_t s = 0; s < per.size(); ++s)
    ASSERT_TRUE(gguf::write_safetensors((dst / std::filesystem::path(ck->shards()[s].path).filename()).string(), per[s]).ok());
  std::ofstream(dst / "model.safetensors.index.json") << index.dump();
  std::ifstream cf(src / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(cf);
  if (edit_config) edit_config(cfg);
  std::ofstream(dst / "config.json") << cfg.dump();
}

}  // namespace ds4::test
