// kernels/comm_cpu.cpp — the in-process CPU rank group of kernels/comm.h: ranks publish their
// buffer pointers, meet at a std::barrier, and each rank reads the others' buffers directly.
// Every rank computes the rank-order sum itself, so all ranks hold identical bits.
// Abort (Comm::abort): the failing rank sets the group's flag and leaves the barrier by
// arrive_and_drop, which completes the phase the others wait in; every rank checks the flag before
// and after each wait and, when set, leaves the same way and returns kAbortedMessage without
// reading another rank's buffer. rearm() makes a new barrier once every rank is out.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <optional>

#include "kernels/comm.h"

namespace ds4::comm {
namespace {

/// State shared by the endpoints of one CPU group.
struct CpuShared {
  explicit CpuShared(int r) : ranks(r), ptrs(static_cast<size_t>(r), nullptr), dropped(static_cast<size_t>(r), 0) {
    sync.emplace(r);
  }
  int ranks;
  std::optional<std::barrier<>> sync;
  std::vector<const float*> ptrs;  // published by each rank between two barrier phases
  std::atomic<bool> aborted{false};
  std::vector<char> dropped;  // [rank] left the barrier (each entry written by its own rank only)
};

class CpuComm final : public Comm {
 public:
  CpuComm(std::shared_ptr<CpuShared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->ranks; }
  const char* name() const override { return "cpu"; }

  Result<void> all_reduce_sum_f32(float* buf, int64_t count) override {
    if (s_->ranks == 1 || count == 0) return ok();
    if (!publish(buf)) return aborted();
    tmp_.resize(static_cast<size_t>(count));
    std::copy_n(s_->ptrs[0], count, tmp_.data());
    for (int r = 1; r < s_->ranks; ++r) {
      const float* p = s_->ptrs[r];
      for (int64_t i = 0; i < count; ++i) tmp_[i] += p[i];
    }
    if (!wait()) return aborted();  // nobody reads buffers any more
    std::copy_n(tmp_.data(), count, buf);
    return ok();
  }

  Result<void> all_gather_f32(const float* send, int64_t count, float* recv) override {
    if (s_->ranks == 1) {
      std::copy_n(send, count, recv);
      return ok();
    }
    if (!publish(send)) return aborted();
    for (int r = 0; r < s_->ranks; ++r) std::copy_n(s_->ptrs[r], count, recv + r * count);
    if (!wait()) return aborted();
    return ok();
  }

  Result<void> broadcast_f32(float* buf, int64_t count, int root) override {
    if (root < 0 || root >= s_->ranks)
      return Error{"broadcast_f32: root " + std::to_string(root) + " outside 0.." + std::to_string(s_->ranks - 1)};
    if (s_->ranks == 1) return ok();
    if (!publish(buf)) return aborted();
    if (rank_ != root) std::copy_n(s_->ptrs[root], count, buf);
    if (!wait()) return aborted();
    return ok();
  }

  Result<void> barrier() override {
    if (s_->ranks > 1 && !wait()) return aborted();
    return ok();
  }

  void abort() override {
    s_->aborted.store(true);
    drop();
  }

  void rearm() override {
    s_->sync.emplace(s_->ranks);
    std::fill(s_->dropped.begin(), s_->dropped.end(), 0);
    s_->aborted.store(false);
  }

 private:
  static Error aborted() { return Error{kAbortedMessage}; }
  /// Leaves the barrier for good (once per rank and rearm).
  void drop() {
    if (s_->dropped[size_t(rank_)]) return;
    s_->dropped[size_t(rank_)] = 1;
    s_->sync->arrive_and_drop();
  }
  /// One barrier phase; false (this rank having left the barrier) when the group is aborted.
  bool wait() {
    if (s_->aborted.load()) {
      drop();
      return false;
    }
    s_->sync->arrive_and_wait();
    if (s_->aborted.load()) {
      drop();
      return false;
    }
    return true;
  }
  /// Publishes this rank's pointer and waits until every rank has published.
  bool publish(const float* p) {
    s_->ptrs[rank_] = p;
    return wait();
  }
  std::shared_ptr<CpuShared> s_;
  int rank_;
  std::vector<float> tmp_;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_cpu_group(int ranks) {
  DS4_CHECK(ranks >= 1);
  auto shared = std::make_shared<CpuShared>(ranks);
  std::vector<std::unique_ptr<Comm>> g;
  for (int r = 0; r < ranks; ++r) g.push_back(std::make_unique<CpuComm>(shared, r));
  return g;
}

void ordered_sum_f32(const float* parts, int nparts, int64_t count, float* dst) {
  DS4_CHECK(nparts >= 1);
  if (dst != parts) std::copy_n(parts, count, dst);
  for (int p = 1; p < nparts; ++p) {
    const float* src = parts + p * count;
    for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
  }
}

}  // namespace ds4::comm
