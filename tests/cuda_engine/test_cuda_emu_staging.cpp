// cuda_emu_staging_test (labels emu, unit): the CUDA backend's staged binds (dev::BindMode::Staged:
// host bytes -> a ring of device slots through staging::CopyEngine, kernels/cuda/device_cuda.h),
// compiled against the CUDA emulation. Many more matrices than the ring has slots are bound staged
// and multiplied before anything is read back, so the emulator's lazy, seeded interleaving of the
// compute and copy streams runs a refill of a slot wherever the event order allows: a missing
// wait (copy before the previous reader, reader before its copy) gives a wrong product under some
// seed. Sources are pinned (cudaMallocHost: copied directly) or pageable (through the pinned
// bounce ring), and each source is overwritten right after bind returns (the expert store may
// reuse it then). Expected products: the CPU backend's (kernels/cpu, the numerics contract: the
// F32-activation matmul of every weight type is bit-exact between the backends).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/quant_ref.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"
#include "tests/support/random.h"

namespace ds4 {
namespace {

using test::randn;

/// Bytes of a weight matrix [out, in] of `type` made from random values.
std::vector<uint8_t> make_weight(GgmlType type, int64_t in, int64_t out, uint32_t seed) {
  const uint64_t rb = dev::row_bytes_of(type, in);
  const std::vector<float> w = randn(static_cast<size_t>(in * out), seed);
  std::vector<uint8_t> mem(rb * static_cast<uint64_t>(out));
  for (int64_t r = 0; r < out; ++r) {
    if (type == GgmlType::F32)
      std::memcpy(mem.data() + r * rb, w.data() + r * in, static_cast<size_t>(in) * 4);
    else
      cpu::quantize_row(type, w.data() + r * in, mem.data() + r * rb, in);
  }
  return mem;
}

struct Case {
  GgmlType type;
  int64_t out;
  bool pinned;
};

/// Binds `cases` staged on a CUDA device with `slots` staging slots (seed `seed`), multiplies
/// each by the same activations, and compares every product with the CPU backend's. `busy`
/// fills queued on the compute stream first make it lag behind the copy stream (a refill racing
/// ahead of the slot's previous reader then shows).
void run_staged(uint64_t seed, int slots, const std::vector<Case>& cases, int busy) {
  emu::reset();
  emu::set_seed(seed);
  constexpr int64_t kIn = 64, kTokens = 3;
  auto made = cuda::make_cuda_device(cuda::CudaDeviceOptions{0, slots});
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<dev::Device> d = std::move(made).value();
  std::unique_ptr<dev::Device> cpu = dev::make_cpu_device(1);
  const std::vector<float> xv = randn(static_cast<size_t>(kIn * kTokens), 7);
  dev::OwnedTensor x = d->alloc_tensor(GgmlType::F32, kIn, kTokens);
  dev::OwnedTensor xc = cpu->alloc_tensor(GgmlType::F32, kIn, kTokens);
  d->upload(d->stream(), x.t, xv.data(), xv.size() * 4);
  cpu->upload(cpu->stream(), xc.t, xv.data(), xv.size() * 4);

  std::vector<std::vector<uint8_t>> originals, pageable;
  uint64_t pinned_bytes = 0, total = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    originals.push_back(make_weight(cases[i].type, kIn, cases[i].out, static_cast<uint32_t>(100 + i)));
    pinned_bytes += originals.back().size();
  }
  void* pin = nullptr;
  ASSERT_EQ(cudaMallocHost(&pin, pinned_bytes), cudaSuccess);
  auto* pin_at = static_cast<uint8_t*>(pin);
  // Outputs first: alloc waits for the compute stream (it zeroes there), which would let the
  // compute stream catch up between binds.
  std::vector<dev::OwnedTensor> ys;
  for (const Case& c : cases) ys.push_back(d->alloc_tensor(GgmlType::F32, c.out, kTokens));
  dev::OwnedTensor scratch = d->alloc_tensor(GgmlType::F32, 32, 1);
  for (int i = 0; i < busy; ++i) d->fill(d->stream(), scratch.t, float(i));
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<uint8_t>& w = originals[i];
    uint8_t* src = nullptr;
    if (cases[i].pinned) {
      src = pin_at;
      pin_at += w.size();
    } else {
      pageable.emplace_back(w.size());
      src = pageable.back().data();
    }
    std::memcpy(src, w.data(), w.size());
    const dev::WeightMatrix m{cases[i].type, src, kIn, cases[i].out, dev::row_bytes_of(cases[i].type, kIn)};
    d->set_bind_mode(dev::BindMode::Staged);
    const dev::Tensor t = d->bind(m);
    d->set_bind_mode(dev::BindMode::Persistent);
    std::memset(src, 0xFF, w.size());  // the store may reuse the source once bind returned (NaN bytes)
    d->matmul(d->stream(), t, x.t, ys[i].t, dev::ActFormat::F32);
    total += w.size();
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const dev::WeightMatrix m{cases[i].type, originals[i].data(), kIn, cases[i].out,
                              dev::row_bytes_of(cases[i].type, kIn)};
    dev::OwnedTensor yc = cpu->alloc_tensor(GgmlType::F32, cases[i].out, kTokens);
    cpu->matmul(cpu->stream(), cpu->bind(m), xc.t, yc.t, dev::ActFormat::F32);
    std::vector<float> want(static_cast<size_t>(cases[i].out * kTokens)), got(want.size());
    cpu->download(cpu->stream(), yc.t, want.data(), want.size() * 4);
    d->download(d->stream(), ys[i].t, got.data(), got.size() * 4);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << "seed " << seed << (busy ? " (busy compute stream)" : "") << ", matrix " << i << (cases[i].pinned ? " (pinned source)" : " (pageable source)")
        << ": first value " << got[0] << ", expected " << want[0];
  }
  const dev::WeightTierBytes tb = d->weight_tier_bytes();
  EXPECT_EQ(tb.h2d_staged, total);  // each staged bind copies its bytes once
  EXPECT_EQ(tb.staged, total);      // ... and each product read them from a staging slot
  EXPECT_EQ(tb.device_resident, 0u);
  d.reset();
  ASSERT_EQ(cudaFreeHost(pin), cudaSuccess);
}

// 40 matrices through a ring of 4 slots (each slot refilled 10 times while earlier products are
// still queued), pinned and pageable sources alternating, F32 and Q8_0 weights.
TEST(CudaEmuStaging, StagedMatricesGiveTheCpuProductsUnderEverySeed) {
  std::vector<Case> cases;
  for (int i = 0; i < 40; ++i) cases.push_back({i % 3 == 0 ? GgmlType::Q8_0 : GgmlType::F32, 16, i % 2 == 0});
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    run_staged(seed, 4, cases, 0);
    run_staged(seed, 4, cases, 200);
  }
}

// A larger matrix after the slots were sized for small ones: the ring is made anew, larger, and
// the products queued before (in the old slots) and after stay right.
TEST(CudaEmuStaging, LargerMatrixGrowsTheSlots) {
  std::vector<Case> cases;
  for (int i = 0; i < 12; ++i) cases.push_back({GgmlType::F32, i < 6 ? 8 : 1100, i % 2 == 1});
  for (uint64_t seed = 1; seed <= 3; ++seed) run_staged(seed, 4, cases, seed == 2 ? 200 : 0);
}

}  // namespace
}  // namespace ds4
