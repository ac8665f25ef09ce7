// staging/bounce_ring.cpp — see bounce_ring.h.
#include "staging/bounce_ring.h"

#include <string>

namespace ds4::staging {

Result<BounceRing> BounceRing::create(CopyEngine& engine, int count, uint64_t bytes) {
  if (count < 1 || bytes == 0)
    return Error{"bounce ring: expected count >= 1 and bytes > 0, found " + std::to_string(count) + " and " +
                 std::to_string(bytes)};
  BounceRing r;
  r.engine_ = &engine;
  r.bytes_ = bytes;
  for (int i = 0; i < count; ++i) {
    DS4_TRY(uint8_t* p, engine.alloc_staging(bytes));
    r.bufs_.push_back({p, {}, false});
  }
  return r;
}

Result<BounceRing::Lease> BounceRing::acquire() {
  DS4_CHECK(engine_ != nullptr);
  const int i = next_;
  Buf& b = bufs_[static_cast<size_t>(i)];
  DS4_CHECK(!b.lent);  // ring order: the previous user of this buffer must have released it
  ++stats_.acquires;
  if (!engine_->ready(b.pending)) {
    ++stats_.blocked;
    DS4_TRY_VOID(engine_->wait(b.pending));
  }
  b.pending = {};
  b.lent = true;
  next_ = (next_ + 1) % count();
  return Lease{i, b.data};
}

void BounceRing::release(const Lease& l, CopyTicket t) {
  DS4_CHECK(l.index >= 0 && l.index < count());
  Buf& b = bufs_[static_cast<size_t>(l.index)];
  DS4_CHECK(b.lent && b.data == l.data);
  b.lent = false;
  b.pending = t;
}

}  // namespace ds4::staging
