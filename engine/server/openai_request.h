// engine/server/openai_request.h — validation of OpenAI-shaped request bodies
// (`/v1/chat/completions`, `/v1/completions`) into a GenerationRequest, and OpenAI-shaped errors.
//
// Field names and meanings: OpenAI's Chat Completions and Completions API reference; DeepSeek's
// extensions `thinking: {type: enabled|disabled}` and `reasoning_effort` (low | high | max,
// api-docs.deepseek.com thinking-mode guide); `chat_template_kwargs` ({thinking | enable_thinking:
// bool, reasoning_effort}) as vLLM/SGLang accept it; `top_k`, `min_p`, `cache_prompt`, `n_predict` (= max_tokens, -1 = what fits) as
// llama.cpp's server accepts them; its `repeat_penalty` (other than 1) and `ignore_eos: true` are refused by name. Every other field is refused by name (400): nothing is silently
// ignored. Accepted but without effect: `model` (any name), `user`, `parallel_tool_calls: true`,
// `tool_choice: "auto"`. `cache_prompt: false` bypasses the prefix cache for the request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_format.h"
#include "engine/server/engine_slot.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

/// An OpenAI error: HTTP status and the `error` object's fields.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
};

/// The `{"error": {...}}` body of `e`.
Json error_body(const ApiError& e);

/// Server-side limits applied while parsing.
struct RequestLimits {
  size_t max_messages = 1024;
  size_t max_stops = 4;
  size_t max_tools = 128;
};

/// A validated generation request.
struct GenerationRequest {
  bool chat = true;
  std::vector<ChatMessage> messages;  // chat
  ChatOptions chat_options;           // chat: mode, effort, tools
  bool tools_enabled = false;         // chat: tools rendered (tool_choice != "none")
  std::string prompt_text;            // completions (string prompt)
  std::vector<int32_t> prompt_tokens; // completions (token-id prompt)
  bool prompt_is_tokens = false;
  bool stream = false;
  bool include_usage = false;
  std::optional<int64_t> max_tokens;  // absent = what fits (chat) / 16 (completions, OpenAI's default)
  bool max_tokens_all = false;        // llama.cpp's n_predict: -1 (what fits, completions too)
  int32_t top_logprobs = -1;          // -1: no logprobs; else alternatives per token (chat 0..20, completions 0..5)
  Sampling sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool cache_prompt = true;  // false: bypass the prefix cache (llama.cpp's field)
};

/// Parses a chat-completions body. Errors name the field (`param`) and what was expected/found.
std::optional<ApiError> parse_chat_request(const Json& body, const RequestLimits& lim, GenerationRequest& out);
/// Parses a completions body.
std::optional<ApiError> parse_completion_request(const Json& body, const RequestLimits& lim, GenerationRequest& out);

/// True when `s` is well-formed UTF-8 (Unicode ch. 3, table 3-7).
bool valid_utf8(std::string_view s);

}  // namespace ds4::server
