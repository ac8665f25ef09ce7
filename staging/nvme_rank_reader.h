// staging/nvme_rank_reader.h — one tensor-parallel rank thread's NVMe reads of routed experts
// (the plan-driven store at tp > 1, staging/expert_store_mixed.cpp).
//
// Each rank thread gets its own NvmeRankReader: its own NvmeReader (io_uring rings and bounce
// buffers are single-submitter, NvmeReader is not thread-safe) and its own step buffers, so R
// rank threads read NVMe experts at the same time without a lock and without sharing a cache
// slot (the alternative, one reader behind a mutex, would serialise the ranks' reads of a layer;
// R readers keep R request streams in flight on the drive).
//
// Source tensors as staging/expert_slabs.h: `blk.L.ffn_{gate,up,down}_exps.weight`, ggml ne =
// {in, out, n_expert}; row r of expert e at byte (e*out + r) * row_bytes of the tensor. A ggml
// row holds whole quant blocks (in is a multiple of the type's block size), so rows
// [r0, r1) of one expert's projection are one contiguous byte range of the file.
//
// Buffers handed out stay valid and unchanged until the next begin_step() of the same reader
// (the engine's MoE of one layer calls begin_step once, before its gets, after the previous
// layer's ops have been waited for at the router download).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "kernels/device.h"
#include "staging/expert_slabs.h"
#include "staging/nvme_reader.h"

namespace ds4::staging {

class NvmeRankReader {
 public:
  /// Opens its own NvmeReader over `paths` (the model's shard files) with `opts`. Errors: those
  /// of NvmeReader::open (unreadable file, invalid options).
  static Result<std::unique_ptr<NvmeRankReader>> open(const std::vector<std::string>& paths,
                                                      const ReaderOptions& opts);

  /// Starts a step: every buffer handed out before may be reused from now on. Buffers beyond the
  /// most any of the last kTrimWindow steps used are freed, so a prefill step's many buffers do
  /// not stay for the session once decode steps need few (the window keeps a token's worth of
  /// layer steps, so layers needing different counts do not free and re-allocate every step).
  void begin_step();
  /// Steps over which begin_step keeps the buffers the busiest of them used.
  static constexpr size_t kTrimWindow = 256;
  /// Bytes of the step buffers held now (used this step or kept for later steps).
  uint64_t held_bytes() const;

  /// Expert (layer, expert)'s whole slab in `L`'s unsplit layout (gate, up, down rows; matrices
  /// via L.matrix(slab, layer, proj, 0)), read from the file once per step. `*read_bytes`: the
  /// bytes this call read (0 when the expert was already read this step). Errors: the reader's
  /// (a read outside the file or failing; the message names file and offset).
  Result<const uint8_t*> whole(const ExpertLayout& L, int layer, int expert, uint64_t* read_bytes);

  /// whole() of every expert of `experts` (of `layer`) not read yet this step, all in one read:
  /// their requests are in flight together, up to the reader's queue depth, where whole() one by
  /// one waits for each expert before the next is asked for. `read_bytes` (resized to
  /// experts.size()) gets each expert's bytes read (0: read before this step, or listed twice).
  /// Errors: the reader's (the message names file and offset); then none of them is kept.
  Result<void> whole_many(const ExpertLayout& L, int layer, std::span<const int> experts,
                          std::vector<uint64_t>* read_bytes);

  /// Rank `rank`'s rows [out*rank/ranks, out*(rank+1)/ranks) of each projection of (layer,
  /// expert) (index ExpertProj: gate, up, down), one contiguous file range each, read once per
  /// step into a step buffer; each matrix has `in` and `row_bytes` of its projection and the
  /// slice's row count. `*read_bytes` as whole(). Requires 0 <= rank < ranks (checked).
  Result<std::array<dev::WeightMatrix, 3>> slice(const ExpertLayout& L, int layer, int expert, int rank, int ranks,
                                                 uint64_t* read_bytes);

  /// The reader's counters (bytes delivered, reads, latencies).
  ReaderCounters counters() const { return reader_->counters(); }

 private:
  struct Entry {
    int layer = -1, expert = -1;
    bool sliced = false;
    std::array<dev::WeightMatrix, 3> m{};  // sliced: the three slices; whole: m[0].data = slab
  };
  /// A step buffer of at least `bytes` (reused across steps; its address stays put).
  uint8_t* buffer(uint64_t bytes);

  std::unique_ptr<NvmeReader> reader_;
  std::deque<std::vector<uint8_t>> buffers_;  // deque: growing it never moves a buffer
  size_t used_ = 0;                           // buffers handed out this step
  std::vector<size_t> recent_used_;           // used_ of the last kTrimWindow steps (a ring)
  size_t recent_at_ = 0;                      // the ring's next slot
  std::vector<Entry> entries_;                // what this step read, in order
};

/// Sums the counters of several readers into one: byte, read and retry counts added; backend and
/// reason of the first; each latency percentile the largest over the readers. Empty: zeros.
ReaderCounters merge_reader_counters(const std::vector<ReaderCounters>& parts);

}  // namespace ds4::staging
