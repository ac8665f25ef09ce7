// placement/gguf_sizes.h — model shape, quant mix and tensor sizes read from a GGUF file.
//
// Used by `ds4-offload plan -m MODEL`: the real file's tensor types and byte sizes replace the
// quant-mix table (quant_mix.h). Metadata keys: prefix "deepseek4." as listed in
// ../shared/reference/dsv4-architecture.md §6 (llama.cpp's deepseek4 loader); the indexer keys are
// also accepted without "attention." (a lineage difference noted there). Tensor names as in §6.
#pragma once

#include "ds4/result.h"
#include "gguf/gguf_file.h"
#include "placement/model_shape.h"
#include "placement/quant_mix.h"

namespace ds4::placement {

/// Model sizes read from a GGUF model.
struct GgufPlanModel {
  ModelShape shape;
  QuantMix mix;     ///< name "file", per-layer expert types from the file
  ModelSizes sizes; ///< tensors of the main layers and globals; MTP/draft blocks are skipped
  int64_t skipped_bytes = 0;  ///< bytes of tensors not used by the planner (MTP blocks)
};

/// Reads shape and sizes from `m` (header only is enough). Errors name the file and the missing
/// key or unexpected tensor (e.g. an expert tensor whose expert count differs from expert_count).
Result<GgufPlanModel> plan_model_from_gguf(const gguf::GgufModel& m);

}  // namespace ds4::placement
