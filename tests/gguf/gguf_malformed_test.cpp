// tests/gguf/gguf_malformed_test.cpp — table-driven malformed GGUF files: each case builds the
// bytes field by field (tests/gguf/gguf_test_util.h Raw, not GgufWriter) from a valid baseline,
// breaks one thing, and expects GgufModel::open to fail with that check's own message.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <functional>

#include "gguf/gguf_file.h"
#include "gguf_test_util.h"
#include "tests/support/test_env.h"

namespace ds4::gguf::test {
namespace {

struct Ti {
  std::string name;
  uint32_t n_dims;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

/// A GGUF file description, turned into bytes by build(). The baseline is a valid file with two
/// tensors whose data ends exactly at the last tensor (no trailing padding), so that every proper
/// prefix of it is a truncated file.
struct Spec {
  uint32_t magic = 0x46554747u;
  uint32_t version = 3;
  // Key/value pairs as raw bytes (key, type, value), and their count.
  std::vector<std::string> kvs;
  std::vector<Ti> tensors;
  uint64_t align = 32;       // used for the padding before the data section
  uint64_t data_bytes = 0;   // bytes of data written after the padding
  int64_t cut = -1;          // truncate the file to this many bytes
  int64_t n_kv_override = -1;
};

std::string kv_string(const std::string& key, const std::string& v) {
  return Raw().str(key).u32(8).str(v).b;
}
std::string kv_u32(const std::string& key, uint32_t v) { return Raw().str(key).u32(4).u32(v).b; }

Spec baseline() {
  Spec s;
  s.kvs.push_back(kv_string("general.architecture", "test"));
  s.kvs.push_back(Raw().str("test.array").u32(9).u32(5).u64(3).u32(1).u32(2).u32(3).b);  // INT32 x3
  s.tensors.push_back({"a", 1, {8}, 0, 0});          // F32, 32 bytes at 0
  s.tensors.push_back({"b", 2, {32, 2}, 8, 32});     // Q8_0, 68 bytes at 32
  s.data_bytes = 32 + 68;
  return s;
}

std::string build(const Spec& s) {
  Raw r;
  r.u32(s.magic).u32(s.version).u64(s.tensors.size());
  r.u64(s.n_kv_override >= 0 ? uint64_t(s.n_kv_override) : s.kvs.size());
  for (const auto& kv : s.kvs) r.b += kv;
  for (const auto& t : s.tensors) {
    r.str(t.name).u32(t.n_dims);
    for (uint64_t d : t.ne) r.u64(d);
    r.u32(t.type).u64(t.offset);
  }
  r.pad(s.align);
  for (uint64_t k = 0; k < s.data_bytes; ++k) r.u8(uint8_t(k * 7 + 1));
  if (s.cut >= 0) r.b.resize(size_t(s.cut));
  return r.b;
}

struct Case {
  const char* name;
  std::function<void(Spec&)> edit;
  std::vector<const char*> expect;  // substrings of the error message
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"bad_magic", [](Spec& s) { s.magic = 0x58554747u; }, {"bad magic", "47 47 55 58"}},
      {"version_1", [](Spec& s) { s.version = 1; }, {"unsupported GGUF version 1"}},
      {"version_0", [](Spec& s) { s.version = 0; }, {"unsupported GGUF version 0"}},
      {"version_4", [](Spec& s) { s.version = 4; }, {"unsupported GGUF version 4", "expected 3"}},
      {"big_endian", [](Spec& s) { s.version = 0x03000000u; }, {"big-endian", "version 3 byte-swapped"}},
      {"truncated_header", [](Spec& s) { s.cut = 12; }, {"truncated file", "header (tensor count)"}},
      {"truncated_kv", [](Spec& s) { s.cut = 24 + 8 + 20 + 4 + 3; },
       {"truncated file", "value of key 'general.architecture'"}},
      {"truncated_array", [](Spec& s) { s.kvs[1] = Raw().str("test.array").u32(9).u32(5).u64(1000).u32(1).b; },
       {"truncated file", "value of key 'test.array' (1000 array elements)"}},
      {"kv_count_too_large", [](Spec& s) { s.n_kv_override = int64_t(1) << 60; s.tensors.clear(); s.data_bytes = 0; s.align = 1; },
       {"truncated file", "key #2 of 1152921504606846976"}},
      {"truncated_tensor_info", [](Spec& s) {
         Spec head = s;
         head.data_bytes = 0;
         head.align = 1;
         s.cut = int64_t(build(head).size()) - 5;  // inside tensor 'b''s offset field
       },
       {"truncated file", "tensor 'b'"}},
      {"truncated_before_data", [](Spec& s) { s.data_bytes = 0; s.align = 1; },
       {"truncated file", "data section should start at byte"}},
      {"truncated_data", [](Spec& s) { s.data_bytes -= 1; }, {"tensor 'b': data is truncated", "needs 68 bytes"}},
      {"alignment_wrong_type", [](Spec& s) { s.kvs.push_back(Raw().str("general.alignment").u32(5).u32(32).b); },
       {"'general.alignment': expected UINT32, found INT32"}},
      {"alignment_zero", [](Spec& s) { s.kvs.push_back(kv_u32("general.alignment", 0)); },
       {"'general.alignment' = 0: expected a non-zero power of two"}},
      {"alignment_not_pow2", [](Spec& s) { s.kvs.push_back(kv_u32("general.alignment", 48)); s.align = 48; },
       {"'general.alignment' = 48: expected a non-zero power of two"}},
      {"unaligned_offset", [](Spec& s) { s.tensors[1].offset = 40; s.data_bytes = 40 + 68; },
       {"tensor 'b': data offset 40 is not a multiple of the alignment 32"}},
      {"overlap", [](Spec& s) { s.tensors[1].offset = 0; },
       {"overlaps tensor", "'a'", "'b'"}},
      {"region_shorter_than_nbytes", [](Spec& s) { s.tensors[0].ne = {16}; },
       {"tensor 'a' at data offset 0 overlaps tensor 'b' at data offset 32",
        "its region is 32 bytes, shorter than nbytes(F32, [16]) = 64"}},
      {"data_beyond_eof", [](Spec& s) { s.tensors[1].offset = uint64_t(1) << 40; },
       {"tensor 'b': data starts at file offset", "beyond the end of the file"}},
      {"offset_near_2_64", [](Spec& s) { s.tensors[1].offset = ~uint64_t(31); },
       {"tensor 'b': data starts at file offset beyond 2^64"}},
      {"element_count_overflow", [](Spec& s) { s.tensors[0].n_dims = 2; s.tensors[0].ne = {uint64_t(1) << 32, uint64_t(1) << 32}; },
       {"tensor 'a'", "element count 4294967296*4294967296*1*1 overflows 64 bits"}},
      {"byte_count_overflow", [](Spec& s) { s.tensors[0].type = 28; s.tensors[0].ne = {uint64_t(1) << 62}; },
       {"tensor 'a'", "byte count of 4611686018427387904 F64 elements overflows 64 bits"}},
      {"negative_dim", [](Spec& s) { s.tensors[0].ne = {uint64_t(1) << 63}; },
       {"tensor 'a': ne[0] = 9223372036854775808 exceeds INT64_MAX"}},
      {"unknown_type_fork", [](Spec& s) { s.tensors[0].type = 42; },
       {"tensor 'a'", "unknown ggml type id 42", "nisparks"}},
      {"unknown_type_retired", [](Spec& s) { s.tensors[0].type = 4; },
       {"unknown ggml type id 4", "retired upstream"}},
      {"unknown_type_other", [](Spec& s) { s.tensors[0].type = 99; },
       {"unknown ggml type id 99 (not an upstream ggml type)"}},
      {"block_multiple", [](Spec& s) { s.tensors[1].ne = {30, 2}; },
       {"tensor 'b'", "ne[0] = 30 is not a multiple of the Q8_0 block size 32"}},
      {"nested_array", [](Spec& s) { s.kvs.push_back(Raw().str("test.nested").u32(9).u32(9).u64(1).u32(5).u64(0).b); },
       {"value of key 'test.nested'", "nested arrays"}},
      {"oversize_string", [](Spec& s) { s.kvs.push_back(Raw().str("test.big").u32(8).u64((uint64_t(1) << 30) + 1).b); },
       {"value of key 'test.big'", "string length 1073741825 exceeds the limit of 2^30 bytes"}},
      {"oversize_array", [](Spec& s) { s.kvs.push_back(Raw().str("test.big").u32(9).u32(0).u64((uint64_t(1) << 30) + 1).b); },
       {"value of key 'test.big'", "array of 1073741825 elements exceeds the limit of 2^30 elements"}},
      {"oversize_key", [](Spec& s) { s.kvs.push_back(Raw().u64(uint64_t(1) << 40).b); },
       {"key #2", "exceeds the limit of 2^30 bytes"}},
      {"name_64_bytes", [](Spec& s) { s.tensors[0].name = std::string(64, 'x'); },
       {"tensor info #0 of 2", "is 64 bytes; expected at most 63"}},
      {"duplicate_key", [](Spec& s) { s.kvs.push_back(kv_string("general.architecture", "again")); },
       {"duplicate key 'general.architecture'"}},
      {"empty_key", [](Spec& s) { s.kvs.push_back(kv_u32("", 1)); }, {"key #2 of 3 is empty"}},
      {"unknown_value_type", [](Spec& s) { s.kvs.push_back(Raw().str("test.x").u32(13).u32(0).b); },
       {"key 'test.x': unknown value type 13"}},
      {"unknown_array_elem_type", [](Spec& s) { s.kvs.push_back(Raw().str("test.x").u32(9).u32(77).u64(0).b); },
       {"value of key 'test.x'", "unknown array element type 77"}},
      {"bool_not_0_1", [](Spec& s) { s.kvs.push_back(Raw().str("test.flag").u32(7).u8(2).b); },
       {"value of key 'test.flag'", "expected BOOL 0 or 1, found 2"}},
      {"n_dims_5", [](Spec& s) { s.tensors[0].n_dims = 5; s.tensors[0].ne = {8, 1, 1, 1, 1}; },
       {"tensor 'a': n_dims = 5, expected at most 4"}},
      {"duplicate_tensor_name", [](Spec& s) { s.tensors[1].name = "a"; },
       {"duplicate tensor name 'a'"}},
  };
  return c;
}

class Malformed : public ::testing::TestWithParam<size_t> {};

TEST_P(Malformed, FailsWithItsOwnMessage) {
  const Case& c = cases()[GetParam()];
  Spec s = baseline();
  c.edit(s);
  const auto dir = ds4::test::scratch_dir(std::string("gguf_malformed_") + c.name);
  const std::string path = (dir / "bad.gguf").string();
  write_file(path, build(s));
  auto m = GgufModel::open(path);
  ASSERT_FALSE(m.ok()) << c.name << ": opened a malformed file";
  const std::string& msg = m.error().message;
  EXPECT_EQ(msg.rfind(path, 0), 0u) << c.name << ": message does not start with the file: " << msg;
  for (const char* e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.name << ": '" << e << "' not in: " << msg;
}

INSTANTIATE_TEST_SUITE_P(Gguf, Malformed, ::testing::Range(size_t(0), cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) { return std::string(cases()[i.param].name); });

TEST(GgufMalformed, BaselineIsValid) {
  const auto dir = ds4::test::scratch_dir("gguf_malformed_baseline");
  const std::string path = (dir / "ok.gguf").string();
  write_file(path, build(baseline()));
  auto m = GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->tensors().size(), 2u);
  EXPECT_EQ(m->find("b")->nbytes, 68u);
  EXPECT_EQ(m->find("b")->offset, 32u);
  EXPECT_EQ(*m->metadata().get_string("general.architecture"), "test");
  EXPECT_EQ(*m->metadata().get_int_array("test.array"), (std::vector<int64_t>{1, 2, 3}));
}

// Every proper prefix of a valid file (which ends exactly at its last tensor byte) is truncated
// somewhere: header, key/value pairs, tensor infos, padding or data. Each must fail cleanly.
TEST(GgufMalformed, EveryPrefixIsTruncated) {
  const std::string full = build(baseline());
  const auto dir = ds4::test::scratch_dir("gguf_malformed_prefix");
  const std::string path = (dir / "cut.gguf").string();
  for (size_t n = 0; n < full.size(); ++n) {
    write_file(path, full.substr(0, n));
    auto m = GgufModel::open(path);
    ASSERT_FALSE(m.ok()) << "prefix of " << n << " bytes opened";
    EXPECT_NE(m.error().message.find("truncated"), std::string::npos)
        << "prefix " << n << ": " << m.error().message;
  }
  write_file(path, full);
  EXPECT_TRUE(GgufModel::open(path).ok());
}

// Version 2 has the same layout as 3 and is accepted (ggml loads it too).
TEST(GgufMalformed, Version2Accepted) {
  Spec s = baseline();
  s.version = 2;
  const auto dir = ds4::test::scratch_dir("gguf_malformed_v2");
  const std::string path = (dir / "v2.gguf").string();
  write_file(path, build(s));
  auto m = GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->shards()[0].version, 2u);
}

TEST(GgufMalformed, MissingFileAndDirectory) {
  auto m = GgufModel::open("/nonexistent/dir/x.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("file not found"), std::string::npos) << m.error().message;
  const auto dir = ds4::test::scratch_dir("gguf_malformed_dir");
  auto d = GgufModel::open(dir.string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("expected a regular GGUF file, found a directory"), std::string::npos)
      << d.error().message;
}

// A FIFO would block open(2) until a writer appears, and a device streams forever: both are refused
// from stat(2) before anything is opened (this test would hang otherwise).
TEST(GgufMalformed, NonRegularPathsRefusedBeforeOpening) {
  const auto dir = ds4::test::scratch_dir("gguf_malformed_fifo");
  const std::string fifo = (dir / "model.gguf").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = GgufModel::open(fifo);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("found a FIFO (named pipe)"), std::string::npos) << f.error().message;
  auto z = GgufModel::open("/dev/zero");
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.error().message.find("found a character device"), std::string::npos) << z.error().message;
}

// Header counts are checked against the bytes that follow before any loop runs.
TEST(GgufMalformed, HugeCountsRefusedFromTheFileSize) {
  const auto dir = ds4::test::scratch_dir("gguf_malformed_counts");
  const std::string path = (dir / "m.gguf").string();
  std::string b = "GGUF";
  auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  u32(3);
  u64(uint64_t(1) << 60);  // tensors
  u64(0);
  b.append(64, '\0');
  write_file(path, b);
  auto m = GgufModel::open(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("tensor count 1152921504606846976 cannot fit in the 64 bytes after the key/value pairs"),
            std::string::npos) << m.error().message;
}

}  // namespace
}  // namespace ds4::gguf::test
