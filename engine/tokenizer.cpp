// engine/tokenizer.cpp — byte-level BPE with the DeepSeek-V3 pre-tokenizer (see tokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer.h"

#include <cctype>
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <queue>

namespace ds4 {

namespace {

// GPT-2 byte-to-unicode (openai/gpt-2 src/encoder.py bytes_to_unicode): bytes 33-126, 161-172 and
// 174-255 keep their code point; the remaining 68 bytes get 256, 257, ... in increasing byte order.
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code point -> byte, -1 if not a mapped code point
  std::array<std::string, 256> utf8;
  ByteMap() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = keep ? uint32_t(b) : next++;
      from_cp[to_cp[b]] = int16_t(b);
    }
    for (int b = 0; b < 256; ++b) {
      uint32_t cp = to_cp[b];
      std::string s;
      if (cp < 0x80) {
        s.push_back(char(cp));
      } else {  // all mapped code points are < 0x800: two bytes
        s.push_back(char(0xC0 | (cp >> 6)));
        s.push_back(char(0x80 | (cp & 0x3F)));
      }
      utf8[b] = s;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Decodes one UTF-8 code point at s[i] (well-formed or not). Returns the number of bytes consumed
// (>= 1) and sets cp, or cp = UINT32_MAX when the bytes are not a valid sequence (consumes 1).
size_t next_code_point(std::string_view s, size_t i, uint32_t& cp) {
  auto b0 = uint8_t(s[i]);
  if (b0 < 0x80) { cp = b0; return 1; }
  int n = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) { n = 1; cp = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { n = 2; cp = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { n = 3; cp = b0 & 0x07; min = 0x10000; }
  else { cp = UINT32_MAX; return 1; }
  for (int k = 1; k <= n; ++k) {
    if (i + k >= s.size()) { cp = UINT32_MAX; return 1; }
    auto b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) { cp = UINT32_MAX; return 1; }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { cp = UINT32_MAX; return 1; }
  return size_t(n) + 1;
}

// Reverse byte mapping of a byte-level token text; code points outside the mapping keep their
// UTF-8 bytes (lenient, so a foreign token cannot make decoding fail).
std::string unmap_bytes(std::string_view text) {
  const auto& m = byte_map();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    size_t n = next_code_point(text, i, cp);
    if (cp != UINT32_MAX && cp < m.from_cp.size() && m.from_cp[cp] >= 0)
      out.push_back(char(m.from_cp[cp]));
    else
      out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

// The DeepSeek-V3 pre-tokenizer: three regexes applied in sequence, each splitting every piece of
// the previous step into matches and gaps (HF Split behavior "isolated"). Facts from
// ggml-org/llama.cpp src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM.
constexpr const char* kDeepSeekV3Regexes[] = {
    R"(\p{N}{1,3})",
    R"([一-龥぀-ゟ゠-ヿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_map().to_cp[b]; }
std::string byte_to_unicode_utf8(uint8_t b) { return byte_map().utf8[b]; }

struct Tokenizer::Regexes {
  std::vector<pcre2_code*> codes;
  ~Regexes() {
    for (auto* c : codes) pcre2_code_free(c);
  }
};

Tokenizer::~Tokenizer() = default;

Result<std::shared_ptr<const Tokenizer>> Tokenizer::create(TokenizerVocab vocab,
                                                           const std::string& source) {
  auto fail = [&](const std::string& msg) { return Error{source + ": " + msg}; };
  if (vocab.model != "gpt2")
    return fail("tokenizer.ggml.model: expected \"gpt2\" (byte-level BPE), found \"" + vocab.model + "\"");
  if (vocab.pre != "deepseek-v3")
    return fail("tokenizer.ggml.pre: expected \"deepseek-v3\", found \"" + vocab.pre + "\"");
  const size_t n = vocab.tokens.size();
  if (n == 0) return fail("tokenizer.ggml.tokens: expected a non-empty array, found 0 tokens");
  if (vocab.token_types.empty()) vocab.token_types.assign(n, int32_t(TokenType::Normal));
  if (vocab.token_types.size() != n)
    return fail("tokenizer.ggml.token_type: expected " + std::to_string(n) + " entries (one per token), found " +
                std::to_string(vocab.token_types.size()));
  for (auto [name, id] : {std::pair{"bos_token_id", vocab.bos_id}, std::pair{"eos_token_id", vocab.eos_id},
                          std::pair{"padding_token_id", vocab.pad_id}})
    if (id < -1 || id >= int32_t(n))
      return fail(std::string("tokenizer.ggml.") + name + ": expected an id in [0, " + std::to_string(n) +
                  "), found " + std::to_string(id));
  if (vocab.add_bos && vocab.bos_id < 0)
    return fail("tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id");

  std::shared_ptr<Tokenizer> t(new Tokenizer());
  t->token_bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& text = vocab.tokens[i];
    t->token_to_id_.emplace(text, int32_t(i));  // keeps the lowest id for duplicates
    auto type = TokenType(vocab.token_types[i]);
    if (type == TokenType::Control || type == TokenType::UserDefined) {
      t->token_bytes_[i] = text;
      if (!text.empty()) t->specials_by_length_.push_back(int32_t(i));
    } else if (type == TokenType::Byte && text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>' &&
               std::isxdigit(static_cast<unsigned char>(text[3])) && std::isxdigit(static_cast<unsigned char>(text[4]))) {
      t->token_bytes_[i] = std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
    } else {
      t->token_bytes_[i] = unmap_bytes(text);
    }
  }
  std::stable_sort(t->specials_by_length_.begin(), t->specials_by_length_.end(), [&](int32_t a, int32_t b) {
    return vocab.tokens[size_t(a)].size() > vocab.tokens[size_t(b)].size();
  });
  t->specials_by_byte_.resize(256);
  for (int32_t id : t->specials_by_length_)
    t->specials_by_byte_[uint8_t(vocab.tokens[size_t(id)][0])].push_back(id);
  for (int b = 0; b < 256; ++b) {
    auto it = t->token_to_id_.find(byte_map().utf8[b]);
    if (it == t->token_to_id_.end())
      return fail("tokenizer.ggml.tokens: expected a token for every byte (GPT-2 byte-level alphabet), byte 0x" +
                  std::string(1, "0123456789abcdef"[b >> 4]) + std::string(1, "0123456789abcdef"[b & 15]) +
                  " has none");
    t->byte_token_[b] = it->second;
  }
  for (size_t r = 0; r < vocab.merges.size(); ++r) {
    const auto& m = vocab.merges[r];
    auto sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
      return fail("tokenizer.ggml.merges[" + std::to_string(r) + "]: expected \"LEFT RIGHT\", found \"" + m + "\"");
    auto merged = m.substr(0, sp) + m.substr(sp + 1);
    if (!t->token_to_id_.count(merged))
      return fail("tokenizer.ggml.merges[" + std::to_string(r) + "] \"" + m + "\": the merged token \"" + merged +
                  "\" is not in tokenizer.ggml.tokens");
    t->merge_rank_.emplace(m, int32_t(r));  // keeps the lowest rank for duplicates
  }

  t->regexes_ = std::make_unique<Regexes>();
  for (const char* pattern : kDeepSeekV3Regexes) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      return fail(std::string("pre-tokenizer regex rejected by PCRE2 at offset ") + std::to_string(off) + ": " +
                  reinterpret_cast<const char*>(buf));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; interpretive matching if unavailable
    t->regexes_->codes.push_back(code);
  }
  t->vocab_ = std::move(vocab);
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

TokenType Tokenizer::token_type(int32_t id) const {
  DS4_CHECK(id >= 0 && id < vocab_size());
  return TokenType(vocab_.token_types[size_t(id)]);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  DS4_CHECK(id >= 0 && id < vocab_size());
  return vocab_.tokens[size_t(id)];
}

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.emplace_back(text);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  for (pcre2_code* code : regexes_->codes) {
    std::vector<std::string> next;
    for (const auto& piece : pieces) {
      size_t pos = 0, last = 0;
      while (pos <= piece.size()) {
        int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(piece.data()), piece.size(), pos, 0, md, nullptr);
        if (rc < 0) break;  // PCRE2_ERROR_NOMATCH (or an error): the rest is one gap
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e == s) {  // empty match (not produced by these patterns): step over one byte
          pos = s + 1;
          continue;
        }
        if (s > last) next.emplace_back(piece.substr(last, s - last));
        next.emplace_back(piece.substr(s, e - s));
        last = pos = e;
      }
      if (last < piece.size()) next.emplace_back(piece.substr(last));
    }
    pieces = std::move(next);
  }
  pcre2_match_data_free(md);
  return pieces;
}

void Tokenizer::bpe_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const auto& m = byte_map();
  const size_t n = piece.size();
  if (n == 0) return;
  // Byte-level text of the piece and where each source byte's character starts in it.
  std::string mapped;
  std::vector<size_t> off(n + 1);
  for (size_t i = 0; i < n; ++i) {
    off[i] = mapped.size();
    mapped += m.utf8[uint8_t(piece[i])];
  }
  off[n] = mapped.size();
  struct Sym {
    size_t start, len;  // in source bytes
    int prev, next;
  };
  std::vector<Sym> sym(n);
  for (size_t i = 0; i < n; ++i) sym[i] = {i, 1, int(i) - 1, i + 1 < n ? int(i) + 1 : -1};
  auto text = [&](const Sym& s) {
    return std::string_view(mapped).substr(off[s.start], off[s.start + s.len] - off[s.start]);
  };
  struct Cand {
    int32_t rank;
    int left, right;
    size_t llen, rlen;
  };
  auto worse = [](const Cand& a, const Cand& b) {  // min-heap on (rank, left position)
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  std::string key;
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(text(sym[size_t(l)]));
    key.push_back(' ');
    key.append(text(sym[size_t(r)]));
    auto it = merge_rank_.find(key);
    if (it != merge_rank_.end()) heap.push({it->second, l, r, sym[size_t(l)].len, sym[size_t(r)].len});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int(i), int(i) + 1);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& L = sym[size_t(c.left)];
    Sym& R = sym[size_t(c.right)];
    // Stale if either side was merged since (lengths only grow) or they are no longer adjacent.
    if (L.len != c.llen || R.len != c.rlen || L.next != c.right || R.len == 0) continue;
    L.len += R.len;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) sym[size_t(R.next)].prev = c.left;
    push(L.prev, c.left);
    push(c.left, L.next);
  }
  for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
    const Sym& s = sym[size_t(i)];
    auto it = token_to_id_.find(std::string(text(s)));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
    } else {  // merged text without a token (inconsistent vocab): fall back to byte tokens
      for (size_t k = 0; k < s.len; ++k) out.push_back(byte_token_[uint8_t(piece[s.start + k])]);
    }
  }
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  for (const auto& piece : pre_tokenize(text)) bpe_piece(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  if (!parse_special || specials_by_length_.empty()) {
    encode_plain(text, out);
    return out;
  }
  size_t start = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    for (int32_t id : specials_by_byte_[uint8_t(text[i])]) {  // longest first
      const auto& s = vocab_.tokens[size_t(id)];
      if (text.compare(i, s.size(), s) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    encode_plain(text.substr(start, i - start), out);
    out.push_back(hit);
    i += vocab_.tokens[size_t(hit)].size();
    start = i;
  }
  encode_plain(text.substr(start), out);
  return out;
}

std::string Tokenizer::token_bytes(int32_t id, bool render_control) const {
  DS4_CHECK(id >= 0 && id < vocab_size());
  if (TokenType(vocab_.token_types[size_t(id)]) == TokenType::Control && !render_control) return {};
  return token_bytes_[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_control) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id, render_control);
  return out;
}

}  // namespace ds4
