// engine/session.cpp — Model::load and Session::create for DeepSeek-V4 GGUFs (see session.h,
// dsv4_model.h).
#include <algorithm>
#include <thread>

#include "engine/dsv4_model.h"

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
    *out = static_cast<int32_t>(x);
    return ok();
  };
  DS4_TRY_VOID(id("tokenizer.ggml.bos_token_id", &v.bos_id));
  DS4_TRY_VOID(id("tokenizer.ggml.eos_token_id", &v.eos_id));
  DS4_TRY_VOID(id("tokenizer.ggml.padding_token_id", &v.pad_id));
  if (meta.has("tokenizer.ggml.add_bos_token")) { DS4_TRY(v.add_bos, meta.get_bool("tokenizer.ggml.add_bos_token")); }
  return v;
}

Result<std::shared_ptr<Dsv4Model>> Dsv4Model::open(const std::string& path, const ModelOptions& opts) {
  if (opts.tp != 1)
    return Error{"model options: tensor parallelism tp=" + std::to_string(opts.tp) +
                 " is not available on the CPU backend (expected tp=1)"};
  DS4_TRY(gguf::GgufModel file, gguf::GgufModel::open(path));
  std::shared_ptr<Dsv4Model> m(new Dsv4Model(std::move(file)));
  m->opts_ = opts;
  DS4_TRY(m->config_, model_config_from_gguf(m->file_.metadata(), m->file_.tensors(), path));
  DS4_TRY(m->weights_, bind_weights(m->file_, m->config_));
  DS4_TRY(TokenizerVocab vocab, tokenizer_vocab_from_gguf(m->file_.metadata()));
  if (!vocab.tokens.empty()) {
    DS4_TRY(m->tokenizer_, Tokenizer::create(std::move(vocab), path));
  }
  m->device_ = dev::make_cpu_device(opts.threads);
  return m;
}

Result<std::shared_ptr<Model>> Model::load(const std::string& path, const ModelOptions& opts) {
  DS4_TRY(std::shared_ptr<Dsv4Model> m, Dsv4Model::open(path, opts));
  return std::shared_ptr<Model>(std::move(m));
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<Model> model) {
  auto m = std::dynamic_pointer_cast<Dsv4Model>(model);
  if (!m) return Error{"Session::create: the model is not a DeepSeek-V4 model loaded by Model::load"};
  return std::unique_ptr<Session>(new Dsv4Session(std::move(m)));
}

Result<void> Dsv4Session::eval(std::span<const int32_t> tokens, std::vector<float>* logits_all,
                               std::vector<float>* logits_last) {
  const ModelConfig& c = model_->config();
  if (state_.pos + static_cast<int64_t>(tokens.size()) > c.n_ctx)
    return Error{"eval: " + std::to_string(state_.pos) + " + " + std::to_string(tokens.size()) +
                 " tokens exceed the model's context_length " + std::to_string(c.n_ctx)};
  if (tokens.empty()) return ok();
  const bool all = logits_all != nullptr;
  std::vector<float>* dst = all ? logits_all : logits_last;  // null: no head matmul
  DS4_TRY_VOID(forward_.eval(tokens, state_, all, dst, trace_));
  if (all && logits_last) {
    logits_last->assign(logits_all->end() - c.vocab, logits_all->end());
  }
  return ok();
}

}  // namespace ds4
