// tests/gguf/gguf_sparse_test.cpp — offsets and sizes above 4 GiB: a sparse file (holes made by
// GgufWriter::add_tensor_zero) with two 5 GiB tensors and a small tensor past 10 GiB. Only a few
// pages are touched; the file takes almost no disk space.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/quant/ggml_type.h"
#include "tests/support/test_env.h"

namespace ds4::gguf {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

TEST(GgufSparse, TensorsAbove4GiB) {
  const auto dir = ds4::test::scratch_dir("gguf_sparse");
  const std::string path = (dir / "huge.gguf").string();
  GgufWriter w;
  w.set_alignment(64);
  w.metadata().set("general.architecture", Value::make_string("test"));
  std::vector<uint8_t> head(64), tail(96);
  for (size_t k = 0; k < head.size(); ++k) head[k] = uint8_t(k + 1);
  for (size_t k = 0; k < tail.size(); ++k) tail[k] = uint8_t(200 - k);
  ASSERT_TRUE(w.add_tensor("head", uint32_t(GgmlType::I8), {64}, head.data(), head.size()).ok());
  // 5 GiB of I8: ne0 = 2^30, 5 rows.
  ASSERT_TRUE(w.add_tensor_zero("big1", uint32_t(GgmlType::I8), {int64_t(kGiB), 5}).ok());
  // 5 GiB of Q8_0 starting above 5 GiB: ne0 = 32 * 2^25 elements -> 34 * 2^25 bytes per row.
  ASSERT_TRUE(w.add_tensor_zero("big2", uint32_t(GgmlType::Q8_0), {int64_t(32) << 25, 5}).ok());
  ASSERT_TRUE(w.add_tensor("tail", uint32_t(GgmlType::I8), {96}, tail.data(), tail.size()).ok());
  auto wr = w.write(path);
  ASSERT_TRUE(wr.ok()) << wr.error().message;

  auto m = GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const TensorInfo* b1 = m->find("big1");
  const TensorInfo* b2 = m->find("big2");
  const TensorInfo* t = m->find("tail");
  ASSERT_TRUE(b1 && b2 && t);
  EXPECT_EQ(b1->nbytes, 5 * kGiB);
  EXPECT_EQ(b1->offset, 64u);
  const uint64_t b2_bytes = uint64_t(34) << 25;
  EXPECT_EQ(b2->nbytes, b2_bytes * 5);
  EXPECT_EQ(b2->offset, 64 + 5 * kGiB);
  EXPECT_GT(b2->offset, 4 * kGiB);
  EXPECT_GT(b2->nbytes, 4 * kGiB);
  EXPECT_EQ(t->offset, 64 + 5 * kGiB + (b2->nbytes + 63) / 64 * 64);
  EXPECT_GT(t->file_offset, 10 * kGiB);
  EXPECT_EQ(m->shards()[0].file_size, t->file_offset + 128);
  // Touch a few pages only.
  EXPECT_EQ(std::memcmp(m->find("head")->data, head.data(), head.size()), 0);
  EXPECT_EQ(std::memcmp(t->data, tail.data(), tail.size()), 0);
  EXPECT_EQ(b1->data[0], 0);
  EXPECT_EQ(b1->data[b1->nbytes - 1], 0);
  EXPECT_EQ(b2->data[b2->nbytes - 1], 0);
  EXPECT_EQ(b2->row_bytes(), b2_bytes);
  EXPECT_EQ(b2->nrows(), 5);
  // The file is sparse: far fewer blocks allocated than its size.
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_LT(uint64_t(st.st_blocks) * 512, uint64_t(64) << 20) << "file is not sparse";
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ds4::gguf
