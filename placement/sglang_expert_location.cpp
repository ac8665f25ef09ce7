// placement/sglang_expert_location.cpp — see sglang_expert_location.h.
#include "placement/sglang_expert_location.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace ds4::placement {

Result<void> write_sglang_expert_location(const std::string& path, const std::vector<std::vector<int64_t>>& counts) {
  if (counts.empty() || counts[0].empty())
    return Error{path + ": expected a [layers x experts] count matrix, found an empty one"};
  for (size_t l = 0; l < counts.size(); ++l) {
    if (counts[l].size() != counts[0].size())
      return Error{path + ": layer " + std::to_string(l) + " has " + std::to_string(counts[l].size()) + " experts, layer 0 " +
                   std::to_string(counts[0].size())};
    for (int64_t v : counts[l])
      if (v < 0) return Error{path + ": layer " + std::to_string(l) + ": negative count " + std::to_string(v)};
  }
  std::ofstream f(path);
  f << nlohmann::json{{"logical_count", counts}}.dump() << "\n";
  f.close();
  if (!f) return Error{path + ": write failed"};
  return ok();
}

}  // namespace ds4::placement
