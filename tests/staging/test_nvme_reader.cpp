// tests/staging/test_nvme_reader.cpp — the mmap, pread and NvmeReader (io_uring with and without
// fixed buffers, pread pool) paths return identical bytes for random expert slices of a GGUF
// written by GgufWriter whose expert data lies above 4 GiB (sparse file); fallbacks (io_uring
// disabled, O_DIRECT refused, EAGAIN storms) are selected, counted and lose no request.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gguf/gguf_file.h"
#include "staging/expert_slabs.h"
#include "staging/nvme_reader.h"
#include "staging_fixture.h"
#include "tests/support/test_env.h"

namespace ds4::staging {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

struct Slice {
  uint64_t file_offset, length;
  const uint8_t* mapped;
};

class ReaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(test::scratch_dir("staging_reader"));
    path_ = new std::string((*dir_ / "experts_above_4g.gguf").string());
    const std::string err = test::write_expert_gguf(*path_, 5);
    ASSERT_EQ(err, "");
    auto m = gguf::GgufModel::open(*path_);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = new gguf::GgufModel(std::move(*m));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete path_;
    delete dir_;
  }
  /// Random expert slices: whole projections, single rows and odd sub-ranges of rows.
  static std::vector<Slice> random_slices(int n, uint64_t seed) {
    auto L = ExpertLayout::from_gguf(*model_);
    EXPECT_TRUE(L.ok());
    std::mt19937_64 rng(seed);
    std::vector<Slice> v;
    for (int i = 0; i < n; ++i) {
      const int l = static_cast<int>(rng() % kLayers), e = static_cast<int>(rng() % test::kFxExperts);
      const auto src = L->sources(l, e);
      const SlabSource& s = src[rng() % src.size()];
      uint64_t off = 0, len = s.bytes;
      if (i % 3 == 1) {  // an arbitrary sub-range, usually not aligned and not a block multiple
        off = rng() % s.bytes;
        len = 1 + rng() % (s.bytes - off);
      }
      v.push_back({s.file_offset + off, len, s.mapped + off});
    }
    return v;
  }
  static std::vector<uint8_t> pread_bytes(uint64_t off, uint64_t len) {
    std::vector<uint8_t> b(len);
    const int fd = ::open(path_->c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, b.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
    ::close(fd);
    return b;
  }
  static void check_reader(NvmeReader& rd, const std::vector<Slice>& slices) {
    std::vector<ReadRequest> reqs;
    std::vector<std::vector<uint8_t>> out;
    std::vector<uint8_t*> dst;
    for (const Slice& s : slices) {
      reqs.push_back({0, s.file_offset, s.length});
      out.emplace_back(s.length, 0xee);
    }
    for (auto& o : out) dst.push_back(o.data());
    auto r = rd.read_into(reqs, dst);
    ASSERT_TRUE(r.ok()) << r.error().message;
    for (size_t i = 0; i < slices.size(); ++i) {
      ASSERT_EQ(std::memcmp(out[i].data(), slices[i].mapped, slices[i].length), 0)
          << "slice " << i << " offset " << slices[i].file_offset << " length " << slices[i].length;
    }
    const ReaderCounters c = rd.counters();
    uint64_t want = 0;
    for (const Slice& s : slices) want += s.length;
    EXPECT_EQ(c.bytes, want);
    EXPECT_EQ(c.reads, c.direct_reads + c.buffered_reads);
    EXPECT_GE(c.reads, slices.size());
    EXPECT_GE(c.lat_p90_us, c.lat_p50_us);
    EXPECT_GE(c.lat_max_us, c.lat_p99_us);
  }
  static constexpr int kLayers = test::kFxLayers;
  static std::filesystem::path* dir_;
  static std::string* path_;
  static gguf::GgufModel* model_;
};
std::filesystem::path* ReaderTest::dir_ = nullptr;
std::string* ReaderTest::path_ = nullptr;
gguf::GgufModel* ReaderTest::model_ = nullptr;

TEST_F(ReaderTest, ExpertDataLiesAbove4GiB) {
  const gguf::TensorInfo* t = model_->find("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_GT(t->file_offset, 4 * kGiB);
  EXPECT_NE(t->file_offset % 4096, 0u);  // not O_DIRECT aligned: the reader must cover
}

TEST_F(ReaderTest, MmapAndPreadAgree) {
  for (const Slice& s : random_slices(60, 7)) {
    auto b = pread_bytes(s.file_offset, s.length);
    ASSERT_EQ(std::memcmp(b.data(), s.mapped, s.length), 0);
  }
}

TEST_F(ReaderTest, IoUringDefaultMatchesMmap) {
  ReaderOptions o;
  auto rd = NvmeReader::open({*path_}, o);
  ASSERT_TRUE(rd.ok()) << rd.error().message;
  std::printf("default backend: %s\n", (*rd)->backend_reason().c_str());
  if ((*rd)->backend() == ReaderBackend::PreadPool)
    GTEST_SKIP() << "io_uring unavailable here: " << (*rd)->backend_reason();
  check_reader(**rd, random_slices(200, 11));
  EXPECT_GT((*rd)->counters().direct_reads, 0u) << "ext4 scratch file should read with O_DIRECT";
}

TEST_F(ReaderTest, IoUringFixedBuffersMatchMmap) {
  ReaderOptions o;
  o.queue_depth = 4;
  o.buffer_bytes = 8192;  // small: requests span several pieces; 32 KiB fits any memlock limit
  auto rd = NvmeReader::open({*path_}, o);
  ASSERT_TRUE(rd.ok()) << rd.error().message;
  std::printf("small-buffer backend: %s\n", (*rd)->backend_reason().c_str());
  if ((*rd)->backend() != ReaderBackend::UringFixed)
    GTEST_SKIP() << "fixed buffers unavailable here: " << (*rd)->backend_reason();
  check_reader(**rd, random_slices(200, 12));
  EXPECT_GT((*rd)->counters().reads, 200u);  // multi-piece requests
}

TEST_F(ReaderTest, PlainIoUringMatchesMmap) {
  ReaderOptions o;
  o.disable_fixed_buffers = true;
  o.queue_depth = 8;
  o.buffer_bytes = 16384;
  auto rd = NvmeReader::open({*path_}, o);
  ASSERT_TRUE(rd.ok()) << rd.error().message;
  if ((*rd)->backend() == ReaderBackend::PreadPool) GTEST_SKIP() << (*rd)->backend_reason();
  EXPECT_EQ((*rd)->backend(), ReaderBackend::Uring);
  EXPECT_NE((*rd)->backend_reason().find("disabled by option"), std::string::npos) << (*rd)->backend_reason();
  check_reader(**rd, random_slices(200, 13));
}

TEST_F(ReaderTest, DisabledIoUringSelectsPreadPool) {
  ReaderOptions o;
  o.disable_uring = true;
  o.buffer_bytes = 8192;
  auto rd = NvmeReader::open({*path_}, o);
  ASSERT_TRUE(rd.ok()) << rd.error().message;
  EXPECT_EQ((*rd)->backend(), ReaderBackend::PreadPool);
  EXPECT_NE((*rd)->backend_reason().find("disabled by option"), std::string::npos) << (*rd)->backend_reason();
  check_reader(**rd, random_slices(200, 14));
  EXPECT_EQ((*rd)->counters().backend, "pread-pool");
}

TEST_F(ReaderTest, EnvironmentSwitchDisablesIoUring) {
  ::setenv("DS4_DISABLE_IO_URING", "1", 1);
  ReaderOptions o;
  apply_reader_env(&o);
  ::unsetenv("DS4_DISABLE_IO_URING");
  EXPECT_TRUE(o.disable_uring);
  auto rd = NvmeReader::open({*path_}, o);
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ((*rd)->backend(), ReaderBackend::PreadPool);
}

TEST_F(ReaderTest, EagainIsRetriedWithoutLosingRequests) {
  for (bool uring : {true, false}) {
    ReaderOptions o;
    o.disable_uring = !uring;
    o.buffer_bytes = 8192;
    o.inject_eagain_every = 3;
    auto rd = NvmeReader::open({*path_}, o);
    ASSERT_TRUE(rd.ok());
    check_reader(**rd, random_slices(100, 15));
    EXPECT_GT((*rd)->counters().retries, 0u) << reader_backend_name((*rd)->backend());
  }
}

TEST_F(ReaderTest, PersistentEagainFallsBackToPread) {
  ReaderOptions o;
  o.buffer_bytes = 8192;
  o.inject_eagain_every = 1;  // every completion fails
  auto rd = NvmeReader::open({*path_}, o);
  ASSERT_TRUE(rd.ok());
  (*rd)->reset_counters();
  const auto slices = random_slices(30, 16);
  check_reader(**rd, slices);
  const ReaderCounters c = (*rd)->counters();
  EXPECT_EQ(c.fallback_preads, c.reads);
  EXPECT_GE(c.retries, 6 * c.reads);
}

TEST_F(ReaderTest, OutOfRangeRequestIsAnError) {
  auto rd = NvmeReader::open({*path_}, ReaderOptions{});
  ASSERT_TRUE(rd.ok());
  const ReadRequest bad{0, (*rd)->file_size(0) - 10, 20};
  auto r = (*rd)->read(std::span<const ReadRequest>(&bad, 1), [](size_t, uint64_t, const uint8_t*, uint64_t) {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("exceeds the file size"), std::string::npos) << r.error().message;
  EXPECT_FALSE(NvmeReader::open({*dir_ / "missing.gguf"}, ReaderOptions{}).ok());
  ReaderOptions odd;
  odd.buffer_bytes = 5000;
  EXPECT_FALSE(NvmeReader::open({*path_}, odd).ok());
}

/// A small file with odd content, for the O_DIRECT refusal tests.
std::string write_plain_file(const std::filesystem::path& dir, uint64_t n, std::vector<uint8_t>* content) {
  content->resize(n);
  std::mt19937 rng(3);
  for (auto& b : *content) b = static_cast<uint8_t>(rng());
  const std::string p = (dir / "plain.bin").string();
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(content->data()), static_cast<std::streamsize>(n));
  return p;
}

void check_plain(NvmeReader& rd, const std::vector<uint8_t>& content) {
  std::mt19937_64 rng(5);
  std::vector<ReadRequest> reqs;
  for (int i = 0; i < 50; ++i) {
    const uint64_t off = rng() % content.size();
    reqs.push_back({0, off, 1 + rng() % (content.size() - off)});
  }
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t*> dst;
  for (auto& r : reqs) out.emplace_back(r.length);
  for (auto& o : out) dst.push_back(o.data());
  auto r = rd.read_into(reqs, dst);
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (size_t i = 0; i < reqs.size(); ++i)
    ASSERT_EQ(std::memcmp(out[i].data(), content.data() + reqs[i].offset, reqs[i].length), 0);
}

TEST(ReaderODirect, TmpfsReadsCorrectlyAndCountersAddUp) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const auto dir = std::filesystem::path("/dev/shm") / ("ds4_staging_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<uint8_t> content;
  const std::string p = write_plain_file(dir, 300001, &content);
  for (bool uring : {true, false}) {
    ReaderOptions o;
    o.disable_uring = !uring;
    o.buffer_bytes = 65536;
    auto rd = NvmeReader::open({p}, o);
    ASSERT_TRUE(rd.ok());
    check_plain(**rd, content);
    const ReaderCounters c = (*rd)->counters();
    std::printf("tmpfs via %s: %llu reads, %llu direct, %llu buffered, %llu O_DIRECT refusals\n", c.backend.c_str(),
                (unsigned long long)c.reads, (unsigned long long)c.direct_reads, (unsigned long long)c.buffered_reads,
                (unsigned long long)c.direct_refused);
    EXPECT_EQ(c.reads, c.direct_reads + c.buffered_reads);
    // Kernels before 6.6 refuse O_DIRECT on tmpfs: then every read is buffered and it is counted.
    if (c.direct_refused > 0) { EXPECT_EQ(c.buffered_reads, c.reads); }
    if (!(*rd)->file_direct(0)) { EXPECT_GT(c.direct_refused, 0u); }
  }
  std::filesystem::remove_all(dir);
}

TEST(ReaderODirect, InjectedEinvalFallsBackToBufferedAndIsCounted) {
  const auto dir = test::scratch_dir("staging_odirect");
  std::vector<uint8_t> content;
  const std::string p = write_plain_file(dir, 200003, &content);
  for (bool uring : {true, false}) {
    ReaderOptions o;
    o.disable_uring = !uring;
    o.buffer_bytes = 65536;
    o.inject_direct_einval = true;
    auto rd = NvmeReader::open({p}, o);
    ASSERT_TRUE(rd.ok());
    check_plain(**rd, content);
    const ReaderCounters c = (*rd)->counters();
    EXPECT_GE(c.direct_refused, 1u);
    EXPECT_EQ(c.direct_reads, 0u);
    EXPECT_EQ(c.buffered_reads, c.reads);
    EXPECT_FALSE((*rd)->file_direct(0));
  }
  // Without injection the same ext4 file is read directly.
  auto rd = NvmeReader::open({p}, ReaderOptions{});
  ASSERT_TRUE(rd.ok());
  if ((*rd)->file_direct(0)) {
    check_plain(**rd, content);
    EXPECT_GT((*rd)->counters().direct_reads, 0u);
  }
}

}  // namespace
}  // namespace ds4::staging
