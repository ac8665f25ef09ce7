// staging/bounce_ring.h — a small ring of staging buffers (pinned with CUDA: cudaHostAlloc via
// CopyEngine::alloc_staging; plain aligned memory without) through which pageable or NVMe-read
// data is copied into the cache slots. A buffer is handed out again only after the copy that
// reads it has completed: acquire() blocks on the buffer's ticket rather than overwrite it.
#pragma once

#include <cstdint>
#include <vector>

#include "ds4/result.h"
#include "staging/copy_engine.h"

namespace ds4::staging {

struct BounceStats {
  uint64_t acquires = 0;
  uint64_t blocked = 0;  // acquires that had to wait for an in-flight copy
};

class BounceRing {
 public:
  /// One buffer lent to the caller: fill `data` (bytes() long), submit, then release(index, t).
  struct Lease {
    int index = -1;
    uint8_t* data = nullptr;
  };
  /// `count` buffers of `bytes` from engine.alloc_staging. Error when count < 1, bytes == 0 or an
  /// allocation fails. `engine` must outlive the ring.
  static Result<BounceRing> create(CopyEngine& engine, int count, uint64_t bytes);
  BounceRing() = default;

  /// The next buffer in ring order, after waiting (engine.wait) for the copy last submitted from
  /// it. Error when that wait fails. A buffer already lent and not released is a programmer error.
  Result<Lease> acquire();
  /// Returns a lent buffer; `t` is the copy reading it (CopyTicket{} when none was submitted).
  void release(const Lease& l, CopyTicket t);

  int count() const { return static_cast<int>(bufs_.size()); }
  uint64_t bytes() const { return bytes_; }
  const BounceStats& stats() const { return stats_; }

 private:
  struct Buf {
    uint8_t* data = nullptr;
    CopyTicket pending;
    bool lent = false;
  };
  CopyEngine* engine_ = nullptr;
  std::vector<Buf> bufs_;
  uint64_t bytes_ = 0;
  int next_ = 0;
  BounceStats stats_;
};

}  // namespace ds4::staging
