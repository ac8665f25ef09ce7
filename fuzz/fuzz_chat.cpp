// fuzz/fuzz_chat.cpp — render_chat on arbitrary messages (NUL-separated fields: role byte, content,
// reasoning), then the rendering tokenized with special tokens on (the path of `run --chat` and
// `chat`). Errors are fine; crashes and sanitizer reports are not.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/chat_format.h"
#include "fuzz/fuzz_tiny_tokenizer.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ds4::fuzz::init_tiny_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::shared_ptr<const ds4::Tokenizer>& tok = ds4::fuzz::tiny_tokenizer();
  if (size < 1) return 0;
  static const char* roles[] = {"system", "user", "assistant", "tool", ""};
  std::vector<std::string> fields;
  std::string cur;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0) {
      fields.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  fields.push_back(cur);
  std::vector<ds4::ChatMessage> msgs;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) {
    const unsigned char r = fields[i].empty() ? 0 : static_cast<unsigned char>(fields[i][0]);
    const std::string reasoning = fields[i].size() > 1 ? fields[i].substr(1) : std::string();
    msgs.push_back({roles[r % 5], fields[i + 1], reasoning});
  }
  ds4::ChatOptions o;
  o.mode = (data[0] & 1) ? ds4::ThinkingMode::Thinking : ds4::ThinkingMode::Chat;
  o.add_bos = data[0] & 2;
  o.drop_thinking = data[0] & 4;
  auto r = ds4::render_chat(msgs, o);
  if (r) (void)tok->encode(r.value(), false, true);
  return 0;
}
