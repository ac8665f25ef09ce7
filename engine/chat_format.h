// engine/chat_format.h — DeepSeek-V4 chat prompt rendering (text level; the tokenizer then maps the
// special-token texts to their ids).
//
// Source of the format (facts only): DeepSeek's `encoding/encoding_dsv4.py` shipped with
// deepseek-ai/DeepSeek-V4-Flash (`encode_messages`, `render_message`, `merge_tool_messages`,
// `sort_tool_results_by_call_order`, `encode_arguments_to_dsml`, `render_tools`), read in the public
// copies supermy/ds4rs and sfxnz/DeepSeek-V4-Flash-Vision-Exp-vLLM-2x-DGX-Spark
// (encoding/encoding_dsv4.py; ../shared/reference/serving.md §2 names the Mockingjay1316 mirror);
// consistent with the DeepSeek-V3.2 example output quoted in cywinski/non-assistant-sampling
// src/mask/test_deepseek_tokenizer.py. The facts used:
//  - the prompt starts with BOS "<｜begin▁of▁sentence｜>"; a system message's text follows directly;
//  - a user turn is "<｜User｜>" + content; the turn that precedes the model's reply is followed by
//    "<｜Assistant｜>" and then "<think>" (thinking mode) or "</think>" (chat mode);
//  - an assistant turn is content + "<｜end▁of▁sentence｜>"; in thinking mode an assistant turn after
//    the last user turn is written as reasoning + "</think>" + content + EOS, while earlier ones drop
//    their reasoning (their user turns then end in "</think>", like chat mode);
//  - consecutive user turns (and tool results) are one user turn whose parts are joined by "\n\n";
//    a tool message is the part "<tool_result>" + content + "</tool_result>"; the results of one
//    assistant turn's calls are put in the order of its `tool_calls` (matched by id);
//  - tools: the system text is followed by "\n\n" + a "## Tools" block (the DSML calling
//    convention and one JSON line per function schema); when any tools are given, no reasoning is
//    dropped (every user turn then opens "<think>" in thinking mode);
//  - an assistant turn's calls follow its content as "\n\n<｜DSML｜tool_calls>\n" + invokes joined
//    by "\n" + "\n</｜DSML｜tool_calls>"; an invoke is `<｜DSML｜invoke name="N">\n` + parameters
//    joined by "\n" + "\n</｜DSML｜invoke>"; a parameter is `<｜DSML｜parameter name="K"
//    string="true">V</｜DSML｜parameter>` for a string V, else string="false" and V as JSON;
//  - JSON in the prompt is Python's json.dumps(ensure_ascii=False): ", " and ": " separators, keys in
//    the given order, non-ASCII text unescaped;
//  - reasoning effort: "low" (the default) and "high" add no text; "max" prepends a fixed paragraph
//    to the first message in thinking mode.
// Our choices where the reference has no case: tools with no leading system message render after
// an empty system text; a system message after the first message is refused.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

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
/// DSML markup of tool calls (the bars are U+FF5C).
inline constexpr std::string_view kToolCallsOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kParameterOpen = "<｜DSML｜parameter";
inline constexpr std::string_view kParameterClose = "</｜DSML｜parameter>";
}  // namespace chat_tokens

/// One tool call of an assistant message (OpenAI `tool_calls[i]`): `arguments` is JSON text of an
/// object (OpenAI's `function.arguments`).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

/// One message. role: "system", "user", "assistant", "tool" or "developer" (rendered as a user turn,
/// as DeepSeek's encoder does). `reasoning` is an assistant's thinking text; `tool_call_id` names
/// the call a tool message answers.
struct ChatMessage {
  std::string role;
  std::string content;
  std::string reasoning;
  std::vector<ChatToolCall> tool_calls = {};
  std::string tool_call_id = {};
};

/// Chat (non-thinking) or thinking mode.
enum class ThinkingMode { Chat, Thinking };

/// DeepSeek's reasoning-effort levels.
enum class ReasoningEffort { Low, High, Max };

/// Rendering options.
struct ChatOptions {
  ThinkingMode mode = ThinkingMode::Chat;
  bool add_bos = true;        // prefix "<｜begin▁of▁sentence｜>"
  bool drop_thinking = true;  // drop reasoning of assistant turns before the last user turn
  ReasoningEffort effort = ReasoningEffort::Low;
  /// Function schemas (OpenAI `tools[i].function`), each the JSON text of an object; empty = no
  /// tools block.
  std::vector<std::string> tools = {};
};

/// Renders `messages` as DeepSeek-V4 prompt text, ending with the assistant prefix when the last
/// message is a user (or tool) turn. Errors: an unknown role, a system message that is not first,
/// a tool schema that is not a JSON object, tool-call arguments that are JSON but not an object.
Result<std::string> render_chat(std::span<const ChatMessage> messages, const ChatOptions& opts);

/// JSON text `json` (any valid JSON) re-serialized as Python's json.dumps(value, ensure_ascii=False)
/// writes it (key order kept). Error if `json` is not valid JSON.
Result<std::string> python_json_dumps(std::string_view json);

}  // namespace ds4
