// tests/gpu/test_chunk_decode_host.cpp — CPU-only check (label unit) of the CUDA chunk decoders
// (kernels/cuda/common/chunk_decode.cuh): the header is compiled for the host with the CUDA
// intrinsics it uses emulated (tests/gpu/cuda_host_emu.h), and every type's chunk partial is compared bit for
// bit with the CPU reference's dot_chunk_* on random blocks. This catches decoder logic errors
// (word order, shifts, sign masks, tables, epilogue order) on machines without a GPU; the gpu
// tests check the same on real hardware.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "tests/gpu/cuda_host_emu.h"  // before any kernels/cuda header

#include "kernels/cuda/common/chunk_decode.cuh"
#include "kernels/cuda/common/type_list.cuh"
#include "tests/gpu/quant_test_data.h"

namespace ds4::gputest {
namespace {

template <class Tr>
float emulated_partial(const uint8_t* row, const quant::BlockQ8_1& a, int64_t b) {
  int w[8];
  cuda::ChunkMeta m;
  typename Tr::Block blk;
  std::memcpy(&blk, row + (b / Tr::kChunks) * int64_t(sizeof(blk)), sizeof(blk));
  Tr::decode(blk, int(b % Tr::kChunks), w, m);
  cuda::ActWords aw;
  aw.da = quant::fp16_to_f32(a.d);
  std::memcpy(aw.q, a.qs, 32);
  return cuda::chunk_dot_dp4a<Tr::kEpi>(w, m, aw);
}

float emulated_partial(GgmlType type, const uint8_t* row, const quant::BlockQ8_1& a, int64_t b) {
  switch (type) {
#define DS4_CASE(T) \
  case GgmlType::T: return emulated_partial<cuda::Traits##T>(row, a, b);
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    default: ADD_FAILURE() << "no traits for " << type_name(type); return 0.0f;
  }
}

TEST(ChunkDecodeHost, IntrinsicEmulationSanity) {
  EXPECT_EQ(__vcmpne4(0x00010200u, 0x00010300u), 0x0000FF00u);
  EXPECT_EQ(__vsub4(0x00000000u, 0x01010101u), 0xFFFFFFFFu);
  EXPECT_EQ(__byte_perm(0x03020100u, 0x07060504u, 0x7654u), 0x07060504u);
  EXPECT_EQ(__dp4a(int(0xFF02FF01u), 0x01010101, 10), 10 + 1 - 1 + 2 - 1);
}

TEST(ChunkDecodeHost, PartialsBitIdenticalToCpuContractForEveryType) {
  std::mt19937 rng(3);
  const int64_t cols = 4096;
  for (GgmlType type : all_types()) {
    SCOPED_TRACE(type_name(type));
    for (int rep = 0; rep < 8; ++rep) {
      const auto w = random_weights(type, 1, cols, rng);
      const auto act = cpu_q8_1(random_acts(1, cols, rng, 2.0f), 1, cols);
      int64_t bad = 0;
      for (int64_t b = 0; b < cols / 32; ++b) {
        quant::BlockQ8_1 a;
        std::memcpy(&a, act.data() + b * int64_t(sizeof(a)), sizeof(a));
        const float got = emulated_partial(type, w.data(), a, b), want = cpu_chunk_partial(type, w.data(), a, b);
        if (bits(got) != bits(want) && bad++ < 3)
          ADD_FAILURE() << "chunk " << b << ": got " << got << " want " << want;
      }
      ASSERT_EQ(bad, 0);
    }
  }
}

}  // namespace
}  // namespace ds4::gputest
