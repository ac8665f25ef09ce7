// tests/cpu_simd/test_row_pool.cpp — parallel_chunks covers [0, n) exactly once in ranges of at most
// `chunk`, for several thread counts, repeatedly (worker reuse), and nested calls run serially.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "kernels/cpu/row_pool.h"

namespace {

TEST(RowPool, CoversEveryItemOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    for (int64_t n : {1, 7, 64, 1000}) {
      for (int64_t chunk : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_range{0};
        ds4::cpu::parallel_chunks(n, chunk, threads, [&](int64_t b, int64_t e) {
          if (b < 0 || e > n || e <= b || e - b > chunk) bad_range.fetch_add(1);
          for (int64_t i = b; i < e && i < n; ++i) hits[size_t(i)].fetch_add(1);
        });
        EXPECT_EQ(bad_range.load(), 0);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " n " << n << " chunk " << chunk << " item " << i;
      }
    }
  }
}

TEST(RowPool, NestedCallsComplete) {
  std::atomic<int64_t> total{0};
  ds4::cpu::parallel_chunks(8, 1, 3, [&](int64_t, int64_t) {
    ds4::cpu::parallel_chunks(10, 2, 3, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  });
  EXPECT_EQ(total.load(), 80);
}

}  // namespace
