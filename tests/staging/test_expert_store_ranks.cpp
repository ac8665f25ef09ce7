// tests/staging/test_expert_store_ranks.cpp — the plan-driven store shared by R rank threads
// (StoreOptions::rank_threads, ExpertStore::for_rank): R threads at once, each through its own
// view, read NVMe experts (whole, and their row slices in a split layer) and host experts; every
// matrix equals the mmap's rows, and the bytes per tier and the rank readers' bytes are what the
// reads imply (counted here from the tensors' shapes). Bad option combinations are refused. A rank
// reader frees a big step's buffers once recent steps need few.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "gguf/gguf_file.h"
#include "staging/expert_slabs.h"
#include "staging/expert_store.h"
#include "staging/nvme_rank_reader.h"
#include "staging/store_options.h"
#include "staging_fixture.h"
#include "tests/support/test_env.h"

namespace ds4::staging {
namespace {

/// Rows [r0, r0 + n) of expert e's `p` matrix in the mmap.
const uint8_t* mmap_rows(const gguf::GgufModel& m, int l, int e, ExpertProj p, int64_t r0, uint64_t* row_bytes,
                         int64_t* out) {
  const char* names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  const gguf::TensorInfo* t = m.find("blk." + std::to_string(l) + "." + names[static_cast<int>(p)] + ".weight");
  *row_bytes = t->row_bytes();
  *out = t->ne[1];
  return t->data + (static_cast<uint64_t>(e) * static_cast<uint64_t>(t->ne[1]) + uint64_t(r0)) * t->row_bytes();
}

/// Homes: layer 0 split, layer 1 whole; experts cycle Nvme, Host, NvmeCpu, Resident.
MixedPlacement placement() {
  MixedPlacement p;
  for (int l = 0; l < test::kFxLayers; ++l) {
    std::vector<ExpertHome> h;
    for (int e = 0; e < test::kFxExperts; ++e)
      h.push_back(std::array{ExpertHome::Nvme, ExpertHome::Host, ExpertHome::NvmeCpu, ExpertHome::Resident}[e % 4]);
    p.home.push_back(h);
    p.node.push_back(std::vector<int>(size_t(test::kFxExperts), 0));
    p.pinned.push_back(std::vector<bool>(size_t(test::kFxExperts), false));
    p.split.push_back(l == 0);
  }
  p.node_numa_id = {-1};
  return p;
}

/// Store options for R rank threads reading R slices, host experts served from their slabs,
/// pageable buffers, no fallback notes.
StoreOptions rank_options(int R) {
  StoreOptions o;
  o.ranks = R;
  o.rank_threads = R;
  o.host_direct = true;
  o.pin = false;
  o.print_fallback = false;
  return o;
}

TEST(MixedStoreRanks, RankThreadsReadTheirNvmeExpertsAndSlicesAtOnce) {
  const auto dir = test::scratch_dir("staging_store_ranks");
  const std::string path = (dir / "experts.gguf").string();
  ASSERT_EQ(test::write_expert_gguf(path, 0, 31), "");
  auto m = gguf::GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  for (int R : {2, 4}) {
    auto s = make_mixed_expert_store(placement(), *m, rank_options(R));
    ASSERT_TRUE(s.ok()) << s.error().message;
    ExpertStore& store = **s;
    EXPECT_EQ(&store.for_rank(0), &store);
    for (int r = 1; r < R; ++r) EXPECT_NE(&store.for_rank(r), &store);
    constexpr int kRounds = 5;
    std::vector<std::string> fail(static_cast<size_t>(R));
    std::vector<std::thread> th;
    for (int r = 0; r < R; ++r)
      th.emplace_back([&, r] {
        ExpertStore& v = store.for_rank(r);
        std::string& f = fail[size_t(r)];
        for (int round = 0; round < kRounds && f.empty(); ++round)
          for (int l = 0; l < test::kFxLayers && f.empty(); ++l) {
            std::vector<int> all;
            for (int e = 0; e < test::kFxExperts; ++e) all.push_back(e);
            if (!v.begin_step(l, all).ok()) f = "begin_step failed";
            for (int e = 0; e < test::kFxExperts && f.empty(); ++e)
              for (int rep = 0; rep < 2 && f.empty(); ++rep)  // a second get in the step: no second read
                for (int p = 0; p < 3 && f.empty(); ++p) {
                  const ExpertProj pj = static_cast<ExpertProj>(p);
                  const bool sliced = v.rank_sliced(l, e);
                  const ExpertHome h = placement().home[size_t(l)][size_t(e)];
                  if (sliced != (l == 0 && (h == ExpertHome::Nvme || h == ExpertHome::Host))) f = "rank_sliced";
                  auto w = sliced ? v.get_rank_slice(l, e, pj, r) : v.get(l, e, pj);
                  if (!w.ok()) {
                    f = w.error().message;
                    break;
                  }
                  uint64_t rb = 0;
                  int64_t out = 0;
                  (void)mmap_rows(*m, l, e, pj, 0, &rb, &out);
                  const int64_t r0 = sliced ? out * r / R : 0, n = sliced ? out * (r + 1) / R - r0 : out;
                  const uint8_t* ref = mmap_rows(*m, l, e, pj, r0, &rb, &out);
                  if (w->out != n || w->row_bytes != rb || std::memcmp(w->data, ref, size_t(n) * rb) != 0)
                    f = "layer " + std::to_string(l) + " expert " + std::to_string(e) + " proj " + std::to_string(p) +
                        ": bytes differ from the mmap rows";
                }
            v.end_step(l);
          }
      });
    for (auto& t : th) t.join();
    for (int r = 0; r < R; ++r) EXPECT_EQ(fail[size_t(r)], "") << "R " << R << " rank " << r;
    // Expected bytes, per (round, rank): layer 0's Nvme experts as 1/R slices (every rank's rows
    // add up to the whole expert once), layer 1's read whole by every rank; NvmeCpu whole in both.
    uint64_t expert_bytes[test::kFxLayers] = {};
    for (int l = 0; l < test::kFxLayers; ++l)
      for (int p = 0; p < 3; ++p) {
        uint64_t rb = 0;
        int64_t out = 0;
        (void)mmap_rows(*m, l, 0, static_cast<ExpertProj>(p), 0, &rb, &out);
        expert_bytes[l] += uint64_t(out) * rb;
      }
    const uint64_t per = uint64_t(test::kFxExperts / 4);  // experts of each home per layer
    const uint64_t to_dev = kRounds * per * (expert_bytes[0] + uint64_t(R) * expert_bytes[1]);
    const uint64_t to_cpu = kRounds * per * uint64_t(R) * (expert_bytes[0] + expert_bytes[1]);
    const StagingCounters c = store.counters();
    EXPECT_EQ(c.bytes_nvme_to_device, to_dev) << "R " << R;
    EXPECT_EQ(c.bytes_nvme_to_cpu, to_cpu) << "R " << R;
    ASSERT_TRUE(c.has_reader);
    EXPECT_EQ(c.reader.bytes, to_dev + to_cpu) << "R " << R << ": the rank readers delivered every NVMe byte once";
  }
}

// ExpertStore::begin_prefetch (the engine's hash-layer prefetch, before any layer's begin_step of
// the step): a rank's split NVMe slice read in the previous step (here: the same step, the worst
// case, a model whose last layer is a hash layer) is read and counted again, with the mmap's bytes.
TEST(MixedStoreRanks, BeginPrefetchReadsARanksNvmeSlicesAnew) {
  const auto dir = test::scratch_dir("staging_store_ranks_prefetch");
  const std::string path = (dir / "experts.gguf").string();
  ASSERT_EQ(test::write_expert_gguf(path, 0, 31), "");
  auto m = gguf::GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  constexpr int R = 2;
  auto s = make_mixed_expert_store(placement(), *m, rank_options(R));
  ASSERT_TRUE(s.ok()) << s.error().message;
  ExpertStore& store = **s;
  for (int r = 0; r < R; ++r) {  // one rank at a time: each view from one thread
    ExpertStore& v = store.for_rank(r);
    ASSERT_TRUE(v.rank_sliced(0, 0)) << "expected layer 0's expert 0 to be a split NVMe expert";
    const std::vector<int> experts{0};
    ASSERT_TRUE(v.begin_step(0, experts).ok());
    uint64_t slice_bytes = 0;  // rank r's rows of the three projections
    for (int p = 0; p < 3; ++p) {
      uint64_t rb = 0;
      int64_t out = 0;
      (void)mmap_rows(*m, 0, 0, static_cast<ExpertProj>(p), 0, &rb, &out);
      slice_bytes += uint64_t(out * (r + 1) / R - out * r / R) * rb;
    }
    auto read = [&] {
      const uint64_t b0 = store.counters().bytes_nvme_to_device;
      for (int p = 0; p < 3; ++p) {
        const ExpertProj pj = static_cast<ExpertProj>(p);
        auto w = v.get_rank_slice(0, 0, pj, r);
        EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message);
        if (!w.ok()) return uint64_t{0};
        uint64_t rb = 0;
        int64_t out = 0;
        (void)mmap_rows(*m, 0, 0, pj, 0, &rb, &out);
        const uint8_t* ref = mmap_rows(*m, 0, 0, pj, out * r / R, &rb, &out);
        EXPECT_EQ(std::memcmp(w->data, ref, size_t(w->out) * rb), 0) << "rank " << r << " proj " << p;
      }
      return store.counters().bytes_nvme_to_device - b0;
    };
    EXPECT_EQ(read(), slice_bytes) << "rank " << r << ": the step's first read";
    EXPECT_EQ(read(), 0u) << "rank " << r << ": read again within the step";
    v.begin_prefetch();
    EXPECT_EQ(read(), slice_bytes) << "rank " << r << ": after begin_prefetch, read and counted anew";
    v.end_step(0);
  }
}

TEST(MixedStoreRanks, RankThreadsWithoutHostDirectOrWithOtherSliceCountsAreRefused) {
  const auto dir = test::scratch_dir("staging_store_ranks_bad");
  const std::string path = (dir / "experts.gguf").string();
  ASSERT_EQ(test::write_expert_gguf(path, 0, 32), "");
  auto m = gguf::GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  StoreOptions o;
  o.rank_threads = 2;
  o.pin = false;
  o.print_fallback = false;
  auto a = make_mixed_expert_store(placement(), *m, o);  // host experts through a step cache
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("expected host experts served from their slabs"), std::string::npos)
      << a.error().message;
  o.host_direct = true;
  o.ranks = 4;
  auto b = make_mixed_expert_store(placement(), *m, o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("found 4 slices and 2 threads"), std::string::npos) << b.error().message;
  o.rank_threads = 0;
  auto z = make_mixed_expert_store(placement(), *m, o);
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.error().message.find("rank_threads: expected >= 1, found 0"), std::string::npos) << z.error().message;
}

// The whole NVMe experts listed to begin_step (layer 1 is whole: its Nvme and NvmeCpu experts)
// are read there, in one batch, and counted once: the gets after it read and count nothing more
// and return the mmap's bytes; an expert listed twice is read once.
TEST(MixedStoreRanks, BeginStepReadsTheWholeNvmeExpertsInOneBatch) {
  const auto dir = test::scratch_dir("staging_store_ranks_batch");
  const std::string path = (dir / "experts.gguf").string();
  ASSERT_EQ(test::write_expert_gguf(path, 0, 17), "");
  auto m = gguf::GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto s = make_mixed_expert_store(placement(), *m, rank_options(2));
  ASSERT_TRUE(s.ok()) << s.error().message;
  ExpertStore& v = (*s)->for_rank(1);
  uint64_t expert_bytes = 0;
  for (int p = 0; p < 3; ++p) {
    uint64_t rb = 0;
    int64_t out = 0;
    (void)mmap_rows(*m, 1, 0, static_cast<ExpertProj>(p), 0, &rb, &out);
    expert_bytes += uint64_t(out) * rb;
  }
  std::vector<int> all;
  for (int e = 0; e < test::kFxExperts; ++e) all.push_back(e);
  all.push_back(0);  // listed twice
  const StagingCounters c0 = (*s)->counters();
  ASSERT_TRUE(v.begin_step(1, all).ok());
  const StagingCounters c1 = (*s)->counters();
  const uint64_t per = uint64_t(test::kFxExperts / 4);  // experts of each home
  EXPECT_EQ(c1.bytes_nvme_to_device - c0.bytes_nvme_to_device, per * expert_bytes);
  EXPECT_EQ(c1.bytes_nvme_to_cpu - c0.bytes_nvme_to_cpu, per * expert_bytes);
  EXPECT_EQ(c1.reader.bytes - c0.reader.bytes, 2 * per * expert_bytes) << "read at begin_step, each once";
  for (int e = 0; e < test::kFxExperts; ++e)
    for (int p = 0; p < 3; ++p) {
      auto w = v.get(1, e, static_cast<ExpertProj>(p));
      ASSERT_TRUE(w.ok()) << w.error().message;
      uint64_t rb = 0;
      int64_t out = 0;
      const uint8_t* ref = mmap_rows(*m, 1, e, static_cast<ExpertProj>(p), 0, &rb, &out);
      EXPECT_EQ(std::memcmp(w->data, ref, size_t(out) * rb), 0) << "expert " << e << " proj " << p;
    }
  const StagingCounters c2 = (*s)->counters();
  EXPECT_EQ(c2.bytes_nvme_to_device, c1.bytes_nvme_to_device) << "the gets read nothing again";
  EXPECT_EQ(c2.bytes_nvme_to_cpu, c1.bytes_nvme_to_cpu);
  EXPECT_EQ(c2.reader.bytes, c1.reader.bytes);
  v.end_step(1);
}

// A rank reader's step buffers after a step that read many experts (a prefill) are kept while
// any of the last kTrimWindow steps needed them (no free and re-allocate between layers of
// different counts), then freed down to what the recent steps need: memory does not stay at the
// largest step's size for the session.
TEST(NvmeRankReaderBuffers, ABigStepsBuffersAreFreedOnceRecentStepsNeedFew) {
  const auto dir = test::scratch_dir("staging_rank_reader_trim");
  const std::string path = (dir / "experts.gguf").string();
  ASSERT_EQ(test::write_expert_gguf(path, 0, 5), "");
  auto m = gguf::GgufModel::open(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto L = ExpertLayout::from_gguf(*m);
  ASSERT_TRUE(L.ok()) << L.error().message;
  ReaderOptions ro;
  ro.direct = false;
  auto r = NvmeRankReader::open({path}, ro);
  ASSERT_TRUE(r.ok()) << r.error().message;
  NvmeRankReader& rd = **r;
  const uint64_t slab = L->slab_bytes(0);
  auto step = [&](int n) {  // one step reading experts 0..n-1 of layer 0
    rd.begin_step();
    for (int e = 0; e < n; ++e) {
      uint64_t read = 0;
      auto w = rd.whole(*L, 0, e, &read);
      ASSERT_TRUE(w.ok()) << w.error().message;
      EXPECT_GT(read, 0u);
    }
  };
  step(test::kFxExperts);
  EXPECT_EQ(rd.held_bytes(), uint64_t(test::kFxExperts) * slab);
  for (size_t i = 0; i + 1 < NvmeRankReader::kTrimWindow; ++i) step(1);
  EXPECT_EQ(rd.held_bytes(), uint64_t(test::kFxExperts) * slab) << "freed within the window";
  step(1);
  step(1);
  EXPECT_EQ(rd.held_bytes(), slab) << "expected the big step's buffers freed after the window";
  step(3);  // grows again as a step needs
  EXPECT_EQ(rd.held_bytes(), 3 * slab);
}

}  // namespace
}  // namespace ds4::staging
