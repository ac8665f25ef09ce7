// engine/chat_format.h — DeepSeek-V4 chat prompt rendering (text level; the tokenizer then maps the
// special-token texts to their ids).
//
// Source of the format (facts only): DeepSeek's `encoding/encoding_dsv4.py` shipped with
// deepseek-ai/DeepSeek-V4-Flash (`encode_messages`), read through a public re-implementation that
// pins that file; consistent with the DeepSeek-V3.2 example output quoted in
// cywinski/non-assistant-sampling src/mask/test_deepseek_tokenizer.py. The facts used:
//  - the prompt starts with BOS "<｜begin▁of▁sentence｜>"; a system message's text follows directly;
//  - a user turn is "<｜User｜>" + content; the turn that precedes the model's reply is followed by
//    "<｜Assistant｜>" and then "<think>" (thinking mode) or "</think>" (chat mode);
//  - an assistant turn is content + "<｜end▁of▁sentence｜>"; in thinking mode an assistant turn after
//    the last user turn is written as reasoning + "</think>" + content + EOS, while earlier ones drop
//    their reasoning (their user turns then end in "</think>", like chat mode);
//  - reasoning-effort "low" (the default) adds no text. Tool calls/results are not rendered here.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "ds4/result.h"

namespace ds4 {

/// Special-token texts of the DeepSeek-V3/V4 vocabulary (U+FF5C fullwidth bars, U+2581 blocks).
namespace chat_tokens {
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
}  // namespace chat_tokens

/// One message. role: "system", "user" or "assistant". `reasoning` is an assistant's thinking text.
struct ChatMessage {
  std::string role;
  std::string content;
  std::string reasoning;
};

/// Chat (non-thinking) or thinking mode.
enum class ThinkingMode { Chat, Thinking };

/// Rendering options.
struct ChatOptions {
  ThinkingMode mode = ThinkingMode::Chat;
  bool add_bos = true;        // prefix "<｜begin▁of▁sentence｜>"
  bool drop_thinking = true;  // drop reasoning of assistant turns before the last user turn
};

/// Renders `messages` as DeepSeek-V4 prompt text, ending with the assistant prefix when the last
/// message is a user turn. Errors: an unknown role, or a system message that is not first.
Result<std::string> render_chat(std::span<const ChatMessage> messages, const ChatOptions& opts);

}  // namespace ds4
