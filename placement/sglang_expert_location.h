// placement/sglang_expert_location.h — routing statistics as SGLang's `--init-expert-location`
// JSON, so a placement measured here seeds a distributed engine (../shared/reference/serving.md
// §5). Format (sgl-project/sglang python/sglang/srt/eplb/expert_location.py,
// compute_initial_expert_location_metadata / init_by_eplb): a JSON object whose "logical_count" is
// the [num_layers][num_logical_experts] matrix of routed-token counts (a 2-D list is read as one
// window); KTransformers' SGLang integration reads the same key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4::placement {

/// Writes {"logical_count": counts} to `path`; counts[layer][expert] >= 0, every row the same
/// length. Errors: an empty or ragged matrix, a negative count, or a failed write (naming the file).
Result<void> write_sglang_expert_location(const std::string& path, const std::vector<std::vector<int64_t>>& counts);

}  // namespace ds4::placement
