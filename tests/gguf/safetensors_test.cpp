// tests/gguf/safetensors_test.cpp — the safetensors reader: a table of malformed files (one case
// per validation, each asserting its message), sharded checkpoints through the index (every
// index/shard fault), the writer round trip, and sizes above 4 GiB (sparse file).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gguf/safetensors.h"
#include "gguf/safetensors_shards.h"
#include "gguf/safetensors_writer.h"
#include "tests/support/test_env.h"

namespace ds4::gguf {
namespace {

namespace fs = std::filesystem;

/// Bytes of a safetensors file: 8-byte length, `header`, then `data_bytes` bytes (0..).
std::vector<uint8_t> file_bytes(const std::string& header, size_t data_bytes, uint64_t claimed_len = UINT64_MAX) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes);
  const uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = uint8_t(i * 7 + 1);
  return b;
}

struct Case {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* expect;  // substring of the message
};

std::vector<Case> cases() {
  const std::string ok2 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  std::vector<Case> c;
  c.push_back({"shorter than the length field", {1, 2, 3}, "expected at least 8"});
  c.push_back({"header length beyond file", file_bytes(ok2, 12, ok2.size() + 100), "reaches beyond the file"});
  c.push_back({"header length above the bound", file_bytes(ok2, 12, kMaxSafetensorsHeader + 1), "expected at most 100000000"});
  c.push_back({"header JSON malformed", file_bytes(R"({"a":{"dtype":"F32",)", 0), "header JSON malformed"});
  c.push_back({"header JSON not an object", file_bytes("[1, 2, 3]", 0), "expected an object of tensors"});
  c.push_back({"header JSON nested too deep", file_bytes(std::string(100, '[') + std::string(100, ']'), 0), "nests deeper than 64"});
  c.push_back({"entry not an object", file_bytes(R"({"a":[1,2]})", 0), "expected an object {dtype, shape, data_offsets}"});
  c.push_back({"entry without data_offsets", file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "expected key 'data_offsets'"});
  c.push_back({"unknown dtype", file_bytes(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1), "unknown dtype 'F4'"});
  c.push_back({"negative shape", file_bytes(R"({"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", 2), "expected a non-negative integer"});
  c.push_back({"shape overflow", file_bytes(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,2]}})", 2), "overflows 64 bits"});
  c.push_back({"data_offsets not integers", file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,"2"]}})", 2), "expected two non-negative integers"});
  c.push_back({"offsets out of order", file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}})", 2), "out of order"});
  c.push_back({"offsets outside the file", file_bytes(R"({"a":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}})", 8), "lies outside the file"});
  c.push_back({"span not dtype x shape", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "expected 8 (shape [2] x F32 4 bytes)"});
  c.push_back({"overlapping tensors", file_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6), "overlaps tensor"});
  c.push_back({"hole between tensors", file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})", 6), "unindexed bytes before tensor 'b'"});
  c.push_back({"bytes after the last tensor", file_bytes(ok2, 20), "8 bytes after the last tensor"});
  c.push_back({"one name twice in a header", file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "names 'a' twice"});
  c.push_back({"__metadata__ not strings", file_bytes(R"({"__metadata__":{"format":1}})", 0), "expected a string"});
  return c;
}

TEST(Safetensors, ValidFileParses) {
  const std::string h = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"s":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})";
  auto b = file_bytes(h, 16);
  StShard sh;
  auto r = parse_safetensors(b.data(), b.size(), "ok.safetensors", &sh);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(sh.metadata.at("format"), "pt");
  const StTensor& a = (*r)[0].name == "a" ? (*r)[0] : (*r)[1];
  EXPECT_EQ(a.dtype, StDtype::F32);
  EXPECT_EQ(a.nbytes, 8u);
  EXPECT_EQ(a.file_offset, 8 + h.size());
  EXPECT_EQ(a.data, b.data() + 8 + h.size());
}

TEST(Safetensors, MalformedTable) {
  for (const Case& c : cases()) {
    StShard sh;
    auto r = parse_safetensors(c.bytes.data(), c.bytes.size(), "bad.safetensors", &sh);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << c.what << ": " << r.error().message;
    EXPECT_EQ(r.error().message.rfind("bad.safetensors: ", 0), 0u) << c.what << ": names the file: " << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << c.what << ": one line";
  }
}

TEST(Safetensors, DtypeTable) {
  const std::pair<const char*, int> want[] = {{"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1}, {"U8", 1}, {"BF16", 2},
                                              {"F16", 2},     {"F32", 4},     {"I64", 8}, {"I32", 4}};
  for (auto [n, bytes] : want) {
    StDtype t;
    ASSERT_TRUE(parse_st_dtype(n, &t)) << n;
    EXPECT_EQ(st_dtype_bytes(t), bytes) << n;
    EXPECT_EQ(st_dtype_name(t), n);
  }
  StDtype t;
  EXPECT_FALSE(parse_st_dtype("f32", &t));
}

/// A two-shard checkpoint written with the writer: shard 1 holds x, y; shard 2 holds z.
struct Sharded {
  fs::path dir;
  std::vector<float> x{1, 2, 3}, z{7, 8};
  std::vector<uint16_t> y{0x3F80, 0x4000};  // BF16 1, 2
  void write(const std::string& index_text) const {
    const std::vector<StWriteTensor> s1 = {
        {"x", StDtype::F32, {3}, reinterpret_cast<const uint8_t*>(x.data()), 12},
        {"y", StDtype::BF16, {1, 2}, reinterpret_cast<const uint8_t*>(y.data()), 4}};
    const std::vector<StWriteTensor> s2 = {{"z", StDtype::F32, {2}, reinterpret_cast<const uint8_t*>(z.data()), 8}};
    ASSERT_TRUE(write_safetensors((dir / "model-00001-of-00002.safetensors").string(), s1, {{"format", "pt"}}).ok());
    ASSERT_TRUE(write_safetensors((dir / "model-00002-of-00002.safetensors").string(), s2).ok());
    std::ofstream(dir / "model.safetensors.index.json") << index_text;
  }
};

const char* kGoodIndex = R"({"metadata":{"total_size":24},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00001-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})";

TEST(Safetensors, ShardedCheckpointOpensFromFolderAndIndex) {
  Sharded s{ds4::test::scratch_dir("st_sharded_ok")};
  s.write(kGoodIndex);
  for (const std::string& p : {s.dir.string(), (s.dir / "model.safetensors.index.json").string()}) {
    auto c = SafetensorsCheckpoint::open(p);
    ASSERT_TRUE(c.ok()) << c.error().message;
    ASSERT_EQ(c->tensors().size(), 3u);
    ASSERT_EQ(c->shards().size(), 2u);
    EXPECT_EQ(c->total_bytes(), 24u);
    const StTensor* z = c->find("z");
    ASSERT_TRUE(z);
    EXPECT_EQ(z->shard, 1);
    float v[2];
    std::memcpy(v, z->data, 8);
    EXPECT_EQ(v[0], 7.0f);
    EXPECT_EQ(v[1], 8.0f);
    const StTensor* y = c->find("y");
    ASSERT_TRUE(y);
    EXPECT_EQ(y->shape, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(c->shards()[0].metadata.at("format"), "pt");
  }
  // One file opens alone too.
  auto one = SafetensorsCheckpoint::open((s.dir / "model-00002-of-00002.safetensors").string());
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(one->tensors().size(), 1u);
}

TEST(Safetensors, ShardedFaults) {
  struct F {
    const char* what;
    std::string index;
    const char* expect;
  };
  const std::vector<F> faults = {
      {"index malformed", R"({"weight_map":)", "index JSON malformed"},
      {"index without weight_map", R"({"metadata":{}})", "expected an object with a 'weight_map' object"},
      {"shard in index but missing",
       R"({"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00001-of-00002.safetensors","z":"model-00003-of-00003.safetensors"}})",
       "named in the index are missing"},
      {"tensor in shard but not in index",
       R"({"weight_map":{"x":"model-00001-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})",
       "tensor 'y' is in the shard but not in"},
      {"tensor in index but not in shard",
       R"({"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00001-of-00002.safetensors","z":"model-00002-of-00002.safetensors","w":"model-00002-of-00002.safetensors"}})",
       "not in their shard: w"},
      {"tensor indexed to the other shard",
       R"({"weight_map":{"x":"model-00002-of-00002.safetensors","y":"model-00001-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})",
       "maps it to model-00002-of-00002.safetensors"},
      {"shard path escaping the folder", R"({"weight_map":{"x":"../x.safetensors"}})", "expected a file name in the index's folder"},
  };
  for (const F& f : faults) {
    Sharded s{ds4::test::scratch_dir("st_sharded_fault")};
    s.write(f.index);
    auto c = SafetensorsCheckpoint::open(s.dir.string());
    ASSERT_FALSE(c.ok()) << f.what;
    EXPECT_NE(c.error().message.find(f.expect), std::string::npos) << f.what << ": " << c.error().message;
  }
  // The same name in two shards.
  Sharded s{ds4::test::scratch_dir("st_sharded_dup")};
  s.write(kGoodIndex);
  const std::vector<float> v{1};
  ASSERT_TRUE(write_safetensors((s.dir / "model-00002-of-00002.safetensors").string(),
                                {{"x", StDtype::F32, {1}, reinterpret_cast<const uint8_t*>(v.data()), 4}}).ok());
  auto c = SafetensorsCheckpoint::open(s.dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("tensor 'x' also appears in shard"), std::string::npos) << c.error().message;
  // A folder without an index or model.safetensors.
  auto empty = SafetensorsCheckpoint::open(ds4::test::scratch_dir("st_empty").string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("neither model.safetensors.index.json nor model.safetensors"), std::string::npos);
}

TEST(Safetensors, WriterRejectsWrongSize) {
  const std::vector<float> v{1, 2};
  auto r = write_safetensors((ds4::test::scratch_dir("st_writer") / "w.safetensors").string(),
                             {{"a", StDtype::F32, {3}, reinterpret_cast<const uint8_t*>(v.data()), 8}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("expected 12"), std::string::npos) << r.error().message;
}

// A 5 GiB U8 tensor and a small tensor after it (offsets above 4 GiB) in a sparse file.
TEST(Safetensors, TensorsAbove4GiB) {
  constexpr uint64_t kGiB = uint64_t(1) << 30;
  const auto dir = ds4::test::scratch_dir("st_sparse");
  const std::string path = (dir / "huge.safetensors").string();
  const uint64_t big = 5 * kGiB;
  std::string h = "{\"big\":{\"dtype\":\"U8\",\"shape\":[5," + std::to_string(kGiB) + "],\"data_offsets\":[0," + std::to_string(big) +
                  "]},\"tail\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[" + std::to_string(big) + "," +
                  std::to_string(big + 16) + "]}}";
  while (h.size() % 8) h.push_back(' ');
  {
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = h.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(h.data(), std::streamsize(h.size()));
  }
  const uint64_t data_start = 8 + h.size();
  const int64_t tail[2] = {int64_t(1) << 40, -3};
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    ASSERT_EQ(::truncate(path.c_str(), off_t(data_start + big + 16)), 0);
    f.seekp(std::streamoff(data_start + big));
    f.write(reinterpret_cast<const char*>(tail), 16);
  }
  auto c = SafetensorsCheckpoint::open(path);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const StTensor* b = c->find("big");
  const StTensor* t = c->find("tail");
  ASSERT_TRUE(b && t);
  EXPECT_EQ(b->nbytes, big);
  EXPECT_EQ(t->file_offset, data_start + big);
  EXPECT_GT(t->file_offset, 4 * kGiB);
  int64_t got[2];
  std::memcpy(got, t->data, 16);
  EXPECT_EQ(got[0], tail[0]);
  EXPECT_EQ(got[1], tail[1]);
  EXPECT_EQ(b->data[big - 1], 0);  // a hole reads as zero
}

// Shard-set checks by name (gguf/safetensors_shards.h): the expected strings are written here
// from transformers' naming, not produced by the code under test.
TEST(SafetensorsShards, SplitNamesParseAndFormat) {
  StSplitName s;
  ASSERT_TRUE(parse_st_split_name("/x/y/model-00001-of-00046.safetensors", &s));
  EXPECT_EQ(s.prefix, "model");
  EXPECT_EQ(s.no, 1);
  EXPECT_EQ(s.count, 46);
  EXPECT_EQ(s.width, 5);
  EXPECT_EQ(st_split_name(s, 46), "model-00046-of-00046.safetensors");
  ASSERT_TRUE(parse_st_split_name("a-b-3-of-12.safetensors", &s));
  EXPECT_EQ(s.prefix, "a-b");
  EXPECT_EQ(st_split_name(s, 7), "a-b-07-of-12.safetensors");
  for (const char* bad : {"model.safetensors", "model-00000-of-00002.safetensors", "model-00003-of-00002.safetensors",
                          "model-00001-of-00002.gguf", "-00001-of-00002.safetensors", "model-x-of-00002.safetensors",
                          "model-1-of-9999999999.safetensors"})
    EXPECT_FALSE(parse_st_split_name(bad, &s)) << bad;
}

TEST(SafetensorsShards, LoneShardAndIncompleteSetsAreRefused) {
  namespace fs = std::filesystem;
  const fs::path d = ds4::test::scratch_dir("st_shard_set");
  const std::vector<float> v{1};
  auto put = [&](const std::string& name) {
    ASSERT_TRUE(write_safetensors((d / name).string(), {{"x", StDtype::F32, {1}, reinterpret_cast<const uint8_t*>(v.data()), 4}}).ok());
  };
  put("model-00001-of-00012.safetensors");
  put("model-00004-of-00012.safetensors");
  // A lone shard: refused, naming the set, what the folder holds and the first missing shards.
  const std::string one = (d / "model-00001-of-00012.safetensors").string();
  auto r = check_safetensors_shard_set(one);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("shard 1 of a 12-shard safetensors checkpoint (model-00001-of-00012.safetensors to "
                   "model-00012-of-00012.safetensors)"), std::string::npos) << m;
  EXPECT_NE(m.find("found this shard given alone (2 of 12 shards in " + d.string() + ", no index)"), std::string::npos) << m;
  EXPECT_NE(m.find("missing: model-00002-of-00012.safetensors, model-00003-of-00012.safetensors, "
                   "model-00005-of-00012.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find(", ... and 2 more"), std::string::npos) << m;  // 10 missing, 8 named
  // The folder: no index, two of twelve shards.
  auto f = check_safetensors_shard_set(d.string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("without its model.safetensors.index.json; expected the index and all 12 shards of "
                                   "model-00001-of-00012.safetensors to model-00012-of-00012.safetensors, found 2 of 12 "
                                   "shards and no index"), std::string::npos) << f.error().message;
  // An index naming 20 shards, 2 present: the missing list is capped.
  put("part-00001-of-00020.safetensors");
  put("part-00003-of-00020.safetensors");
  std::string idx = R"({"weight_map":{)";
  for (int k = 1; k <= 20; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "part-%05d-of-00020.safetensors", k);
    idx += std::string(k > 1 ? "," : "") + "\"t" + std::to_string(k) + "\":\"" + name + "\"";
  }
  idx += "}}";
  std::ofstream(d / "model.safetensors.index.json") << idx;
  for (const std::string& p : {d.string(), (d / "model.safetensors.index.json").string()}) {
    auto i = check_safetensors_shard_set(p);
    ASSERT_FALSE(i.ok()) << p;
    EXPECT_NE(i.error().message.find("18 of 20 shard(s) named in the index are missing from " + d.string() +
                                     ": part-00002-of-00020.safetensors, part-00004-of-00020.safetensors"),
              std::string::npos) << i.error().message;
    EXPECT_NE(i.error().message.find(", ... and 10 more"), std::string::npos) << i.error().message;
  }
  // The lone shard with an index beside it points at the folder.
  auto withidx = check_safetensors_shard_set(one);
  ASSERT_FALSE(withidx.ok());
  EXPECT_NE(withidx.error().message.find("index present: pass -m " + d.string()), std::string::npos)
      << withidx.error().message;
  // A complete single file and a 1-of-1 shard are not this check's business.
  put("model-00001-of-00001.safetensors");
  EXPECT_TRUE(check_safetensors_shard_set((d / "model-00001-of-00001.safetensors").string()).ok());
  put("other.safetensors");
  EXPECT_TRUE(check_safetensors_shard_set((d / "other.safetensors").string()).ok());
}

}  // namespace
}  // namespace ds4::gguf
