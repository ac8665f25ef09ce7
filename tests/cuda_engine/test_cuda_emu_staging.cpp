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

#include <algorithm>
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

/// Two rounds of moe_experts over `E` experts whose 3 matrices each are all bound staged ahead of
/// the round's one launch (the engine's pipeline, issue 20 item 2; the ring holds exactly one
/// round, so round 2's copies wait for round 1's readers and still run when round 2's launch is
/// queued), from pinned sources with WeightMatrix::source_persists = `persists`, other weights in
/// each round: both rounds' slots must equal the CPU backend's bits under seed `seed` (a launch not
/// waiting for its copies reads round 1's or garbage bytes); returns the staged-bind counters.
/// Non-persistent sources are overwritten after bind returns (the owner may reuse them then).
dev::StagedBindStats run_experts_ahead(uint64_t seed, int E, bool persists, int busy) {
  emu::reset();
  emu::set_seed(seed);
  constexpr int64_t kDim = 64, kFf = 32, kTokens = 5, kK = 2;
  constexpr int kRounds = 2;
  auto made = cuda::make_cuda_device(cuda::CudaDeviceOptions{0, 3 * E});
  EXPECT_TRUE(made.ok());
  if (!made.ok()) return {};
  std::unique_ptr<dev::Device> d = std::move(made).value();
  std::unique_ptr<dev::Device> cpu = dev::make_cpu_device(1);
  const std::vector<float> xv = randn(static_cast<size_t>(kDim * kTokens), 11);
  std::vector<int32_t> idv;
  std::vector<float> wv;
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t k = 0; k < kK; ++k) {
      idv.push_back(static_cast<int32_t>((t + 3 * k) % E));  // distinct per token while E > 3
      wv.push_back(0.25f + 0.5f * float(k) + 0.125f * float(t));
    }
  struct Pair {
    std::unique_ptr<dev::Device>* d = nullptr;
    dev::OwnedTensor x, ids, w, slots[kRounds];
  };
  Pair dp, cp;
  dp.d = &d;
  cp.d = &cpu;
  for (Pair* p : {&dp, &cp}) {
    dev::Device& dd = **p->d;
    p->x = dd.alloc_tensor(GgmlType::F32, kDim, kTokens);
    p->ids = dd.alloc_tensor(GgmlType::I32, kK, kTokens);
    p->w = dd.alloc_tensor(GgmlType::F32, kK, kTokens);
    for (auto& sl : p->slots) sl = dd.alloc_tensor(GgmlType::F32, kDim, kTokens * kK);
    dd.upload(dd.stream(), p->x.t, xv.data(), xv.size() * 4);
    dd.upload(dd.stream(), p->ids.t, idv.data(), idv.size() * 4);
    dd.upload(dd.stream(), p->w.t, wv.data(), wv.size() * 4);
  }
  // Host matrices [round][expert][gate, up: dim -> ff; down: ff -> dim] (Q8_0 and F32).
  std::vector<std::vector<uint8_t>> host;
  std::vector<dev::WeightMatrix> mats;
  for (int r = 0; r < kRounds; ++r)
    for (int e = 0; e < E; ++e)
      for (int p = 0; p < 3; ++p) {
        const GgmlType type = (e + p) % 2 ? GgmlType::Q8_0 : GgmlType::F32;
        const int64_t in = p == 2 ? kFf : kDim, out = p == 2 ? kDim : kFf;
        host.push_back(make_weight(type, in, out, static_cast<uint32_t>(500 + 100 * r + 3 * e + p)));
        mats.push_back({type, nullptr, in, out, dev::row_bytes_of(type, in)});
      }
  uint64_t pinned_bytes = 0, largest = 0;
  for (const auto& h : host) {
    pinned_bytes += h.size();
    largest = std::max<uint64_t>(largest, h.size());
  }
  void* pin = nullptr;
  EXPECT_EQ(cudaMallocHost(&pin, pinned_bytes), cudaSuccess);
  auto* at = static_cast<uint8_t*>(pin);
  for (size_t i = 0; i < host.size(); ++i) {
    std::memcpy(at, host[i].data(), host[i].size());
    mats[i].data = at;
    mats[i].source_persists = persists;
    at += host[i].size();
  }
  EXPECT_EQ(d->reserve_staged_binds(largest), 3 * E);
  dev::OwnedTensor scratch = d->alloc_tensor(GgmlType::F32, 32, 1);
  for (int i = 0; i < busy; ++i) d->fill(d->stream(), scratch.t, float(i));
  for (int r = 0; r < kRounds; ++r) {
    // Bound in descending expert order: expert 0, launched first, has the last copies queued.
    std::vector<dev::ExpertTensors> ex(static_cast<size_t>(E)), exc;
    d->set_bind_mode(dev::BindMode::Staged);
    for (int e = E - 1; e >= 0; --e) {
      const size_t b = static_cast<size_t>(3 * (r * E + e));
      ex[static_cast<size_t>(e)] = {e, d->bind(mats[b]), d->bind(mats[b + 1]), d->bind(mats[b + 2])};
      if (!persists)
        for (size_t i = b; i < b + 3; ++i) std::memset(const_cast<uint8_t*>(mats[i].data), 0xFF, host[i].size());
    }
    d->set_bind_mode(dev::BindMode::Persistent);
    for (int e = 0; e < E; ++e) {
      dev::WeightMatrix m[3];
      for (int p = 0; p < 3; ++p) {
        m[p] = mats[static_cast<size_t>(3 * (r * E + e) + p)];
        m[p].data = host[static_cast<size_t>(3 * (r * E + e) + p)].data();
      }
      exc.push_back({e, cpu->bind(m[0]), cpu->bind(m[1]), cpu->bind(m[2])});
    }
    d->moe_experts(d->stream(), dp.x.t, dp.ids.t, dp.w.t, ex, 7.0f, dev::ActFormat::F32, dp.slots[r].t);
    cpu->moe_experts(cpu->stream(), cp.x.t, cp.ids.t, cp.w.t, exc, 7.0f, dev::ActFormat::F32, cp.slots[r].t);
  }
  for (int r = 0; r < kRounds; ++r) {
    std::vector<float> got(static_cast<size_t>(kDim * kTokens * kK)), want(got.size());
    d->download(d->stream(), dp.slots[r].t, got.data(), got.size() * 4);
    cpu->download(cpu->stream(), cp.slots[r].t, want.data(), want.size() * 4);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << "seed " << seed << ", round " << r << ", " << E << " experts bound ahead, persistent sources " << persists
        << ", busy " << busy << ": first slot value " << got[0] << ", expected " << want[0];
  }
  const dev::StagedBindStats st = d->staged_bind_stats();
  d.reset();
  EXPECT_EQ(cudaFreeHost(pin), cudaSuccess);
  return st;
}

// Every expert of a launch bound ahead: with sources that persist, no host wait per copy and the
// first expert launch finds the other experts' copies queued; with sources the owner may reuse,
// one host wait per copy (and the products stay right though the sources are overwritten).
TEST(CudaEmuStaging, ExpertsBoundAheadGiveTheCpuSlotsWithoutHostWaits) {
  for (uint64_t seed = 1; seed <= 4; ++seed)
    for (int busy : {0, 150}) {
      const dev::StagedBindStats a = run_experts_ahead(seed, 5, true, busy);
      EXPECT_EQ(a.copies, 30u);
      EXPECT_EQ(a.direct_waits, 0u);
      EXPECT_EQ(a.bounced, 0u);
      EXPECT_EQ(a.max_ahead, 12u);  // expert 0's launch in a round: the 4 others' 3 copies each
      EXPECT_EQ(a.overwritten_unread, 0u);
      const dev::StagedBindStats b = run_experts_ahead(seed, 5, false, busy);
      EXPECT_EQ(b.copies, 30u);
      EXPECT_EQ(b.direct_waits, 30u);
      EXPECT_EQ(b.max_ahead, 12u);
    }
}

// A larger matrix bound while smaller staged ones still await their readers: the ring is remade,
// the old one kept until the next reserve_staged_binds, and every product stays right.
TEST(CudaEmuStaging, GrowingWhileStagedTensorsAwaitReadersKeepsThem) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    emu::reset();
    emu::set_seed(seed);
    auto made = cuda::make_cuda_device(cuda::CudaDeviceOptions{0, 4});
    ASSERT_TRUE(made.ok());
    std::unique_ptr<dev::Device> d = std::move(made).value();
    std::unique_ptr<dev::Device> cpu = dev::make_cpu_device(1);
    constexpr int64_t kIn = 64, kTokens = 2;
    const std::vector<float> xv = randn(static_cast<size_t>(kIn * kTokens), 9);
    dev::OwnedTensor x = d->alloc_tensor(GgmlType::F32, kIn, kTokens), xc = cpu->alloc_tensor(GgmlType::F32, kIn, kTokens);
    d->upload(d->stream(), x.t, xv.data(), xv.size() * 4);
    cpu->upload(cpu->stream(), xc.t, xv.data(), xv.size() * 4);
    const int64_t outs[3] = {8, 9, 1100};  // the third outgrows the first ring's 64 KiB slots
    std::vector<std::vector<uint8_t>> w;
    std::vector<dev::OwnedTensor> ys;
    for (int64_t o : outs) {
      w.push_back(make_weight(GgmlType::F32, kIn, o, static_cast<uint32_t>(40 + o)));
      ys.push_back(d->alloc_tensor(GgmlType::F32, o, kTokens));
    }
    EXPECT_EQ(d->reserve_staged_binds(w[0].size()), 4);
    std::vector<dev::Tensor> t;
    d->set_bind_mode(dev::BindMode::Staged);
    for (size_t i = 0; i < 3; ++i) {
      dev::WeightMatrix m{GgmlType::F32, w[i].data(), kIn, outs[i], dev::row_bytes_of(GgmlType::F32, kIn)};
      m.source_persists = true;
      t.push_back(d->bind(m));
    }
    d->set_bind_mode(dev::BindMode::Persistent);
    for (size_t i = 0; i < 3; ++i) d->matmul(d->stream(), t[i], x.t, ys[i].t, dev::ActFormat::F32);
    EXPECT_EQ(d->reserve_staged_binds(w[2].size()), 4);  // frees the retired ring
    for (size_t i = 0; i < 3; ++i) {
      const dev::WeightMatrix m{GgmlType::F32, w[i].data(), kIn, outs[i], dev::row_bytes_of(GgmlType::F32, kIn)};
      dev::OwnedTensor yc = cpu->alloc_tensor(GgmlType::F32, outs[i], kTokens);
      cpu->matmul(cpu->stream(), cpu->bind(m), xc.t, yc.t, dev::ActFormat::F32);
      std::vector<float> want(static_cast<size_t>(outs[i] * kTokens)), got(want.size());
      cpu->download(cpu->stream(), yc.t, want.data(), want.size() * 4);
      d->download(d->stream(), ys[i].t, got.data(), got.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "seed " << seed << ", matrix " << i;
    }
    EXPECT_EQ(d->staged_bind_stats().overwritten_unread, 0u);
  }
}

// More staged binds awaiting readers than the ring has slots: the counter names the overwrite.
TEST(CudaEmuStaging, BindingMoreThanTheRingAheadIsCounted) {
  emu::reset();
  auto made = cuda::make_cuda_device(cuda::CudaDeviceOptions{0, 4});
  ASSERT_TRUE(made.ok());
  std::unique_ptr<dev::Device> d = std::move(made).value();
  const std::vector<uint8_t> w = make_weight(GgmlType::F32, 64, 8, 3);
  const dev::WeightMatrix m{GgmlType::F32, w.data(), 64, 8, 256};
  EXPECT_EQ(d->reserve_staged_binds(w.size()), 4);
  d->set_bind_mode(dev::BindMode::Staged);
  for (int i = 0; i < 6; ++i) (void)d->bind(m);
  d->set_bind_mode(dev::BindMode::Persistent);
  const dev::StagedBindStats s = d->staged_bind_stats();
  EXPECT_EQ(s.copies, 6u);
  EXPECT_EQ(s.bounced, 6u);  // a pageable source
  EXPECT_EQ(s.overwritten_unread, 2u);
  EXPECT_EQ(dev::make_cpu_device(1)->reserve_staged_binds(1024), 0);  // the CPU: no ring
}

}  // namespace
}  // namespace ds4
