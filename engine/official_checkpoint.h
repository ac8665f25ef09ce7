// engine/official_checkpoint.h — DeepSeek-V4 official safetensors checkpoints (DeepSeek's FP8/FP4
// release and NVIDIA's ModelOpt NVFP4 conversion) bound as the same Checkpoint view a llama.cpp
// `deepseek4` GGUF gives: llama.cpp tensor names and `deepseek4.*` metadata keys, so that
// model_config_from_gguf and bind_weights consume both unchanged.
//
// Facts: ../shared/reference/dsv4-architecture.md §1 (HF config keys), §5 (official names and
// encodings), §6 (llama.cpp names and keys); quant-formats.md §2-3; the ModelOpt layout in
// ../shared/fixtures/dsv4-tiny-nvfp4/README.md.
//
// How each official encoding enters the view (nothing is dequantized to F32):
// - BF16 / F16 / F32 tensors: in place (the mmap), same ggml type; torch [out, in] = ggml {in, out}.
// - FP8 E4M3 `<p>.weight` + E8M0 `<p>.scale` (128x128 blocks): repacked once into the ds4-internal
//   F8_E4M3_R128 rows (one scale byte before each 128 weight bytes; +0.8 % bytes), decoded exactly
//   by kernels/quant (decode_f8_r128) on the F32 activation path.
// - FP4 E2M1 routed experts (I8 nibbles + E8M0 per 32): repacked bit-exactly into ggml MXFP4 blocks
//   (same E8M0 byte, nibbles re-paired j | j+16 << 4; ggml's doubled kvalues with the 2^(e-128)
//   half scale give e2m1 * 2^(e-127)), all experts of a projection merged into llama.cpp's 3-D
//   `blk.L.ffn_{gate,up,down}_exps.weight` {in, out, n_expert}. Same size as the source.
// - NVFP4 (ModelOpt) routed experts (U8 nibbles + F8_E4M3 per 16 + F32 weight_scale_2): repacked
//   into the ds4-internal NVFP4_S2 blocks (ggml NVFP4 block + the tensor scale; 40 B per 64).
//   The format is chosen per tensor from its names and dtypes, so the `mtp.*` experts of NVIDIA's
//   checkpoint (MXFP4) load as MXFP4.
// - `tid2eid` I64 [vocab, k]: range-checked into I32 {k, vocab}.
// - `mtp.M.*` (draft blocks): bound under `blk.{n_layer+M}.nextn.*` (loaded, kept, not used);
//   draft tensors without a llama.cpp name (the 0731 release's DSpark heads) are kept byte for
//   byte as `blk.{n_layer+M}.nextn.raw.<official rest>`.
// Load cost for the 160 GB checkpoint: one pass over every FP8/FP4 byte (about 148 GB read from
// the files, the same amount written into anonymous memory). Measured repack rates per core
// (bench/bench_checkpoint_repack.cpp, bench/README.md): FP4 -> MXFP4 1.3 GB/s, NVFP4 -> NVFP4_S2
// 1.3 GB/s, FP8 13 GB/s: about 112 core-seconds, run on all cores (parallel over experts), so the
// disk read dominates. The repacked bytes live in memory: `--experts-tier nvme` needs a GGUF.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "ds4/result.h"
#include "gguf/gguf_file.h"

namespace ds4 {

/// What binding an official checkpoint did (printed by `inspect`).
struct OfficialCheckpointStats {
  std::string quant;              // "fp8+fp4", "fp8+nvfp4", ... (from the tensors found)
  std::string declared;           // what config.json / hf_quant_config.json declare (OfficialConfig::declared)
  int tensors = 0;                // safetensors tensors read
  int fp8_tensors = 0;            // FP8 blocks repacked to F8_E4M3_R128
  int mxfp4_experts = 0;          // expert matrices repacked FP4 -> MXFP4
  int nvfp4_experts = 0;          // expert matrices repacked NVFP4 -> NVFP4_S2
  uint64_t in_place_bytes = 0;    // tensors used from the mmap as they are
  uint64_t repacked_bytes = 0;    // bytes written into memory by the repacks
  double seconds = 0;             // wall time of the repacks
  bool tokenizer_json = false;    // tokenizer.json found and converted
};

/// Binds the DeepSeek-V4 safetensors checkpoint at `path` (a folder with config.json and the
/// shards, an index json, or a .safetensors file with config.json beside it) as a `deepseek4`
/// GgufModel view (see the header comment). Errors, one message naming file, tensor (and block):
/// every safetensors fault (gguf/safetensors.h); config.json missing, malformed or missing a key;
/// an official tensor name that has no llama.cpp counterpart, or a counterpart absent; a dtype or
/// scale shape that does not match its encoding; an E8M0 scale 0xFF (NaN) or an NVFP4 scale with
/// the sign bit or NaN; a tid2eid entry outside 0..n_routed_experts-1; experts of one projection in
/// mixed formats. The config/shape cross-check is model_config_from_gguf's, done by the caller.
/// A lone shard of a split set or an incomplete set is refused before anything is mapped
/// (check_safetensors_shard_set). With `repack` false only the tensor list, types and shapes are built (data = nullptr, nothing
/// repacked; what `plan -m` and `bench` need to size a model without the 148 GB pass).
Result<gguf::GgufModel> open_official_checkpoint(const std::string& path, OfficialCheckpointStats* stats = nullptr,
                                                 bool repack = true);

/// Produces the bytes of a lazily bound view tensor into `dst` (its nbytes), bit-identical to the
/// eager repack, then drops the source pages it read from the process's memory (madvise
/// MADV_DONTNEED on the read-only mapping). Errors: the eager repack's (E8M0 NaN, bad NVFP4 scale).
/// Thread-compatible; uses all cores inside.
using TensorFill = std::function<Result<void>(uint8_t* dst)>;

/// Drops the pages of [p, p + n) (inside a read-only file mapping) from the process's resident
/// set: madvise MADV_DONTNEED, rounded out to whole pages; a later read faults them in again.
void drop_mapped_pages(const uint8_t* p, uint64_t n);

/// open_official_checkpoint without the load-time repack, for streaming conversions: tensors used
/// in place keep their mmap `data`; every repacked tensor (FP8 blocks, FP4/NVFP4 experts) has
/// data = nullptr and a fill in `fills` under its view name (tid2eid, small, is converted at once).
/// The returned view must outlive the fills. Errors: open_official_checkpoint's, except those
/// that only the repack finds (reported by the fill).
Result<gguf::GgufModel> open_official_checkpoint_lazy(const std::string& path, std::map<std::string, TensorFill>* fills,
                                                      OfficialCheckpointStats* stats = nullptr);

/// Opens any model path the CLI accepts: a GGUF file or split set (gguf::GgufModel::open with
/// `opts`), or a safetensors checkpoint (open_official_checkpoint; repacks only when
/// `opts.map_data`). A lone shard of a split safetensors checkpoint, or a folder of shards without
/// its index, is refused first (gguf/safetensors_shards.h check_safetensors_shard_set).
Result<gguf::GgufModel> open_model_file(const std::string& path, const gguf::OpenOptions& opts = {});

/// The metadata (`deepseek4.*`, `tokenizer.ggml.*` keys) of the model at `path` without its
/// weights, for checks before a load: a GGUF's header (every shard's header parsed, no tensor
/// data read), or a checkpoint's config.json and tokenizer.json converted as the loader does (no
/// shard opened; the shard set checked by name first). Errors: check_safetensors_shard_set's,
/// read_official_config's and gguf::GgufModel::open's.
Result<gguf::Metadata> read_model_metadata(const std::string& path);

}  // namespace ds4
