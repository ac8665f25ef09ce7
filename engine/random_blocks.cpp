// engine/random_blocks.cpp — see random_blocks.h.
#include "engine/random_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "ds4/result.h"
#include "ds4/splitmix64.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/grids.h"
#include "kernels/quant/scalar_formats.h"

namespace ds4 {

namespace {

using namespace ds4::quant;

// The generator of row `row`: its start state is a SplitMix64 output of (seed, row), so rows'
// streams start at unrelated points of the 2^64 cycle.
SplitMix64 row_rng(uint64_t seed, int64_t row) {
  SplitMix64 h{seed ^ (uint64_t(row) * 0xD1B54A32D192ED03ull)};
  h.next();
  return SplitMix64{h.next()};
}

void fill_random(SplitMix64& g, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = g.next();
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = g.next();
    std::memcpy(p + i, &v, n - i);
  }
}

// Q8_0's code of a random byte: -128 is read as -127 (ggml's quantizer never writes -128).
int8_t q8_code(uint8_t b) { return b == 0x80 ? int8_t(-127) : int8_t(b); }
// Q2_K sub-scale (both nibbles) from a random byte: 8..15.
uint8_t q2k_sub(uint8_t b) { return uint8_t(8 + (b & 7)); }

// fp16 bits of a positive scale, clamped to [2^-24, 65504] (finite, non-zero).
uint16_t fp16_scale(double d) { return f32_to_fp16(float(std::clamp(d, 5.9604644775390625e-8, 65504.0))); }

template <class T>
T* blocks_of(uint8_t* row) { return reinterpret_cast<T*>(row); }  // blocks are packed, align 1 or 2

}  // namespace

bool can_random_blocks(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS: case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

double random_blocks_unit_mean_square(GgmlType type) {
  DS4_CHECK(can_random_blocks(type));
  // Mean over a grid's entries and bytes of the squared value.
  auto grid_ms = [](int n, auto entry, auto byte) {
    double s = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < 8; ++j) s += double(byte(entry(i), j)) * double(byte(entry(i), j));
    return s / (8.0 * n);
  };
  double iq2_scale_ms = 0;  // E[((0.5 + s) * 0.25)^2], s uniform 0..15
  for (int s = 0; s < 16; ++s) iq2_scale_ms += (0.5 + s) * (0.5 + s) * 0.0625 / 16.0;
  double iq1_scale_ms = 0;  // E[(2s + 1)^2], s uniform 0..7
  for (int s = 0; s < 8; ++s) iq1_scale_ms += double(2 * s + 1) * double(2 * s + 1) / 8.0;
  const double delta_ms = double(kIQ1Delta) * double(kIQ1Delta);  // sign independent of the grid value
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: return 1.0;
    case GgmlType::Q8_0: {
      double s = 0;
      for (int b = 0; b < 256; ++b) s += double(q8_code(uint8_t(b))) * double(q8_code(uint8_t(b)));
      return s / 256.0;
    }
    case GgmlType::Q2_K: {
      double s = 0;
      for (int b = 0; b < 8; ++b)
        for (int q = 0; q < 4; ++q) s += double(q2k_sub(uint8_t(b))) * q2k_sub(uint8_t(b)) * (q - 1.5) * (q - 1.5);
      return s / 32.0;
    }
    case GgmlType::IQ2_XXS: return iq2_scale_ms * grid_ms(256, iq2xxs_grid, grid_u8);
    case GgmlType::IQ2_XS: return iq2_scale_ms * grid_ms(512, iq2xs_grid, grid_u8);
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return iq1_scale_ms * (grid_ms(2048, iq1s_grid, grid_i8) + delta_ms);
    case GgmlType::MXFP4: {
      double s = 0;
      for (int c = 0; c < 16; ++c) s += double(kvalues_mxfp4(c)) * double(kvalues_mxfp4(c));
      return s / 16.0;
    }
    default: DS4_CHECK(false); return 0;
  }
}

void random_block_rows(GgmlType type, int64_t ne0, int64_t row0, int64_t nrows, double rms, uint64_t seed, void* dst) {
  DS4_CHECK(can_random_blocks(type));
  DS4_CHECK(std::isfinite(rms) && rms > 0);
  const auto* geo = ggml_type_geometry(uint32_t(type));
  DS4_CHECK(geo != nullptr && ne0 > 0 && ne0 % geo->block_elems == 0);
  const int64_t nb = ne0 / geo->block_elems;
  const size_t rb = size_t(cpu::row_bytes(type, ne0));
  const double scale = rms / std::sqrt(random_blocks_unit_mean_square(type));
  const uint16_t d16 = fp16_scale(scale);
  const uint16_t dmin16 = fp16_scale(1.5 * double(fp16_to_f32(d16)));
  // MXFP4: 2^(e-128) is lo or 2 lo, lo = 2^floor(log2 scale); 2 lo with probability p makes
  // E[2^(2(e-128))] = scale^2: p*4 lo^2 + (1-p) lo^2 = scale^2.
  const int lo_exp = std::clamp(int(std::floor(std::log2(scale))), 2 - 128, 253 - 128);
  const double lo = std::ldexp(1.0, lo_exp);
  const double p_hi = std::clamp((scale * scale / (lo * lo) - 1.0) / 3.0, 0.0, 1.0);
  const int hi_threshold = int(std::lround(p_hi * 256.0));  // random byte < threshold -> 2 lo
  const double half_width = rms * std::sqrt(3.0);

  for (int64_t r = 0; r < nrows; ++r) {
    SplitMix64 g = row_rng(seed, row0 + r);
    uint8_t* row = static_cast<uint8_t*>(dst) + size_t(r) * rb;
    if (type == GgmlType::F32 || type == GgmlType::F16) {
      for (int64_t i = 0; i < ne0; ++i) {
        const double u = double(g.next() >> 11) * 0x1.0p-53;  // [0, 1)
        const float x = float((2.0 * u - 1.0) * half_width);
        if (type == GgmlType::F32) std::memcpy(row + 4 * i, &x, 4);
        else {
          const uint16_t h = f32_to_fp16(x);
          std::memcpy(row + 2 * i, &h, 2);
        }
      }
      continue;
    }
    fill_random(g, row, rb);
    for (int64_t b = 0; b < nb; ++b) {
      switch (type) {
        case GgmlType::Q8_0: {
          auto& k = blocks_of<BlockQ8_0>(row)[b];
          k.d = d16;
          for (auto& q : k.qs) q = q8_code(uint8_t(q));
          break;
        }
        case GgmlType::Q2_K: {
          auto& k = blocks_of<BlockQ2_K>(row)[b];
          for (auto& s : k.scales) s = uint8_t(q2k_sub(s) | (q2k_sub(s) << 4));
          k.d = d16;
          k.dmin = dmin16;
          break;
        }
        case GgmlType::IQ2_XXS: blocks_of<BlockIQ2_XXS>(row)[b].d = d16; break;
        case GgmlType::IQ2_XS: blocks_of<BlockIQ2_XS>(row)[b].d = d16; break;
        case GgmlType::IQ1_S: blocks_of<BlockIQ1_S>(row)[b].d = d16; break;
        case GgmlType::IQ1_M: {
          // The fp16 super-scale's nibble k is the top nibble of scale word k (iq1m_scale_bits).
          auto& k = blocks_of<BlockIQ1_M>(row)[b];
          for (int w = 0; w < 4; ++w)
            k.scales[2 * w + 1] = uint8_t((k.scales[2 * w + 1] & 0x0F) | (((d16 >> (4 * w)) & 0xF) << 4));
          break;
        }
        case GgmlType::MXFP4: {
          auto& k = blocks_of<BlockMXFP4>(row)[b];
          k.e = uint8_t(128 + lo_exp + (int(k.e) < hi_threshold ? 1 : 0));
          break;
        }
        default: DS4_CHECK(false);
      }
    }
  }
}

void random_block_tensor(GgmlType type, int64_t ne0, int64_t nrows, double rms, uint64_t seed, void* dst, int threads) {
  const size_t rb = size_t(cpu::row_bytes(type, ne0));
  const int64_t nt = std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, nrows / 16));
  auto work = [&](int64_t r0, int64_t r1) {
    random_block_rows(type, ne0, r0, r1 - r0, rms, seed, static_cast<uint8_t*>(dst) + size_t(r0) * rb);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < nt; ++t) pool.emplace_back(work, nrows * t / nt, nrows * (t + 1) / nt);
  work(0, nrows / nt);
  for (auto& th : pool) th.join();
}

}  // namespace ds4
