// engine/chat_format.cpp — see chat_format.h for the format and its source.
#include "engine/chat_format.h"

namespace ds4 {

Result<std::string> render_chat(std::span<const ChatMessage> messages, const ChatOptions& opts) {
  using namespace chat_tokens;
  int last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      return Error{"chat message " + std::to_string(i) + ": expected role system, user or assistant, found \"" +
                   r + "\""};
    if (r == "system" && i != 0)
      return Error{"chat message " + std::to_string(i) + ": a system message must be the first message"};
    if (r == "user") last_user = int(i);
  }
  const bool thinking = opts.mode == ThinkingMode::Thinking;
  std::string out;
  if (opts.add_bos) out += kBos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role == "system") {
      out += m.content;
    } else if (m.role == "user") {
      out += kUser;
      out += m.content;
    } else {  // assistant
      if (thinking && (!opts.drop_thinking || int(i) > last_user)) {
        out += m.reasoning;
        out += kThinkEnd;
      }
      out += m.content;
      out += kEos;
    }
    // A user turn followed by an assistant turn, or ending the conversation (generation prompt),
    // gets the assistant prefix; a user turn followed by another user turn does not.
    bool next_is_assistant = i + 1 < messages.size() && messages[i + 1].role == "assistant";
    bool last = i + 1 == messages.size();
    if (m.role == "user" && (next_is_assistant || last)) {
      out += kAssistant;
      bool open_thinking = thinking && (!opts.drop_thinking || int(i) >= last_user);
      out += open_thinking ? kThinkStart : kThinkEnd;
    }
  }
  return out;
}

}  // namespace ds4
