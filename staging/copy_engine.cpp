// staging/copy_engine.cpp — the host copy engine (memcpy). See copy_engine.h. make_cuda_copy_engine
// is in staging/cuda/copy_engine_cuda.cpp (CUDA builds) or staging/nocuda/copy_engine_nocuda.cpp.
#include "staging/copy_engine.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ds4::staging {

namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using HostBuf = std::unique_ptr<uint8_t, FreeDeleter>;

Result<HostBuf> aligned_host(uint64_t bytes, const char* what) {
  const uint64_t align = 4096;
  const uint64_t n = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, n);
  if (!p) return Error{std::string("host copy engine: cannot allocate ") + std::to_string(n) + " bytes for " + what};
  return HostBuf(static_cast<uint8_t*>(p));
}

/// memcpy at submit time; every ticket is complete when returned.
class HostCopyEngine final : public CopyEngine {
 public:
  const char* name() const override { return "host-memcpy"; }
  bool device_slots() const override { return false; }

  Result<void> allocate_slots(int n_layer, int slots_per_layer, uint64_t slot_bytes) override {
    DS4_CHECK(layers_.empty());
    if (n_layer < 1 || slots_per_layer < 1 || slot_bytes == 0)
      return Error{"host copy engine: expected n_layer, slots_per_layer and slot_bytes > 0"};
    slots_ = slots_per_layer;
    slot_bytes_ = slot_bytes;
    for (int l = 0; l < n_layer; ++l) {
      DS4_TRY(HostBuf b, aligned_host(slot_bytes * static_cast<uint64_t>(slots_per_layer), "cache slots"));
      layers_.push_back(std::move(b));
    }
    return ok();
  }
  uint8_t* slot(int layer, int s) const override {
    DS4_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()) && s >= 0 && s < slots_);
    return layers_[static_cast<size_t>(layer)].get() + static_cast<uint64_t>(s) * slot_bytes_;
  }
  Result<uint8_t*> alloc_staging(uint64_t bytes) override {
    DS4_TRY(HostBuf b, aligned_host(bytes, "staging buffer"));
    staging_.push_back(std::move(b));
    return staging_.back().get();
  }
  Result<CopyTicket> submit(int layer, int s, const void* src, uint64_t bytes) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()) || s < 0 || s >= slots_ || bytes > slot_bytes_)
      return Error{"host copy engine: copy of " + std::to_string(bytes) + " bytes to (layer " + std::to_string(layer) +
                   ", slot " + std::to_string(s) + ") outside the " + std::to_string(layers_.size()) + " x " +
                   std::to_string(slots_) + " slots of " + std::to_string(slot_bytes_) + " bytes"};
    std::memcpy(slot(layer, s), src, bytes);
    return CopyTicket{++last_};
  }
  bool ready(CopyTicket) override { return true; }
  Result<void> wait(CopyTicket) override { return ok(); }
  Result<void> stream_wait(CopyTicket, StreamHandle) override { return ok(); }
  Result<void> consumer_done(int layer, int s, StreamHandle) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()) || s < 0 || s >= slots_)
      return Error{"host copy engine: consumer_done on (layer " + std::to_string(layer) + ", slot " +
                   std::to_string(s) + ") out of range"};
    return ok();
  }
  StreamHandle copy_stream() const override { return nullptr; }
  EventHandle event(CopyTicket) override { return nullptr; }
  Result<void> copy_to_host(const uint8_t* slot_addr, void* dst, uint64_t bytes) override {
    std::memcpy(dst, slot_addr, bytes);
    return ok();
  }

 private:
  std::vector<HostBuf> layers_, staging_;
  int slots_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t last_ = 0;
};

}  // namespace

std::unique_ptr<CopyEngine> make_host_copy_engine() { return std::make_unique<HostCopyEngine>(); }

}  // namespace ds4::staging
