// tests/gguf/gguf_pyoracle_test.cpp — cross-checks with gguf-py (label oracle):
//  1. gguf-py GGUFWriter (alignments 32/8/64/4096, a split set) -> our reader reads exactly the
//     inputs gguf-py was given (gguf_py_write.py writes NAME.expected from its inputs) and the same
//     offsets as gguf-py's GGUFReader; gguf-py's custom-alignment split set is refused.
//  2. our GgufWriter (single files and split sets, custom alignments) -> GGUFReader reads back
//     our inputs exactly (gguf_py_dump.py), with the same offsets our reader finds.
// Exits 77 (skipped) when the Python venv with gguf + numpy is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"
#include "kernels/quant/ggml_type.h"
#include "tests/support/test_env.h"

namespace ds4::gguf::test {
namespace {

namespace fs = std::filesystem;

std::string q(const std::string& s) { return "'" + s + "'"; }

void require_python() {
  static int ok = -1;
  if (ok < 0) {
    const std::string py = ds4::test::python();
    ok = fs::exists(py) && std::system((q(py) + " -c 'import gguf, numpy' >/dev/null 2>&1").c_str()) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "gguf_pyoracle_test: no Python with gguf + numpy at %s: skipped\n",
                 ds4::test::python().c_str());
    std::exit(77);
  }
}

/// Runs a helper script; stdout goes to `out`. Fails the test on a non-zero exit.
void run_py(const std::string& script_and_args, const std::string& out) {
  const std::string cmd = q(ds4::test::python()) + " " +
                          q((ds4::test::source_dir() / "tests/gguf").string() + "/") + script_and_args +
                          " > " + q(out) + " 2> " + q(out + ".err");
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n" << [&] {
    std::ifstream f(out + ".err");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }();
}

void expect_same_lines(const std::vector<std::string>& got, const std::vector<std::string>& want,
                       const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < std::min(got.size(), want.size()); ++k)
    EXPECT_EQ(got[k], want[k]) << what << " line " << k;
}

TEST(GgufPyOracle, GgufPyWriterToOurReader) {
  require_python();
  const auto dir = ds4::test::scratch_dir("gguf_py_writer");
  const std::string cases_txt = (dir / "cases.txt").string();
  run_py("gguf_py_write.py " + q(dir.string()), cases_txt);
  if (HasFatalFailure()) return;
  int n_cases = 0;
  for (const auto& line : read_lines(cases_txt)) {
    std::istringstream ls(line);
    std::string name;
    std::vector<std::string> files;
    ls >> name;
    for (std::string f; ls >> f;) files.push_back(f);
    ASSERT_FALSE(files.empty()) << line;
    ++n_cases;
    SCOPED_TRACE(name);
    // Open a split set from its last shard's name (any shard must work).
    auto m = GgufModel::open(files.back());
    if (name == "splitalign") {
      ASSERT_FALSE(m.ok()) << "gguf-py's custom-alignment split set must be refused";
      EXPECT_NE(m.error().message.find("differs from the first shard's general.alignment 64"),
                std::string::npos) << m.error().message;
      EXPECT_NE(m.error().message.find("no general.alignment key"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->shards().size(), files.size());
    expect_same_lines(dump_model(*m, false), read_lines((dir / (name + ".expected")).string()),
                      name + ": our reader vs gguf-py writer inputs");
    std::string args = "gguf_py_dump.py --offsets";
    for (const auto& f : files) args += " " + q(f);
    const std::string pydump = (dir / (name + ".pydump")).string();
    run_py(args, pydump);
    if (HasFatalFailure()) return;
    expect_same_lines(dump_model(*m, true), read_lines(pydump), name + ": our reader vs GGUFReader");
  }
  EXPECT_EQ(n_cases, 6);
}

// ---- our writer -> gguf-py reader -----------------------------------------------------------

struct Input {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> bytes;
};

std::vector<Input> inputs() {
  // Q8_1 is left out: gguf-py sizes its blocks as 40 bytes (ggml: 36).
  struct S { const char* n; GgmlType t; std::vector<int64_t> ne; uint64_t nbytes; };
  const std::vector<S> specs = {
      {"tok_embd.weight", GgmlType::F32, {16, 3}, 192},
      {"blk.0.attn_q.weight", GgmlType::Q8_0, {64, 4}, 2 * 34 * 4},
      {"blk.0.ffn_gate_exps.weight", GgmlType::MXFP4, {64, 2, 4}, 2 * 17 * 8},
      {"blk.0.ffn_down_exps.weight", GgmlType::Q2_K, {256, 2, 4}, 84 * 8},
      {"blk.0.ffn_up_exps.weight", GgmlType::IQ2_XXS, {256, 1, 4}, 66 * 4},
      {"blk.0.norm.weight", GgmlType::F16, {17}, 34},
      {"blk.0.tid2eid", GgmlType::I32, {4, 3}, 48},
      {"blk.0.nvfp4", GgmlType::NVFP4, {128, 2}, 2 * 36 * 2},
      {"blk.0.bf16", GgmlType::BF16, {5, 1, 1, 2}, 20},
      {"blk.0.tq1", GgmlType::TQ1_0, {256}, 54},
  };
  std::mt19937 rng(11);
  std::vector<Input> r;
  for (const auto& s : specs) {
    Input in{s.n, s.t, s.ne, std::vector<uint8_t>(s.nbytes)};
    for (auto& b : in.bytes) b = uint8_t(rng());
    r.push_back(std::move(in));
  }
  return r;
}

Metadata input_metadata() {
  Metadata m;
  m.set("general.architecture", Value::make_string("test"));
  m.set("t.u8", Value::make_uint(ValueType::UINT8, 255));
  m.set("t.i8", Value::make_int(ValueType::INT8, -128));
  m.set("t.u16", Value::make_uint(ValueType::UINT16, 1234));
  m.set("t.i16", Value::make_int(ValueType::INT16, -1234));
  m.set("t.u32", Value::make_u32(0xFFFFFFFFu));
  m.set("t.i32", Value::make_i32(INT32_MIN));
  m.set("t.f32", Value::make_f32(-0.0f));
  m.set("t.bool", Value::make_bool(false));
  m.set("t.str", Value::make_string("ünïcode and spaces"));
  m.set("t.empty_str", Value::make_string(""));
  m.set("t.u64", Value::make_u64(UINT64_MAX));
  m.set("t.i64", Value::make_int(ValueType::INT64, INT64_MAX));
  m.set("t.f64", Value::make_float(ValueType::FLOAT64, 6.02214076e23));
  m.set("t.arr_u8", Value::make_array_uint(ValueType::UINT8, {0, 255}));
  m.set("t.arr_i8", Value::make_array_int(ValueType::INT8, {-1}));
  m.set("t.arr_u16", Value::make_array_uint(ValueType::UINT16, {9, 10}));
  m.set("t.arr_i16", Value::make_array_int(ValueType::INT16, {-9}));
  m.set("t.arr_u32", Value::make_array_u32({1, 2, 3}));
  m.set("t.arr_i32", Value::make_array_i32({-1, -2}));
  m.set("t.arr_f32", Value::make_array_f32({0.5f, 1e30f}));
  m.set("t.arr_bool", Value::make_array_bool({false, true}));
  m.set("t.arr_str", Value::make_array_string({"<s>", "", "Ġthe"}));
  m.set("t.arr_u64", Value::make_array_uint(ValueType::UINT64, {UINT64_MAX}));
  m.set("t.arr_i64", Value::make_array_int(ValueType::INT64, {INT64_MIN}));
  m.set("t.arr_f64", Value::make_array_float(ValueType::FLOAT64, {-1e-300}));
  m.set("t.arr_empty", Value::make_array_int(ValueType::INT32, {}));
  return m;
}

/// Expected dump of what our writer was given, with the key placement gguf_writer.h documents:
/// model metadata (shard 0 only), then general.alignment when not 32 (every shard), then split.*.
std::vector<std::string> expected_dump(const Metadata& md, const std::vector<Input>& in, uint32_t align,
                                       size_t max_per_shard) {
  const size_t n_shards = max_per_shard ? (in.size() + max_per_shard - 1) / max_per_shard : 1;
  std::vector<std::string> out;
  for (size_t s = 0; s < n_shards; ++s) {
    if (s == 0)
      for (const auto& [k, v] : md.entries()) out.push_back(dump_kv(0, k, v));
    if (align != 32) out.push_back(dump_kv(int(s), "general.alignment", Value::make_u32(align)));
    if (max_per_shard) {
      out.push_back(dump_kv(int(s), "split.no", Value::make_u16(uint16_t(s))));
      out.push_back(dump_kv(int(s), "split.count", Value::make_u16(uint16_t(n_shards))));
      out.push_back(dump_kv(int(s), "split.tensors.count", Value::make_i32(int32_t(in.size()))));
    }
    const size_t lo = max_per_shard ? s * max_per_shard : 0;
    const size_t hi = max_per_shard ? std::min(in.size(), lo + max_per_shard) : in.size();
    for (size_t k = lo; k < hi; ++k)
      out.push_back(dump_tensor(in[k].name, uint32_t(in[k].type), in[k].ne, in[k].bytes.size(),
                                crc32(in[k].bytes.data(), in[k].bytes.size())));
  }
  return out;
}

TEST(GgufPyOracle, OurWriterToGgufPyReader) {
  require_python();
  const auto dir = ds4::test::scratch_dir("gguf_our_writer");
  const auto in = inputs();
  const Metadata md = input_metadata();
  struct Case { uint32_t align; size_t split; };
  for (const Case c : {Case{32, 0}, Case{64, 0}, Case{1, 0}, Case{32, 3}, Case{128, 4}, Case{4096, 1}}) {
    const std::string name = "a" + std::to_string(c.align) + "_s" + std::to_string(c.split);
    SCOPED_TRACE(name);
    GgufWriter w;
    w.set_alignment(c.align);
    w.metadata() = md;
    for (const auto& t : in) {
      auto r = w.add_tensor(t.name, uint32_t(t.type), t.ne, t.bytes.data(), t.bytes.size());
      ASSERT_TRUE(r.ok()) << r.error().message;
    }
    std::vector<std::string> files;
    if (c.split) {
      auto p = w.write_split((dir / name).string(), c.split);
      ASSERT_TRUE(p.ok()) << p.error().message;
      files = *p;
    } else {
      files.push_back((dir / (name + ".gguf")).string());
      auto r = w.write(files[0]);
      ASSERT_TRUE(r.ok()) << r.error().message;
    }
    std::string args = "gguf_py_dump.py";
    for (const auto& f : files) args += " " + q(f);
    const std::string plain = (dir / (name + ".pydump")).string();
    run_py(args, plain);
    if (HasFatalFailure()) return;
    expect_same_lines(read_lines(plain), expected_dump(md, in, c.align, c.split),
                      name + ": GGUFReader vs our writer's inputs");
    const std::string offs = (dir / (name + ".pydump_offsets")).string();
    run_py("gguf_py_dump.py --offsets" + args.substr(std::string("gguf_py_dump.py").size()), offs);
    if (HasFatalFailure()) return;
    auto m = GgufModel::open(files[files.size() / 2]);
    ASSERT_TRUE(m.ok()) << m.error().message;
    expect_same_lines(dump_model(*m, true), read_lines(offs), name + ": our reader vs GGUFReader offsets");
  }
}

}  // namespace
}  // namespace ds4::gguf::test
