// kernels/cpu/mem_read_avx2.cpp — the AVX2 streaming reader of the memory probe (mem_bandwidth.cpp):
// every byte of each 64-byte line read by two 32-byte loads into two accumulators, plus a
// software prefetch 1 KiB ahead. On the 2-core development VM it reads 15-25 % faster than the
// baseline-ISA word sum (a plain AVX2 line reader 23-24 GB/s, with the prefetch 25-26, the SSE2
// sum 20.5-21; bench/README.md), i.e. it is closer to what the memory allows, which is what a
// bandwidth-bound kernel is compared with. Compiled with -mavx2 (CMake *_avx2.cpp rule): call only
// when cpu_avx2_usable().
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ds4::cpu::avx2 {

/// XOR-folded sum of the 64-bit lanes of [p, p + bytes); reads every byte once.
uint64_t sum_lines(const void* p, int64_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(b + i + 1024), _MM_HINT_T0);  // a hint: never faults
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i + 32)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(a0, a1));
  uint64_t s = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
  for (; i < bytes; ++i) s += b[i];
  return s;
}

}  // namespace ds4::cpu::avx2
