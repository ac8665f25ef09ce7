// gguf_mapped_sigbus_test (label unit): a GGUF cut on disk after it was opened (memory-mapped) and
// then read where the pages are gone raises SIGBUS; with the report installed
// (common/ds4/mapped_files.h, as the ds4-offload program does at start) the process prints one
// error naming the file and the byte and exits 1 instead of dying by the signal. A SIGBUS outside
// every registered mapping keeps the default action; a closed model leaves no entry behind.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "ds4/mapped_files.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/quant/ggml_type.h"
#include "tests/support/test_env.h"

namespace ds4::gguf {
namespace {

constexpr int64_t kFloats = 64 * 1024;  // a 256 KiB tensor: most of its pages lie past a 4 KiB cut

/// Writes a GGUF with one F32 tensor "t" of kFloats values into scratch folder `name`; its path.
std::string write_model(const std::string& name) {
  GgufWriter w;
  std::vector<float> v(size_t(kFloats), 1.5f);
  auto a = w.add_tensor("t", uint32_t(GgmlType::F32), {kFloats}, v.data(), v.size() * 4);
  EXPECT_TRUE(a.ok());
  const std::string path = (ds4::test::scratch_dir(name) / "m.gguf").string();
  auto r = w.write(path);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return path;
}

/// Reads the tensor's last byte (a page past the cut).
int read_last_byte(const GgufModel& m) {
  const TensorInfo* t = m.find("t");
  return t ? static_cast<const volatile uint8_t*>(t->data)[t->nbytes - 1] : -1;
}

TEST(MappedFilesSigbus, ACutModelFileIsNamedNotASilentCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = write_model("gguf_sigbus_named");
  auto m = GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(read_last_byte(*m), 0x3F);  // 1.5f = 0x3FC00000: its last byte
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  EXPECT_EXIT(
      {
        mapped_files::install_sigbus_report("ds4-offload", 1);
        read_last_byte(*m);
      },
      ::testing::ExitedWithCode(1),
      "ds4-offload: error: bus error reading the memory-mapped file .*m\\.gguf at byte [0-9]+: expected the file "
      "unchanged while it is loaded");
}

TEST(MappedFilesSigbus, ASigbusOutsideTheRegisteredMappingsKeepsTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = write_model("gguf_sigbus_unregistered");
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const size_t bytes = size_t(kFloats) * 4;
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  EXPECT_EXIT(
      {
        mapped_files::install_sigbus_report("ds4-offload", 1);
        (void)static_cast<const volatile uint8_t*>(p)[bytes - 1];
      },
      ::testing::KilledBySignal(SIGBUS), "");
  munmap(p, bytes);
}

TEST(MappedFilesSigbus, AClosedModelLeavesNoEntry) {
  const std::string path = write_model("gguf_sigbus_closed");
  auto count = [] {
    int n = 0;
    for (const mapped_files::Entry& e : mapped_files::g_entries) n += e.end.load() != 0;
    return n;
  };
  const int before = count();
  {
    auto m = GgufModel::open(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(count(), before + 1);
  }
  EXPECT_EQ(count(), before);
}

}  // namespace
}  // namespace ds4::gguf
