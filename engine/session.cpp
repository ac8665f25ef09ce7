// engine/session.cpp — Model::load and Session::create for DeepSeek-V4 GGUFs (see session.h,
// dsv4_model.h).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <climits>
#include <new>
#include <thread>

#include "ds4/oom_message.h"
#include "engine/device_plan.h"
#include "engine/dsv4_model.h"
#include "engine/load_progress.h"
#include "engine/official_checkpoint.h"
#include "placement/gguf_sizes.h"
#include "placement/plan_file.h"
#include "staging/expert_store.h"
#include "staging/store_options.h"

namespace ds4 {

Result<TokenizerVocab> tokenizer_vocab_from_gguf(const gguf::Metadata& meta) {
  TokenizerVocab v;
  if (!meta.has("tokenizer.ggml.tokens")) return v;
  DS4_TRY(v.tokens, meta.get_string_array("tokenizer.ggml.tokens"));
  if (meta.has("tokenizer.ggml.model")) { DS4_TRY(v.model, meta.get_string("tokenizer.ggml.model")); }
  if (meta.has("tokenizer.ggml.pre")) { DS4_TRY(v.pre, meta.get_string("tokenizer.ggml.pre")); }
  if (meta.has("tokenizer.ggml.token_type")) {
    DS4_TRY(auto types, meta.get_int_array("tokenizer.ggml.token_type"));
    for (int64_t t : types) v.token_types.push_back(static_cast<int32_t>(t));
  }
  if (meta.has("tokenizer.ggml.merges")) { DS4_TRY(v.merges, meta.get_string_array("tokenizer.ggml.merges")); }
  auto id = [&](const char* key, int32_t* out) -> Result<void> {
    if (!meta.has(key)) return ok();
    DS4_TRY(int64_t x, meta.get_int(key));
    // Range-checked, not narrowed (Tokenizer::create then checks it against the vocabulary).
    if (x < -1 || x > INT32_MAX)
      return Error{std::string("key '") + key + "': expected a token id 0.." + std::to_string(INT32_MAX) + ", found " +
                   std::to_string(x)};
    *out = static_cast<int32_t>(x);
    return ok();
  };
  DS4_TRY_VOID(id("tokenizer.ggml.bos_token_id", &v.bos_id));
  DS4_TRY_VOID(id("tokenizer.ggml.eos_token_id", &v.eos_id));
  DS4_TRY_VOID(id("tokenizer.ggml.padding_token_id", &v.pad_id));
  if (meta.has("tokenizer.ggml.add_bos_token")) { DS4_TRY(v.add_bos, meta.get_bool("tokenizer.ggml.add_bos_token")); }
  return v;
}

namespace {

/// What --plan changes in a model being opened: the expert store and (tp > 1) the owners.
struct PlanSetup {
  staging::MixedPlacement placement;
  ExpertPlacement owners;  // empty: keep ModelOptions::expert_placement
};

/// Reads the plan file of `o` for model `c` (`path` names the model in errors) and checks its
/// expert sizes against the model file (see ModelOptions::expert_plan).
Result<placement::PlanFile> read_plan(const std::string& path, const ModelOptions& o, const ModelConfig& c,
                                      const gguf::GgufModel& file) {
  const std::string& f = o.expert_plan;  // with --experts-tier as well: refused before (Dsv4Model::open)
  DS4_TRY(placement::PlanFile pf, placement::read_plan_file(f, c.n_layer, c.n_expert, c.n_expert_used));
  // Same shape, other expert type: the plan's byte sizes say so (placement/gguf_sizes.h counts
  // them as `plan -m` did).
  DS4_TRY(placement::GgufPlanModel pm, placement::plan_model_from_gguf(file));
  DS4_TRY_VOID(placement::check_plan_expert_bytes(pf, pm.sizes.expert_bytes, f));
  return pf;
}

/// The expert store's placement (and, tp > 1, the owners) of plan `pf`; `f` names the plan in
/// errors (the --plan file, or the plan made at load). `host_direct`: the store serves Host experts
/// from their slabs (StoreOptions::host_direct: the CUDA backend copies every host-homed expert at
/// use itself, dev::BindMode::Staged; the CPU backend at tp > 1 reads them in place), so rank
/// threads may share it at tp > 1 (NVMe experts: each rank reads its own, StoreOptions::rank_threads).
/// At tp = the plan's ranks > 1, the plan's Split layers are marked (MixedPlacement::split): their
/// Host and Nvme experts are computed split over the ranks.
Result<PlanSetup> plan_setup(const std::string& f, const ModelOptions& o, const placement::PlanFile& pf,
                             bool host_direct) {
  const placement::Plan& p = pf.plan;
  if (p.ranks != 0 && p.ranks != o.tp)
    return Error{f + ": the plan places experts on " + std::to_string(p.ranks) + " GPU ranks; expected --tp " +
                 std::to_string(p.ranks) + ", found --tp " + std::to_string(o.tp)};
  PlanSetup out;
  staging::MixedPlacement& mp = out.placement;
  bool host = false, nvme = false;
  for (int l = 0; l < p.n_layers; ++l) {
    std::vector<staging::ExpertHome> home;
    std::vector<int> node;
    std::vector<bool> pinned;
    for (const placement::ExpertPlacement& e : p.experts[size_t(l)]) {
      using placement::Tier;
      using H = staging::ExpertHome;
      const H h = e.tier == Tier::Vram ? H::Resident
                  : e.tier == Tier::Host ? H::Host
                  : e.tier == Tier::Cpu  ? H::Cpu
                  : e.cpu_compute        ? H::NvmeCpu
                                         : H::Nvme;
      host = host || h == H::Host;
      nvme = nvme || h == H::Nvme || h == H::NvmeCpu;
      home.push_back(h);
      node.push_back(e.node);
      pinned.push_back(e.pinned);
    }
    mp.home.push_back(std::move(home));
    mp.node.push_back(std::move(node));
    mp.pinned.push_back(std::move(pinned));
  }
  mp.node_numa_id = pf.node_ids;
  // Host and NVMe experts at tp > 1 need a store the rank threads share: host experts served
  // from their slabs (no staging cache), NVMe experts read by each rank's own reader
  // (StoreOptions::rank_threads).
  DS4_CHECK(!(host || nvme) || host_direct || o.tp == 1);
  if (p.ranks == o.tp && o.tp > 1) {
    for (int l = 0; l < p.n_layers; ++l) mp.split.push_back(p.mode[size_t(l)] == placement::StageMode::Split);
    if (!o.expert_placement.empty())
      return Error{f + ": the plan sets the expert owners; expected no separate expert placement map"};
    ExpertPlacement owners(size_t(p.n_layers));
    for (int l = 0; l < p.n_layers; ++l)
      for (const placement::ExpertPlacement& e : p.experts[size_t(l)]) owners[size_t(l)].push_back(e.owner);
    out.owners = std::move(owners);
  }
  return out;
}

/// A device with its own memory (the CUDA backend): the non-expert weights and every expert of
/// rank `shard` (its owned experts; all at tp 1) the store keeps in stable memory (VRAM-resident
/// experts: the mmap / the plan's resident slabs) are copied to the device now; staged experts are
/// copied at each use (dev::BindMode::Staged); experts the plan computes on the CPU
/// (ExpertStore::cpu_computed) stay in host memory. The non-expert weights go to every rank's
/// device, the tensor-parallel matrices only the rank's part of them (bind_device_weights).
/// Prints the device's memory budget and the load
/// progress to stderr. Error when they do not fit.
Result<void> upload_to_device(const std::string& path, dev::Device& d, const ModelConfig& c, const ModelWeights& w,
                              const TpShard& shard, std::vector<DeviceWeights>* out) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const dev::Device::MemoryInfo before = d.memory_info();
  std::fprintf(stderr, "ds4: %s: memory budget %.0f MiB free of %.0f MiB\n", d.name(), before.free / kMiB,
               before.total / kMiB);
  // Bytes the upload needs: the experts held stable, and the rest of the model file's tensors.
  uint64_t expert_bytes = 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (int e = 0; e < c.n_expert; ++e) {
      if (!w.experts->stable(l, e) || !shard.owns_expert(l, e) || w.experts->cpu_computed(l, e)) continue;
      for (int p = 0; p < 3; ++p) {
        DS4_TRY(dev::WeightMatrix m, w.experts->get(l, e, static_cast<staging::ExpertProj>(p)));
        expert_bytes += m.row_bytes * static_cast<uint64_t>(m.out);
      }
    }
  out->push_back(bind_device_weights(c, w, d, shard));
  const uint64_t dense = d.weight_tier_bytes().h2d_persistent;
  std::fprintf(stderr, "ds4: %s: uploaded %.1f MiB of dense and attention weights\n", d.name(), dense / kMiB);
  if (before.total > 0 && expert_bytes > d.memory_info().free)
    return Error{path + ": --backend cuda: the VRAM-resident experts need " + std::to_string(expert_bytes >> 20) +
                 " MiB, expected at most the " + std::to_string(d.memory_info().free >> 20) +
                 " MiB free on " + d.name() + " (use --experts-tier host or a --plan that stages experts)"};
  load_progress().start_phase(LoadPhase::Upload, expert_bytes);  // the stable experts, counted per matrix
  int shown = -1;
  for (int l = 0; l < c.n_layer; ++l) {
    for (int e = 0; e < c.n_expert; ++e) {
      if (!w.experts->stable(l, e) || !shard.owns_expert(l, e) || w.experts->cpu_computed(l, e)) continue;
      for (int p = 0; p < 3; ++p) {
        DS4_TRY(dev::WeightMatrix m, w.experts->get(l, e, static_cast<staging::ExpertProj>(p)));
        (void)d.bind(m);
        load_progress().done += m.row_bytes * static_cast<uint64_t>(m.out);
      }
    }
    const int pct = (l + 1) * 100 / std::max(1, c.n_layer);
    if (pct / 25 != shown / 25 || l + 1 == c.n_layer) {
      shown = pct;
      std::fprintf(stderr, "ds4: %s: resident experts: layer %d/%d (%.1f MiB)\n", d.name(), l + 1, c.n_layer,
                   (d.weight_tier_bytes().h2d_persistent - dense) / kMiB);
    }
  }
  const dev::Device::MemoryInfo after = d.memory_info();
  std::fprintf(stderr, "ds4: %s: %.1f MiB resident in device memory, %.0f MiB free\n", d.name(),
               d.weight_tier_bytes().h2d_persistent / kMiB, after.free / kMiB);
  return ok();
}

}  // namespace

Result<std::shared_ptr<Dsv4Model>> Dsv4Model::open(const std::string& path, const ModelOptions& opts) {
  // Options first, before anything is mapped. Threads: one OS thread each, so an absurd count
  // would exhaust the process limit.
  if (opts.threads < 0 || opts.threads > kMaxThreads)
    return Error{path + ": threads: expected 0 (all) to " + std::to_string(kMaxThreads) + ", found " +
                 std::to_string(opts.threads)};
  // Tensor-parallel rank count, checked before anything is loaded or repacked (an --experts-tier
  // store at tp > 1 is built for tp rank threads).
  const int R = opts.tp;
  if (R != 1 && R != 2 && R != 4 && R != 8)
    return Error{path + ": tensor parallelism: tp=" + std::to_string(R) + ": expected 1, 2, 4 or 8"};
  auto kind = dev::parse_backend(opts.backend);
  if (!kind.ok()) return Error{path + ": --backend: " + kind.error().message};
  const bool cuda = *kind == dev::BackendKind::Cuda;
  // CUDA tensor parallelism: one GPU per rank (ordinal r), checked before anything is loaded.
  if (cuda && opts.tp > 1 && dev::cuda_device_count() < opts.tp)
    return Error{path + ": --backend cuda --tp " + std::to_string(opts.tp) + ": expected " + std::to_string(opts.tp) +
                 " CUDA devices (one per rank), found " + std::to_string(dev::cuda_device_count())};
  DS4_TRY(gguf::GgufModel file, open_model_file(path));  // GGUF or a safetensors checkpoint
  std::shared_ptr<Dsv4Model> m(new Dsv4Model(std::move(file)));
  m->opts_ = opts;
  DS4_TRY(m->config_, model_config_from_gguf(m->file_.metadata(), m->file_.tensors(), path));
  DS4_TRY(m->weights_, bind_weights(m->file_, m->config_));
  if (!opts.experts_tier.empty()) {
    // --experts-tier: every routed expert from one staging tier (staging/expert_store.h). The name
    // is checked first (a misspelt tier is named as such at any tp), then a --plan given as well.
    DS4_TRY(staging::ExpertTier tier, staging::parse_expert_tier(opts.experts_tier));
    if (!opts.expert_plan.empty())
      return Error{path + ": expert plan " + opts.expert_plan + " and --experts-tier " + opts.experts_tier +
                   ": expected one of them"};
    if (tier == staging::ExpertTier::Nvme && m->file_.has_in_memory_tensors())
      return Error{path + ": --experts-tier nvme reads experts from the model file, but this checkpoint's experts are "
                          "repacked in memory at load; expected a GGUF (ds4-offload convert --to gguf)"};
    if (opts.tp == 1) {
      // tp 1: the tier's caching store (make_expert_store: an LFU expert cache reused across
      // steps, one NVMe reader), made for one thread.
      DS4_TRY(m->weights_.experts, staging::make_expert_store(tier, m->file_, staging::StoreOptions{}));
    } else {
      // tp > 1: the rank threads share the store, so it is the plan-driven store with every
      // expert at the tier's home (make_rank_tier_store): host experts read in place from their
      // slabs, NVMe experts read by each rank's own reader, owners the default TP ownership
      // (ModelOptions::expert_placement). No cache: each use of a staged expert moves its bytes.
      DS4_TRY(m->weights_.experts, staging::make_rank_tier_store(tier, m->file_, opts.tp, staging::StoreOptions{}));
    }
  }
  // Backend: a device with its own memory and neither --plan nor --experts-tier gets a plan made
  // now from the device's free memory (engine/device_plan.h); the device is made first for it.
  // Only at tp 1: the planner's on-the-fly profile is one device; at tp > 1 without --plan every
  // rank keeps the experts it owns resident (a plan for R GPUs comes from `plan --hw` with a profile of R GPUs).
  if (!opts.expert_plan.empty()) {
    DS4_TRY(m->plan_, read_plan(path, opts, m->config_, m->file_));
  } else if (cuda && opts.experts_tier.empty() && opts.tp == 1) {
    m->devices_.push_back(dev::make_device(*kind, opts.threads));
    const int64_t ctx = std::min(m->config_.n_ctx, SessionOptions::kDefaultCapacity);
    std::string summary;
    DS4_TRY(m->plan_, plan_for_device(m->file_, *m->devices_[0], ctx, &summary));
    std::fputs(summary.c_str(), stderr);
  }
  if (m->plan_) {
    const std::string label = opts.expert_plan.empty() ? std::string("the plan made at load") : opts.expert_plan;
    // CUDA: the device's staging ring copies each host-homed expert at use; no second copy. The
    // CPU at tp > 1: the rank threads read host experts in place (a shared store; no cache).
    const bool host_direct = cuda || opts.tp > 1;
    DS4_TRY(PlanSetup ps, plan_setup(label, opts, *m->plan_, host_direct));
    if (!ps.owners.empty()) m->opts_.expert_placement = std::move(ps.owners);
    staging::StoreOptions so;
    // Staging slots: one step of one layer (top_k). The planner budgets 2 layers x top_k on the
    // GPU (a double buffer); layers run one after another here, and step-scoped slots move the
    // same bytes either way (no reuse across tokens, as the plan assumes).
    so.cache_slots_per_layer = m->config_.n_expert_used;
    so.host_direct = host_direct;
    // Split staging: the Host experts of the plan's Split layers in tp rank slices.
    so.ranks = std::count(ps.placement.split.begin(), ps.placement.split.end(), true) > 0 ? opts.tp : 1;
    // tp > 1: each rank thread reads its NVMe experts (whole, or its row slices in Split layers)
    // with its own reader and buffers (ExpertStore::for_rank).
    so.rank_threads = std::max(1, opts.tp);
    if (m->file_.has_in_memory_tensors())
      for (const auto& layer : ps.placement.home)
        for (staging::ExpertHome h : layer)
          if (h == staging::ExpertHome::Nvme || h == staging::ExpertHome::NvmeCpu)
            return Error{path + ": the plan reads experts from NVMe, but this checkpoint's experts are repacked in "
                                "memory at load; expected a GGUF (ds4-offload convert --to gguf) or a plan without NVMe"};
    DS4_TRY(m->weights_.experts, staging::make_mixed_expert_store(ps.placement, m->file_, so));
  }
  DS4_TRY(TokenizerVocab vocab, tokenizer_vocab_from_gguf(m->file_.metadata()));
  if (!vocab.tokens.empty()) {
    DS4_TRY(m->tokenizer_, Tokenizer::create(std::move(vocab), path));
  }
  // Tensor-parallel ranks: shards validated before any thread or device is made.
  for (int r = 0; r < R; ++r) {
    auto sh = make_tp_shard(m->config_, m->weights_, r, R, m->opts_.expert_placement);
    if (!sh.ok()) return Error{path + ": " + sh.error().message};
    m->shards_.push_back(std::move(*sh));
    DS4_TRY(RankWeightBytes b, rank_weight_bytes(m->config_, m->weights_, m->shards_.back()));
    m->rank_bytes_.push_back(b);
  }
  // Backend: the worker threads are split evenly over the ranks (results do not depend on the
  // thread count, kernels/device.h). The non-expert weights are bound once per rank device.
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int per_rank = std::max(1, (opts.threads > 0 ? opts.threads : hw) / R);
  // CUDA: rank r on CUDA device r, each with its own weights (upload_to_device) and an NCCL
  // group whose collectives the device enqueues on its compute stream.
  if (m->devices_.empty())
    for (int r = 0; r < R; ++r) m->devices_.push_back(dev::make_device(*kind, R == 1 ? opts.threads : per_rank, cuda ? r : 0));
  if (cuda) {
    for (int r = 0; r < R; ++r)
      DS4_TRY_VOID(upload_to_device(path, *m->devices_[r], m->config_, m->weights_, m->shards_[r], &m->dweights_));
    // Experts the plan computes on the CPU: one CPU device per rank computes them beside the
    // rank's GPU work (Forward::set_cpu_experts_device), with the rank's share of the threads.
    bool cpu_experts = false;
    for (int l = 0; l < m->config_.n_layer && !cpu_experts; ++l)
      for (int e = 0; e < m->config_.n_expert && !cpu_experts; ++e) cpu_experts = m->weights_.experts->cpu_computed(l, e);
    if (cpu_experts)
      for (int r = 0; r < R; ++r)
        m->cpu_expert_devices_.push_back(dev::make_device(dev::BackendKind::Cpu, R == 1 ? opts.threads : per_rank));
  } else {
    for (int r = 0; r < R; ++r)
      m->dweights_.push_back(bind_device_weights(m->config_, m->weights_, *m->devices_[r], m->shards_[r]));
  }
  if (R > 1 && cuda) {
    std::vector<int> ordinals;
    for (int r = 0; r < R; ++r) ordinals.push_back(r);
    auto g = comm::make_nccl_group(ordinals);
    if (!g.ok()) return Error{path + ": --backend cuda --tp " + std::to_string(R) + ": " + g.error().message};
    m->comms_ = std::move(*g);
  } else if (R > 1) {
    m->comms_ = comm::make_cpu_group(R);
  }
  return m;
}

RankMemory Dsv4Model::rank_memory(int rank) const {
  const RankWeightBytes& b = rank_bytes_.at(rank);
  RankMemory m;
  m.weights_replicated = b.replicated;
  m.weights_sharded = b.sharded;
  m.weights_experts = b.experts;
  return m;
}

std::string Dsv4Model::experts_summary() const { return weights_.experts->counters().summary(); }

Result<std::shared_ptr<Model>> Model::load(const std::string& path, const ModelOptions& opts) {
  DS4_TRY(std::shared_ptr<Dsv4Model> m, Dsv4Model::open(path, opts));
  return std::shared_ptr<Model>(std::move(m));
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<Model> model, const SessionOptions& opts) {
  auto m = std::dynamic_pointer_cast<Dsv4Model>(model);
  if (!m) return Error{"Session::create: the model is not a DeepSeek-V4 model loaded by Model::load"};
  const int64_t n_ctx = m->config().n_ctx;
  if (opts.capacity < 0 || opts.capacity > n_ctx)
    return Error{"session capacity " + std::to_string(opts.capacity) + ": expected 0 (default) to the model's context_length " +
                 std::to_string(n_ctx)};
  const int64_t cap = opts.capacity > 0 ? opts.capacity : std::min(n_ctx, SessionOptions::kDefaultCapacity);
  return std::unique_ptr<Session>(new Dsv4Session(std::move(m), cap));
}

Dsv4Session::Dsv4Session(std::shared_ptr<Dsv4Model> m)
    : Dsv4Session(m, std::min(m->config().n_ctx, SessionOptions::kDefaultCapacity)) {}

Dsv4Session::Dsv4Session(std::shared_ptr<Dsv4Model> m, int64_t capacity) : model_(std::move(m)) {
  const int R = model_->tp();
  for (int r = 0; r < R; ++r) {
    states_.push_back(std::make_unique<SequenceState>(model_->config(), model_->device(r), capacity));
    dev::Device& d = model_->device(r);
    if (d.owns_memory())  // the device budget of the sequence state (KV, compressor, indexer)
      std::fprintf(stderr, "ds4: %s: sequence state %.1f MiB for a context of %lld tokens, %.0f MiB free\n", d.name(),
                   states_.back()->bytes() / (1024.0 * 1024.0), static_cast<long long>(capacity),
                   d.memory_info().free / (1024.0 * 1024.0));
    if (R == 1)
      forwards_.push_back(std::make_unique<Forward>(model_->config(), model_->weights(), model_->device_weights(0),
                                                    model_->device(0), model_->act_format()));
    else
      forwards_.push_back(std::make_unique<Forward>(model_->config(), model_->weights(), model_->device_weights(r),
                                                    model_->device(r), model_->act_format(), model_->shard(r),
                                                    model_->comm(r)));
    forwards_.back()->set_graphs(model_->options().cuda_graphs);
    forwards_.back()->set_cpu_experts_device(model_->cpu_experts_device(r));
  }
}

WeightTraffic Dsv4Session::weight_traffic() const {
  WeightTraffic t;
  for (int r = 0; r < model_->tp(); ++r) {
    t.total += model_->device(r).weight_bytes_read();
    if (const dev::Device* h = model_->cpu_experts_device(r)) t.total += h->weight_bytes_read();
  }
  for (const auto& f : forwards_) {
    t.routed_experts += f->expert_weight_bytes();
    t.staged_by_rank.push_back(f->staged_expert_bytes());
    t.prefetched_slices_by_rank.push_back(f->prefetched_slices());
    t.prefetch_ring_stops_by_rank.push_back(f->prefetch_ring_stops());
    if (model_->cpu_experts_device(0)) {
      t.cpu_expert_s_by_rank.push_back(f->cpu_expert_seconds());
      t.cpu_expert_idle_s_by_rank.push_back(f->cpu_expert_gpu_idle_seconds());
    }
  }
  return t;
}

Result<void> Dsv4Session::restore_state(std::span<const uint8_t> blob) {
  for (auto& s : states_) DS4_TRY_VOID(s->restore(blob));
  return ok();
}

Result<void> Dsv4Session::eval(std::span<const int32_t> tokens, std::vector<float>* logits_all,
                               std::vector<float>* logits_last) {
  if (tokens.empty()) return ok();
  const BatchItem item{this, tokens, logits_all, logits_last};
  return eval_items(std::span<const BatchItem>(&item, 1));
}

Result<void> Dsv4Session::eval_items(std::span<const BatchItem> items) {
  if (items.empty()) return ok();
  std::vector<Dsv4Session*> ss;
  for (const BatchItem& it : items) {
    auto* s = dynamic_cast<Dsv4Session*>(it.session);
    if (!s) return Error{"eval_batch: a session is not a DeepSeek-V4 session"};
    if (s->model_ != static_cast<Dsv4Session*>(items[0].session)->model_)
      return Error{"eval_batch: the sessions belong to different models"};
    for (Dsv4Session* o : ss)
      if (o == s) return Error{"eval_batch: a session appears twice in one batch"};
    if (it.tokens.empty()) return Error{"eval_batch: a batch item has no tokens"};
    const ModelConfig& c = s->model_->config();
    const int64_t pos = s->position(), n = static_cast<int64_t>(it.tokens.size());
    if (pos + n > c.n_ctx)
      return Error{"eval: " + std::to_string(pos) + " + " + std::to_string(n) + " tokens exceed the model's context_length " +
                   std::to_string(c.n_ctx)};
    ss.push_back(s);
  }
  Dsv4Session& lead = *ss[0];
  const int R = static_cast<int>(lead.forwards_.size());
  const int64_t vocab = lead.model_->config().vocab;
  // Rank r's chunks: the sessions' rank-r states; rank 0 writes the logits and traces.
  std::vector<std::vector<float>> logits0(items.size());
  auto chunks_of = [&](int r, std::vector<std::vector<float>>* out) {
    std::vector<SeqChunk> v;
    for (size_t i = 0; i < items.size(); ++i) {
      const BatchItem& it = items[i];
      const bool want = it.logits_all || it.logits_last;
      v.push_back(SeqChunk{ss[i]->states_[r].get(), it.tokens, it.logits_all != nullptr,
                           want ? &(*out)[i] : nullptr, r == 0 ? ss[i]->trace_ : nullptr});
    }
    return v;
  };
  // A failed eval leaves every rank's position where it was: a rank that got further than the
  // failing one (it may pass the step's last layer, or, on NCCL, run on with the undefined data of
  // an aborted collective) must not be a step ahead of the others in the next call.
  std::vector<std::vector<int64_t>> pos_before(ss.size());
  for (size_t i = 0; i < ss.size(); ++i)
    for (const auto& st : ss[i]->states_) pos_before[i].push_back(st->pos);
  auto restore_positions = [&] {
    for (size_t i = 0; i < ss.size(); ++i)
      for (size_t r = 0; r < ss[i]->states_.size(); ++r) ss[i]->states_[r]->pos = pos_before[i][r];
  };
  if (R == 1) {
    const std::vector<SeqChunk> v = chunks_of(0, &logits0);
    if (Result<void> e = lead.forwards_[0]->eval(v); !e) {
      restore_positions();
      return e.error();
    }
  } else {
    // One thread per rank; every rank gets the full logits, rank 0's are returned.
    std::vector<Result<void>> res(static_cast<size_t>(R), ok());
    std::vector<std::vector<std::vector<float>>> scratch(static_cast<size_t>(R),
                                                         std::vector<std::vector<float>>(items.size()));
    // The first rank to fail is the origin: what the others return after its abort (an aborted
    // collective's kAbortedMessage, or an error their undefined data led to) is a consequence.
    std::atomic<int> origin{-1};
    // A rank thread must not let an exception escape (std::terminate, exit 134, temporary output
    // files left behind): an allocation failure becomes this rank's Error, naming the rank and the
    // process's memory.
    auto run_rank = [&](int r, std::vector<std::vector<float>>* out) {
      try {
        const std::vector<SeqChunk> v = chunks_of(r, out);
        res[r] = lead.forwards_[r]->eval(v);
      } catch (const std::bad_alloc&) {
        res[r] = Error{out_of_memory_message("evaluating tensor-parallel rank " + std::to_string(r) + " of " +
                                             std::to_string(R) + " (--tp)")};
      } catch (const std::exception& e) {
        res[r] = Error{"tensor-parallel rank " + std::to_string(r) + " of " + std::to_string(R) + ": " + e.what()};
      }
      // A rank that stops early would leave the others waiting in their next collective: its
      // abort makes those return kAbortedMessage and ends their pending ones (comm::Comm::abort:
      // the CPU and NCCL groups).
      if (!res[r].ok()) {
        int none = -1;
        origin.compare_exchange_strong(none, r);
        if (comm::Comm* c = lead.model_->comm(r)) c->abort();
      }
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < R; ++r) threads.emplace_back([&, r] { run_rank(r, &scratch[r]); });
    run_rank(0, &logits0);
    for (auto& t : threads) t.join();
    // The error to report is the origin's, not the others' kAbortedMessage (or the first error
    // that is not kAbortedMessage, should the origin's be one); the group is re-armed for the next
    // call and every rank's position restored.
    if (const int o = origin.load(); o >= 0) {
      const Result<void>* first = &res[size_t(o)];
      for (auto& r : res)
        if (!r.ok() && first->error().message == comm::kAbortedMessage) first = &r;
      if (comm::Comm* c = lead.model_->comm(0)) c->rearm();
      restore_positions();
      return first->error();
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    if (it.logits_all) *it.logits_all = std::move(logits0[i]);
    if (it.logits_last) {
      const std::vector<float>& src = it.logits_all ? *it.logits_all : logits0[i];
      if (it.logits_all)
        it.logits_last->assign(src.end() - vocab, src.end());
      else
        *it.logits_last = std::move(logits0[i]);
    }
  }
  return ok();
}

Result<void> eval_batch(std::span<const BatchItem> items) { return Dsv4Session::eval_items(items); }

}  // namespace ds4
