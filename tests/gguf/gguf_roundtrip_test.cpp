// tests/gguf/gguf_roundtrip_test.cpp — GgufWriter -> GgufModel round trips, typed accessors,
// ggml's offset rule, and split sets (open from any shard, missing shards, inconsistent shards).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"
#include "kernels/quant/ggml_type.h"
#include "tests/support/test_env.h"

namespace ds4::gguf::test {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

/// Every value type once, plus arrays of every element type.
Metadata all_types_metadata() {
  Metadata m;
  m.set("general.architecture", Value::make_string("test"));
  m.set("t.u8", Value::make_uint(ValueType::UINT8, 250));
  m.set("t.i8", Value::make_int(ValueType::INT8, -100));
  m.set("t.u16", Value::make_uint(ValueType::UINT16, 65000));
  m.set("t.i16", Value::make_int(ValueType::INT16, -32000));
  m.set("t.u32", Value::make_u32(4000000000u));
  m.set("t.i32", Value::make_i32(-2000000000));
  m.set("t.f32", Value::make_f32(0.1f));
  m.set("t.bool", Value::make_bool(true));
  m.set("t.str", Value::make_string("héllo wörld"));
  m.set("t.empty_str", Value::make_string(""));
  m.set("t.u64", Value::make_u64(uint64_t(1) << 63));
  m.set("t.i64", Value::make_int(ValueType::INT64, INT64_MIN));
  m.set("t.f64", Value::make_float(ValueType::FLOAT64, 1.0 / 3.0));
  m.set("t.arr_u8", Value::make_array_uint(ValueType::UINT8, {0, 1, 255}));
  m.set("t.arr_i8", Value::make_array_int(ValueType::INT8, {-128, 0, 127}));
  m.set("t.arr_u16", Value::make_array_uint(ValueType::UINT16, {1, 65535}));
  m.set("t.arr_i16", Value::make_array_int(ValueType::INT16, {-1, 2}));
  m.set("t.arr_u32", Value::make_array_u32({7, 8, 9}));
  m.set("t.arr_i32", Value::make_array_i32({-7, 8}));
  m.set("t.arr_f32", Value::make_array_f32({1.5f, -2.25f, 1e-7f}));
  m.set("t.arr_bool", Value::make_array_bool({true, false, true}));
  m.set("t.arr_str", Value::make_array_string({"a", "", "tokens with spaces"}));
  m.set("t.arr_u64", Value::make_array_uint(ValueType::UINT64, {uint64_t(1) << 40}));
  m.set("t.arr_i64", Value::make_array_int(ValueType::INT64, {-(int64_t(1) << 40)}));
  m.set("t.arr_f64", Value::make_array_float(ValueType::FLOAT64, {3.14159265358979}));
  m.set("t.arr_empty", Value::make_array_int(ValueType::INT32, {}));
  return m;
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
};

std::vector<TensorSpec> tensor_specs() {
  return {{"tok_embd.weight", GgmlType::F32, {16, 3}},
          {"blk.0.attn_q.weight", GgmlType::Q8_0, {64, 4}},
          {"blk.0.ffn_gate_exps.weight", GgmlType::MXFP4, {64, 2, 4}},
          {"blk.0.ffn_down_exps.weight", GgmlType::Q2_K, {256, 2, 4}},
          {"blk.0.ffn_up_exps.weight", GgmlType::IQ2_XXS, {256, 1, 4}},
          {"blk.0.norm.weight", GgmlType::F16, {17}},
          {"blk.0.tid2eid", GgmlType::I32, {4, 3}},
          {"blk.0.q81", GgmlType::Q8_1, {32, 3}},
          {"blk.0.nvfp4", GgmlType::NVFP4, {64, 2}},
          {"blk.0.bf16", GgmlType::BF16, {5, 1, 1, 2}}};
}

/// Expected nbytes from the published block geometry (quant-formats.md §1.5), written out here.
uint64_t expected_nbytes(const TensorSpec& s) {
  int64_t rows = 1;
  for (size_t k = 1; k < s.ne.size(); ++k) rows *= s.ne[k];
  const int64_t n0 = s.ne[0];
  switch (s.type) {
    case GgmlType::F32: case GgmlType::I32: return uint64_t(n0 * 4 * rows);
    case GgmlType::F16: case GgmlType::BF16: return uint64_t(n0 * 2 * rows);
    case GgmlType::Q8_0: return uint64_t(n0 / 32 * 34 * rows);
    case GgmlType::Q8_1: return uint64_t(n0 / 32 * 36 * rows);
    case GgmlType::MXFP4: return uint64_t(n0 / 32 * 17 * rows);
    case GgmlType::NVFP4: return uint64_t(n0 / 64 * 36 * rows);
    case GgmlType::Q2_K: return uint64_t(n0 / 256 * 84 * rows);
    case GgmlType::IQ2_XXS: return uint64_t(n0 / 256 * 66 * rows);
    default: ADD_FAILURE(); return 0;
  }
}

struct Built {
  GgufWriter w;
  std::vector<std::vector<uint8_t>> data;
};

Built make_writer(uint32_t alignment) {
  Built b;
  b.w.set_alignment(alignment);
  b.w.metadata() = all_types_metadata();
  uint32_t seed = 1;
  for (const auto& s : tensor_specs()) {
    b.data.push_back(random_bytes(expected_nbytes(s), seed++));
    auto r = b.w.add_tensor(s.name, uint32_t(s.type), s.ne, b.data.back().data(), b.data.back().size());
    EXPECT_TRUE(r.ok()) << r.error().message;
  }
  return b;
}

void expect_tensors_equal(const GgufModel& m, const Built& b) {
  const auto specs = tensor_specs();
  ASSERT_EQ(m.tensors().size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorInfo* t = m.find(specs[k].name);
    ASSERT_NE(t, nullptr) << specs[k].name;
    EXPECT_EQ(t->type, uint32_t(specs[k].type));
    EXPECT_EQ(t->n_dims, int(specs[k].ne.size()));
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t->ne[d], d < specs[k].ne.size() ? specs[k].ne[d] : 1);
    EXPECT_EQ(t->nbytes, b.data[k].size());
    ASSERT_NE(t->data, nullptr);
    EXPECT_EQ(std::memcmp(t->data, b.data[k].data(), t->nbytes), 0) << specs[k].name;
    EXPECT_EQ(t->file_offset % m.shards()[t->shard].alignment, 0u);
  }
}

/// ggml's rule: within a shard, tensor i's offset is the sum of pad(nbytes_j, A) for j < i.
void expect_ggml_offsets(const GgufModel& m) {
  for (size_t s = 0; s < m.shards().size(); ++s) {
    const uint64_t a = m.shards()[s].alignment;
    uint64_t off = 0;
    for (const auto& t : m.tensors()) {
      if (t.shard != int(s)) continue;
      EXPECT_EQ(t.offset, off) << t.name;
      off += (t.nbytes + a - 1) / a * a;
    }
    EXPECT_EQ(m.shards()[s].data_offset % a, 0u);
    EXPECT_EQ(m.shards()[s].file_size, m.shards()[s].data_offset + off) << "shard " << s;
  }
}

TEST(GgufRoundTrip, SingleFileAllTypes) {
  for (uint32_t align : {32u, 1u, 64u, 4096u}) {
    SCOPED_TRACE("alignment " + std::to_string(align));
    Built b = make_writer(align);
    const auto dir = ds4::test::scratch_dir("gguf_rt_single_" + std::to_string(align));
    const std::string path = (dir / "m.gguf").string();
    auto w = b.w.write(path);
    ASSERT_TRUE(w.ok()) << w.error().message;
    auto m = GgufModel::open(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->shards().size(), 1u);
    EXPECT_EQ(m->shards()[0].alignment, align);
    EXPECT_EQ(m->metadata().has("general.alignment"), align != 32);
    const Metadata expected = all_types_metadata();
    for (const auto& [k, v] : expected.entries()) {
      const Value* got = m->metadata().find(k);
      ASSERT_NE(got, nullptr) << k;
      EXPECT_TRUE(*got == v) << k << ": " << value_to_string(*got);
    }
    expect_tensors_equal(*m, b);
    expect_ggml_offsets(*m);
  }
}

TEST(GgufRoundTrip, TypedAccessors) {
  Built b = make_writer(32);
  const auto dir = ds4::test::scratch_dir("gguf_rt_accessors");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(b.w.write(path).ok());
  auto m = GgufModel::open(path);
  ASSERT_TRUE(m.ok());
  const Metadata& md = m->metadata();
  EXPECT_EQ(*md.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(*md.get_int("t.i8"), -100);
  EXPECT_EQ(*md.get_int("t.u16"), 65000);
  EXPECT_EQ(*md.get_f32("t.f32"), 0.1f);
  EXPECT_EQ(*md.get_float("t.f64"), 1.0 / 3.0);
  EXPECT_TRUE(*md.get_bool("t.bool"));
  EXPECT_EQ(*md.get_string("t.str"), "héllo wörld");
  EXPECT_EQ(*md.get_string_array("t.arr_str"), (std::vector<std::string>{"a", "", "tokens with spaces"}));
  EXPECT_EQ(*md.get_int_array("t.arr_u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(*md.get_float_array("t.arr_f32"), (std::vector<double>{1.5, -2.25, double(1e-7f)}));
  // Wrong types and missing keys: the message names file, key, expected and found.
  auto e1 = md.get_u32("t.i32");
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.error().message.find(path + ": key 't.i32': expected UINT32, found INT32"), std::string::npos)
      << e1.error().message;
  auto e2 = md.get_string("no.such.key");
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.error().message.find("key 'no.such.key': expected STRING, found missing"), std::string::npos);
  auto e3 = md.get_int("t.u64");  // 2^63 does not fit int64
  ASSERT_FALSE(e3.ok());
  EXPECT_NE(e3.error().message.find("INT64_MAX"), std::string::npos);
  auto e4 = md.get_float_array("t.arr_str");
  ASSERT_FALSE(e4.ok());
  EXPECT_NE(e4.error().message.find("found ARRAY of STRING"), std::string::npos);
  auto e5 = md.get_int("t.f32");
  ASSERT_FALSE(e5.ok());
  EXPECT_NE(e5.error().message.find("expected an integer type, found FLOAT32"), std::string::npos);
}

TEST(GgufRoundTrip, HeaderOnlyOpen) {
  Built b = make_writer(32);
  const auto dir = ds4::test::scratch_dir("gguf_rt_header_only");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(b.w.write(path).ok());
  OpenOptions o;
  o.map_data = false;
  auto m = GgufModel::open(path, o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  for (const auto& t : m->tensors()) EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(m->tensors().size(), tensor_specs().size());
}

TEST(GgufRoundTrip, WriterRejectsBadTensors) {
  GgufWriter w;
  std::vector<uint8_t> d(34);
  EXPECT_FALSE(w.add_tensor("x", uint32_t(GgmlType::Q8_0), {30}, d.data(), d.size()).ok());
  EXPECT_FALSE(w.add_tensor("x", uint32_t(GgmlType::Q8_0), {32}, d.data(), 33).ok());
  EXPECT_FALSE(w.add_tensor("x", 42, {32}, d.data(), d.size()).ok());
  EXPECT_FALSE(w.add_tensor(std::string(64, 'n'), uint32_t(GgmlType::Q8_0), {32}, d.data(), d.size()).ok());
  EXPECT_TRUE(w.add_tensor("x", uint32_t(GgmlType::Q8_0), {32}, d.data(), d.size()).ok());
  EXPECT_FALSE(w.add_tensor("x", uint32_t(GgmlType::Q8_0), {32}, d.data(), d.size()).ok());
}

TEST(GgufRoundTrip, DeferredTensorsWriteTheSameBytesAndStream) {
  // Two writers, one with copied tensors and one with the same bytes produced at write time: the
  // files are byte-identical; the progress callback sees every tensor in order with running bytes;
  // a fill error aborts the write and leaves no file.
  const auto dir = ds4::test::scratch_dir("gguf_deferred");
  std::vector<std::vector<uint8_t>> data;
  for (int k = 0; k < 3; ++k) {
    data.emplace_back(size_t(34 * (k + 1)));
    for (size_t i = 0; i < data.back().size(); ++i) data.back()[i] = uint8_t(i * 7 + k);
  }
  GgufWriter a, b;
  a.metadata().set("general.name", Value::make_string("deferred"));
  b.metadata().set("general.name", Value::make_string("deferred"));
  for (int k = 0; k < 3; ++k) {
    const std::string n = "t" + std::to_string(k);
    ASSERT_TRUE(a.add_tensor(n, uint32_t(GgmlType::Q8_0), {32 * (k + 1)}, data[size_t(k)].data(), data[size_t(k)].size()).ok());
    ASSERT_TRUE(b.add_tensor_deferred(n, uint32_t(GgmlType::Q8_0), {32 * (k + 1)}, [&data, k](uint8_t* dst) -> ds4::Result<void> {
                   std::copy(data[size_t(k)].begin(), data[size_t(k)].end(), dst);
                   return ds4::ok();
                 }).ok());
  }
  std::vector<std::pair<size_t, uint64_t>> seen;
  ASSERT_TRUE(a.write((dir / "a.gguf").string()).ok());
  ASSERT_TRUE(b.write((dir / "b.gguf").string(), [&](size_t k, uint64_t done, uint64_t total) {
                 seen.push_back({k, done});
                 EXPECT_EQ(total, 34u * 6);
               }).ok());
  std::ifstream fa(dir / "a.gguf", std::ios::binary), fb(dir / "b.gguf", std::ios::binary);
  const std::string sa{std::istreambuf_iterator<char>(fa), {}}, sb{std::istreambuf_iterator<char>(fb), {}};
  EXPECT_FALSE(sa.empty());
  EXPECT_EQ(sa, sb);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], (std::pair<size_t, uint64_t>{0, 34}));
  EXPECT_EQ(seen[2], (std::pair<size_t, uint64_t>{2, 34 * 6}));
  GgufWriter c;
  ASSERT_TRUE(c.add_tensor_deferred("bad", uint32_t(GgmlType::Q8_0), {32}, [](uint8_t*) -> ds4::Result<void> {
                 return ds4::Error{"source unreadable"};
               }).ok());
  auto r = c.write((dir / "c.gguf").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tensor 'bad': source unreadable"), std::string::npos) << r.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir / "c.gguf"));
  // Shape errors are still found when the tensor is added.
  EXPECT_FALSE(c.add_tensor_deferred("odd", uint32_t(GgmlType::Q8_0), {30}, [](uint8_t*) { return ds4::ok(); }).ok());
}

// ---- split sets --------------------------------------------------------------------------------

TEST(GgufSplit, OpenFromAnyShardWithCustomAlignment) {
  Built b = make_writer(128);
  const auto dir = ds4::test::scratch_dir("gguf_split_any");
  auto paths = b.w.write_split((dir / "model").string(), 3);
  ASSERT_TRUE(paths.ok()) << paths.error().message;
  ASSERT_EQ(paths->size(), 4u);  // 10 tensors, 3 per shard
  EXPECT_EQ((*paths)[1], (dir / "model-00002-of-00004.gguf").string());
  for (const auto& p : *paths) {
    SCOPED_TRACE(p);
    auto m = GgufModel::open(p);
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_EQ(m->shards().size(), 4u);
    for (size_t s = 0; s < 4; ++s) {
      const Metadata& md = m->shards()[s].metadata;
      EXPECT_EQ(*md.get_u32("general.alignment"), 128u) << "shard " << s;
      EXPECT_EQ(*md.get_int("split.no"), int64_t(s));
      EXPECT_EQ(md.find("split.no")->type, ValueType::UINT16);
      EXPECT_EQ(*md.get_int("split.count"), 4);
      EXPECT_EQ(md.find("split.tensors.count")->type, ValueType::INT32);
      EXPECT_EQ(*md.get_int("split.tensors.count"), 10);
      EXPECT_EQ(md.has("t.str"), s == 0);
      EXPECT_EQ(m->shards()[s].alignment, 128u);
    }
    EXPECT_EQ(*m->metadata().get_string("t.str"), "héllo wörld");
    expect_tensors_equal(*m, b);
    expect_ggml_offsets(*m);
    EXPECT_EQ(m->find("blk.0.bf16")->shard, 3);
  }
}

TEST(GgufSplit, AllMissingShardsNamedAtOnce) {
  Built b = make_writer(32);
  const auto dir = ds4::test::scratch_dir("gguf_split_missing");
  auto paths = b.w.write_split((dir / "model").string(), 3);
  ASSERT_TRUE(paths.ok());
  std::filesystem::remove((*paths)[0]);
  std::filesystem::remove((*paths)[2]);
  auto m = GgufModel::open((*paths)[1]);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.error().message;
  EXPECT_NE(msg.find("split set of 4 shards is incomplete: 2 missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model-00001-of-00004.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model-00003-of-00004.gguf"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("model-00002-of-00004.gguf,"), std::string::npos) << msg;
  // One shard can still be opened alone when asked.
  OpenOptions one;
  one.open_split_set = false;
  auto s = GgufModel::open((*paths)[1], one);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->tensors().size(), 3u);
}

/// Writes one shard file with explicit split keys via GgufWriter::write (which keeps them).
void write_shard(const std::string& path, int no, int count, int total, const std::vector<std::string>& names,
                 uint32_t align = 32, bool alignment_key = true) {
  GgufWriter w;
  w.set_alignment(align);
  if (!alignment_key) DS4_CHECK(align == 32);
  w.metadata().set("split.no", Value::make_u16(uint16_t(no)));
  w.metadata().set("split.count", Value::make_u16(uint16_t(count)));
  w.metadata().set("split.tensors.count", Value::make_i32(total));
  std::vector<uint8_t> d(64, 1);
  for (const auto& n : names) ASSERT_TRUE(w.add_tensor(n, uint32_t(GgmlType::F32), {16}, d.data(), d.size()).ok());
  ASSERT_TRUE(w.write(path).ok());
}

TEST(GgufSplit, InconsistentShardsRefused) {
  const auto dir = ds4::test::scratch_dir("gguf_split_bad");
  const std::string p1 = (dir / "m-00001-of-00002.gguf").string();
  const std::string p2 = (dir / "m-00002-of-00002.gguf").string();
  auto expect_err = [&](const std::string& what, const std::string& needle) {
    auto m = GgufModel::open(p1);
    ASSERT_FALSE(m.ok()) << what;
    EXPECT_NE(m.error().message.find(needle), std::string::npos) << what << ": " << m.error().message;
  };
  write_shard(p1, 0, 2, 2, {"a"});
  write_shard(p2, 1, 2, 2, {"b"});
  ASSERT_TRUE(GgufModel::open(p2).ok());
  write_shard(p2, 0, 2, 2, {"b"});
  expect_err("split.no", p2 + ": key 'split.no' = 0, expected 1");
  write_shard(p2, 1, 3, 2, {"b"});
  expect_err("split.count", p2 + ": key 'split.count' = 3, expected 2");
  write_shard(p2, 1, 2, 5, {"b"});
  expect_err("split.tensors.count", "key 'split.tensors.count' = 5, expected 2");
  write_shard(p2, 1, 2, 2, {"a"});
  expect_err("duplicate", p2 + ": tensor 'a' also appears in shard " + p1);
  write_shard(p2, 1, 2, 2, {"b"});
  write_shard(p1, 0, 2, 2, {"a"}, 64);
  expect_err("alignment", p2 + ": alignment 32 (no general.alignment key) differs from the first shard's general.alignment 64");
  // A renamed shard: split.count > 1 but no split-style name.
  const std::string lone = (dir / "renamed.gguf").string();
  write_shard(lone, 0, 2, 2, {"a"});
  auto m = GgufModel::open(lone);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("split.count = 2 but its name does not end in"), std::string::npos);
}

TEST(GgufSplit, PathHelpers) {
  SplitName s;
  ASSERT_TRUE(parse_split_path("/a/b/model-00002-of-00010.gguf", &s));
  EXPECT_EQ(s.prefix, "/a/b/model");
  EXPECT_EQ(s.no, 2);
  EXPECT_EQ(s.count, 10);
  EXPECT_FALSE(parse_split_path("model-00011-of-00010.gguf", &s));
  EXPECT_FALSE(parse_split_path("model-0001-of-00010.gguf", &s));
  EXPECT_FALSE(parse_split_path("model.gguf", &s));
  EXPECT_EQ(split_path("x", 3, 12), "x-00003-of-00012.gguf");
}

// GgufModel::assemble (the safetensors checkpoint view): tensor bytes at an address their type
// may not be read from (F32 at 2 mod 4, as in a safetensors data section after a header of odd
// length) are copied to aligned memory with the same bytes; aligned tensors and byte-aligned types
// (MXFP4 blocks of 17 bytes) keep pointing at the caller's memory. A copy is an in-memory tensor
// (shard -1): `convert` drops the file pages of shard tensors after writing them, which on a heap
// copy would discard live heap memory.
TEST(GgufAssemble, CopiesTensorsNotAlignedForTheirType) {
  EXPECT_EQ(tensor_data_alignment(uint32_t(GgmlType::F32)), 4u);
  EXPECT_EQ(tensor_data_alignment(uint32_t(GgmlType::F16)), 2u);
  EXPECT_EQ(tensor_data_alignment(uint32_t(GgmlType::Q8_0)), 2u);
  EXPECT_EQ(tensor_data_alignment(uint32_t(GgmlType::MXFP4)), 1u);
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[256]);
  uint8_t* base = buf.get();
  while (reinterpret_cast<uintptr_t>(base) % 8 != 0) ++base;
  for (int i = 0; i < 200; ++i) base[i] = uint8_t(i * 7 + 1);
  auto info = [](std::string name, GgmlType type, int64_t n, const uint8_t* data) {
    TensorInfo t;
    t.name = std::move(name);
    t.type = uint32_t(type);
    t.n_dims = 1;
    t.ne = {n, 1, 1, 1};
    t.nbytes = tensor_nbytes(t.type, t.ne).value();
    t.shard = 0;  // as if mapped from shard 0 of the checkpoint
    t.data = data;
    return t;
  };
  std::vector<TensorInfo> ts = {info("f32_odd", GgmlType::F32, 8, base + 2), info("f32_ok", GgmlType::F32, 8, base + 64),
                                info("mxfp4_odd", GgmlType::MXFP4, 32, base + 101)};
  Shard shard;
  shard.path = "view.safetensors";
  shard.n_tensors = 3;
  GgufModel m = GgufModel::assemble("view", Metadata{}, {shard}, ts, {buf});
  const TensorInfo* odd = m.find("f32_odd");
  ASSERT_NE(odd, nullptr);
  EXPECT_NE(odd->data, base + 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(odd->data) % 4, 0u);
  EXPECT_EQ(std::memcmp(odd->data, base + 2, 32), 0);
  EXPECT_EQ(odd->shard, -1);  // memory the model owns, not a file mapping
  EXPECT_TRUE(m.has_in_memory_tensors());
  EXPECT_EQ(m.find("f32_ok")->data, base + 64);
  EXPECT_EQ(m.find("f32_ok")->shard, 0);
  EXPECT_EQ(m.shards()[0].n_tensors, 2u);
  EXPECT_EQ(m.find("mxfp4_odd")->data, base + 101);
}

}  // namespace
}  // namespace ds4::gguf::test
