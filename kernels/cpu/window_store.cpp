// kernels/cpu/window_store.cpp — the window_store op: this chunk's raw KV into the sliding-window
// ring (slot = position % window; REF Attention.forward's kv_cache[:, :window] ring).
#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void window_store(const F32Rows& kv, int64_t n, int64_t D, int64_t pos0, const F32Rows& ring, int64_t win) {
  for (int64_t p = std::max(pos0, pos0 + n - win); p < pos0 + n; ++p) std::copy_n(kv.row(p - pos0), D, ring.row(p % win));
}

}  // namespace ds4::cpu
