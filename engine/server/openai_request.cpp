// engine/server/openai_request.cpp — see openai_request.h.
#include "engine/server/openai_request.h"
#include "ds4/format_number.h"

#include <set>

namespace ds4::server {
namespace {

ApiError bad(const std::string& param, const std::string& msg, std::string code = "") {
  ApiError e;
  e.status = 400;
  e.param = param;
  e.message = msg;
  e.code = std::move(code);
  return e;
}

std::string type_of(const Json& v) { return v.type_name(); }

ApiError wrong_type(const std::string& param, const char* expected, const Json& v) {
  return bad(param, "'" + param + "': expected " + expected + ", found " + type_of(v));
}

ApiError unsupported(const std::string& param, const std::string& what) {
  return bad(param, "'" + param + "' " + what + " is not supported by this server", "unsupported_parameter");
}

// Refuses fields not in `known` (by name, the first unknown one).
std::optional<ApiError> check_fields(const Json& obj, const std::set<std::string>& known, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!known.count(it.key()))
      return bad(where + it.key(), "unknown field '" + where + it.key() + "'", "unknown_parameter");
  return std::nullopt;
}

std::optional<ApiError> get_number(const Json& b, const char* key, double lo, double hi, bool lo_open, float& out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  const Json& v = b[key];
  if (!v.is_number()) return wrong_type(key, "a number", v);
  const double x = v.get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
    return bad(key, std::string("'") + key + "': expected a number in " + (lo_open ? "(" : "[") + format_number(lo) +
                        ", " + format_number(hi) + "], found " + v.dump());
  out = float(x);
  return std::nullopt;
}

std::optional<ApiError> get_int(const Json& b, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  const Json& v = b[key];
  if (!v.is_number_integer()) return wrong_type(key, "an integer", v);
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= uint64_t(hi) && (lo <= 0 || v.get<uint64_t>() >= uint64_t(lo))
                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range)
    return bad(key, std::string("'") + key + "': expected an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], found " + v.dump());
  out = v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
  return std::nullopt;
}

// Fields common to both endpoints: sampling, stop, stream, n, penalties, logprobs.
std::optional<ApiError> parse_common(const Json& b, const RequestLimits& lim, GenerationRequest& r) {
  if (b.contains("model") && !b["model"].is_null() && !b["model"].is_string())
    return wrong_type("model", "a string", b["model"]);
  if (b.contains("user") && !b["user"].is_null() && !b["user"].is_string())
    return wrong_type("user", "a string", b["user"]);
  if (b.contains("cache_prompt")) {
    if (!b["cache_prompt"].is_boolean()) return wrong_type("cache_prompt", "a boolean", b["cache_prompt"]);
    r.cache_prompt = b["cache_prompt"].get<bool>();
  }
  if (b.contains("stream") && !b["stream"].is_null()) {
    if (!b["stream"].is_boolean()) return wrong_type("stream", "a boolean", b["stream"]);
    r.stream = b["stream"].get<bool>();
  }
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    const Json& so = b["stream_options"];
    if (!so.is_object()) return wrong_type("stream_options", "an object", so);
    if (auto e = check_fields(so, {"include_usage"}, "stream_options.")) return e;
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", so["include_usage"]);
      r.include_usage = so["include_usage"].get<bool>();
    }
    if (!r.stream) return bad("stream_options", "'stream_options' is only allowed with 'stream': true");
  }
  if (auto e = get_number(b, "temperature", 0.0, 2.0, false, r.sampling.temperature)) return e;
  if (auto e = get_number(b, "top_p", 0.0, 1.0, true, r.sampling.top_p)) return e;
  if (auto e = get_number(b, "min_p", 0.0, 1.0, false, r.sampling.min_p)) return e;
  std::optional<int64_t> top_k, seed, n;
  if (auto e = get_int(b, "top_k", 0, 1 << 30, top_k)) return e;
  if (top_k) r.sampling.top_k = int32_t(*top_k);
  if (b.contains("seed") && !b["seed"].is_null()) {
    const Json& v = b["seed"];
    if (!v.is_number_integer()) return wrong_type("seed", "an integer", v);
    r.sampling.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
    r.seed_given = true;
  }
  if (auto e = get_int(b, "n", 1, 1 << 30, n)) return e;
  if (n && *n != 1) return unsupported("n", "other than 1 (found " + std::to_string(*n) + ")");
  for (const char* k : {"frequency_penalty", "presence_penalty"}) {
    if (!b.contains(k) || b[k].is_null()) continue;
    if (!b[k].is_number()) return wrong_type(k, "a number", b[k]);
    if (b[k].get<double>() != 0.0) return unsupported(k, "other than 0");
  }
  // llama.cpp's server names: `n_predict` is max_tokens (handled by the callers); `repeat_penalty`
  // (1.0 = off) and `ignore_eos` are not implemented and refused by name unless they are no-ops.
  if (b.contains("repeat_penalty") && !b["repeat_penalty"].is_null()) {
    if (!b["repeat_penalty"].is_number()) return wrong_type("repeat_penalty", "a number", b["repeat_penalty"]);
    if (b["repeat_penalty"].get<double>() != 1.0) return unsupported("repeat_penalty", "other than 1.0 (off)");
  }
  if (b.contains("ignore_eos") && !b["ignore_eos"].is_null()) {
    if (!b["ignore_eos"].is_boolean()) return wrong_type("ignore_eos", "a boolean", b["ignore_eos"]);
    if (b["ignore_eos"].get<bool>()) return unsupported("ignore_eos", "true");
  }
  if (b.contains("logit_bias") && !b["logit_bias"].is_null() &&
      !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    return unsupported("logit_bias", "");
  if (b.contains("stop") && !b["stop"].is_null()) {
    const Json& s = b["stop"];
    std::vector<std::string> stops;
    if (s.is_string()) {
      stops.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > lim.max_stops)
        return bad("stop", "'stop': expected at most " + std::to_string(lim.max_stops) + " strings, found " +
                               std::to_string(s.size()));
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_string()) return wrong_type("stop[" + std::to_string(i) + "]", "a string", s[i]);
        stops.push_back(s[i].get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or an array of strings", s);
    }
    for (const auto& x : stops)
      if (x.empty()) return bad("stop", "'stop': expected non-empty strings, found \"\"");
    r.stop = std::move(stops);
  }
  return std::nullopt;
}

// max_tokens, OpenAI's newer max_completion_tokens (chat) and llama.cpp's n_predict (-1 = what
// fits, as llama.cpp): all given ones must agree.
std::optional<ApiError> get_max_tokens(const Json& b, GenerationRequest& r, bool chat) {
  std::optional<int64_t> v;  // -1 = what fits
  std::string from;
  for (const std::string k : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (!chat && k == "max_completion_tokens") continue;
    std::optional<int64_t> x;
    if (k == "n_predict" && b.contains(k) && b[k].is_number_integer() && b[k].get<int64_t>() == -1)
      x = -1;
    else if (auto e = get_int(b, k.c_str(), 1, int64_t(1) << 40, x))
      return k == "n_predict" ? bad(k, "'n_predict': expected -1 or an integer in [1, " +
                                           std::to_string(int64_t(1) << 40) + "], found " + b[k].dump().substr(0, 60))
                              : e;
    if (!x) continue;
    if (v && *v != *x)
      return bad(k, "'" + from + "' (" + std::to_string(*v) + ") and '" + k + "' (" + std::to_string(*x) + ") disagree");
    v = x;
    from = k;
  }
  r.max_tokens_all = v && *v == -1;
  r.max_tokens = r.max_tokens_all ? std::nullopt : v;
  return std::nullopt;
}

// Chat's `logprobs` (bool) + `top_logprobs` (0..20); completions' `logprobs` (integer 0..5, the
// number of alternatives; OpenAI's legacy Completions API reference).
std::optional<ApiError> get_logprobs(const Json& b, GenerationRequest& r, bool chat) {
  std::optional<int64_t> top;
  if (chat) {
    bool on = false;
    if (b.contains("logprobs") && !b["logprobs"].is_null()) {
      if (!b["logprobs"].is_boolean()) return wrong_type("logprobs", "a boolean", b["logprobs"]);
      on = b["logprobs"].get<bool>();
    }
    if (auto e = get_int(b, "top_logprobs", 0, 20, top)) return e;
    if (top && !on) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (on) r.top_logprobs = int32_t(top.value_or(0));
  } else {
    if (auto e = get_int(b, "logprobs", 0, 5, top)) return e;
    if (top) r.top_logprobs = int32_t(*top);
  }
  return std::nullopt;
}

// Message content: a string, null, or an array of {"type": "text", "text": ...} parts.
std::optional<ApiError> get_content(const Json& m, const std::string& where, std::string& out) {
  if (!m.contains("content") || m["content"].is_null()) return std::nullopt;
  const Json& c = m["content"];
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return wrong_type(where + ".content", "a string, an array of text parts or null", c);
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string w = where + ".content[" + std::to_string(i) + "]";
    if (!c[i].is_object()) return wrong_type(w, "an object", c[i]);
    if (!c[i].contains("type") || !c[i]["type"].is_string()) return bad(w + ".type", "'" + w + ".type': expected a string");
    const std::string t = c[i]["type"].get<std::string>();
    if (t != "text") return unsupported(w + ".type", "\"" + t + "\" (only text parts)");
    if (auto e = check_fields(c[i], {"type", "text"}, w + ".")) return e;
    if (!c[i].contains("text") || !c[i]["text"].is_string()) return bad(w + ".text", "'" + w + ".text': expected a string");
    out += c[i]["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Json error_body(const ApiError& e) {
  Json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return Json{{"error", err}};
}

std::optional<ApiError> parse_chat_request(const Json& b, const RequestLimits& lim, GenerationRequest& r) {
  r = GenerationRequest{};
  r.chat = true;
  if (!b.is_object()) return bad("", "expected a JSON object as the request body, found " + type_of(b));
  if (auto e = check_fields(b, {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "tools", "tool_choice",
                                "parallel_tool_calls", "thinking", "reasoning_effort", "chat_template_kwargs",
                                "response_format", "frequency_penalty", "presence_penalty", "logprobs", "top_logprobs",
                                "logit_bias", "user", "cache_prompt", "n_predict", "repeat_penalty", "ignore_eos"},
                            ""))
    return e;
  if (auto e = parse_common(b, lim, r)) return e;
  if (auto e = get_max_tokens(b, r, true)) return e;
  if (auto e = get_logprobs(b, r, true)) return e;
  if (b.contains("response_format") && !b["response_format"].is_null()) {
    const Json& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      return bad("response_format", "'response_format': expected an object with a string 'type'");
    if (rf["type"].get<std::string>() != "text")
      return unsupported("response_format", "of type \"" + rf["type"].get<std::string>() + "\" (only \"text\")");
  }
  if (b.contains("parallel_tool_calls") && !b["parallel_tool_calls"].is_null()) {
    if (!b["parallel_tool_calls"].is_boolean()) return wrong_type("parallel_tool_calls", "a boolean", b["parallel_tool_calls"]);
    if (!b["parallel_tool_calls"].get<bool>()) return unsupported("parallel_tool_calls", "false");
  }

  // Thinking mode: DeepSeek's default is on; `thinking`, then chat_template_kwargs, decide.
  bool thinking = true;
  std::string effort;
  if (b.contains("thinking") && !b["thinking"].is_null()) {
    const Json& t = b["thinking"];
    if (!t.is_object()) return wrong_type("thinking", "an object", t);
    if (auto e = check_fields(t, {"type"}, "thinking.")) return e;
    if (!t.contains("type") || !t["type"].is_string()) return bad("thinking.type", "'thinking.type': expected \"enabled\" or \"disabled\"");
    const std::string ty = t["type"].get<std::string>();
    if (ty != "enabled" && ty != "disabled")
      return bad("thinking.type", "'thinking.type': expected \"enabled\" or \"disabled\", found \"" + ty + "\"");
    thinking = ty == "enabled";
  }
  if (b.contains("chat_template_kwargs") && !b["chat_template_kwargs"].is_null()) {
    const Json& k = b["chat_template_kwargs"];
    if (!k.is_object()) return wrong_type("chat_template_kwargs", "an object", k);
    if (auto e = check_fields(k, {"thinking", "enable_thinking", "reasoning_effort"}, "chat_template_kwargs.")) return e;
    for (const char* key : {"thinking", "enable_thinking"})
      if (k.contains(key)) {
        if (!k[key].is_boolean()) return wrong_type(std::string("chat_template_kwargs.") + key, "a boolean", k[key]);
        thinking = k[key].get<bool>();
      }
    if (k.contains("reasoning_effort")) {
      if (!k["reasoning_effort"].is_string())
        return wrong_type("chat_template_kwargs.reasoning_effort", "a string", k["reasoning_effort"]);
      effort = k["reasoning_effort"].get<std::string>();
    }
  }
  if (b.contains("reasoning_effort") && !b["reasoning_effort"].is_null()) {
    if (!b["reasoning_effort"].is_string()) return wrong_type("reasoning_effort", "a string", b["reasoning_effort"]);
    effort = b["reasoning_effort"].get<std::string>();
  }
  ChatOptions& co = r.chat_options;
  co.mode = thinking ? ThinkingMode::Thinking : ThinkingMode::Chat;
  if (!effort.empty()) {
    if (effort == "low") co.effort = ReasoningEffort::Low;
    else if (effort == "high") co.effort = ReasoningEffort::High;
    else if (effort == "max") co.effort = ReasoningEffort::Max;
    else return bad("reasoning_effort", "'reasoning_effort': expected \"low\", \"high\" or \"max\", found \"" + effort + "\"");
  }

  // Tools.
  bool tool_choice_none = false;
  if (b.contains("tool_choice") && !b["tool_choice"].is_null()) {
    const Json& tc = b["tool_choice"];
    if (!tc.is_string()) return unsupported("tool_choice", "naming a function (only \"auto\" and \"none\")");
    const std::string s = tc.get<std::string>();
    if (s == "none") tool_choice_none = true;
    else if (s != "auto") return unsupported("tool_choice", "\"" + s + "\" (only \"auto\" and \"none\")");
  }
  if (b.contains("tools") && !b["tools"].is_null()) {
    const Json& ts = b["tools"];
    if (!ts.is_array()) return wrong_type("tools", "an array", ts);
    if (ts.size() > lim.max_tools)
      return bad("tools", "'tools': expected at most " + std::to_string(lim.max_tools) + " tools, found " + std::to_string(ts.size()));
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string w = "tools[" + std::to_string(i) + "]";
      if (!ts[i].is_object()) return wrong_type(w, "an object", ts[i]);
      if (auto e = check_fields(ts[i], {"type", "function"}, w + ".")) return e;
      if (!ts[i].contains("type") || ts[i]["type"] != "function") return bad(w + ".type", "'" + w + ".type': expected \"function\"");
      if (!ts[i].contains("function") || !ts[i]["function"].is_object()) return bad(w + ".function", "'" + w + ".function': expected an object");
      const Json& f = ts[i]["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        return bad(w + ".function.name", "'" + w + ".function.name': expected a non-empty string");
      if (!tool_choice_none) co.tools.push_back(f.dump());
    }
    r.tools_enabled = !co.tools.empty();
  }

  // Messages.
  if (!b.contains("messages")) return bad("messages", "'messages' is required");
  const Json& ms = b["messages"];
  if (!ms.is_array()) return wrong_type("messages", "an array", ms);
  if (ms.empty()) return bad("messages", "'messages': expected at least one message, found none");
  if (ms.size() > lim.max_messages)
    return bad("messages", "'messages': expected at most " + std::to_string(lim.max_messages) + " messages, found " +
                               std::to_string(ms.size()));
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string w = "messages[" + std::to_string(i) + "]";
    const Json& m = ms[i];
    if (!m.is_object()) return wrong_type(w, "an object", m);
    if (!m.contains("role") || !m["role"].is_string()) return bad(w + ".role", "'" + w + ".role': expected a string");
    ChatMessage cm;
    cm.role = m["role"].get<std::string>();
    if (cm.role == "system" || cm.role == "developer" || cm.role == "user") {
      if (auto e = check_fields(m, {"role", "content", "name"}, w + ".")) return e;
    } else if (cm.role == "assistant") {
      if (auto e = check_fields(m, {"role", "content", "name", "tool_calls", "reasoning_content"}, w + ".")) return e;
    } else if (cm.role == "tool") {
      if (auto e = check_fields(m, {"role", "content", "tool_call_id"}, w + ".")) return e;
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        return bad(w + ".tool_call_id", "'" + w + ".tool_call_id': expected a string");
      cm.tool_call_id = m["tool_call_id"].get<std::string>();
    } else {
      return bad(w + ".role", "'" + w + ".role': expected system, developer, user, assistant or tool, found \"" + cm.role + "\"");
    }
    if (m.contains("name") && !m["name"].is_string()) return wrong_type(w + ".name", "a string", m["name"]);
    if (auto e = get_content(m, w, cm.content)) return e;
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      if (!m["reasoning_content"].is_string()) return wrong_type(w + ".reasoning_content", "a string", m["reasoning_content"]);
      cm.reasoning = m["reasoning_content"].get<std::string>();
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      const Json& tcs = m["tool_calls"];
      if (!tcs.is_array()) return wrong_type(w + ".tool_calls", "an array", tcs);
      for (size_t k = 0; k < tcs.size(); ++k) {
        const std::string wk = w + ".tool_calls[" + std::to_string(k) + "]";
        const Json& tc = tcs[k];
        if (!tc.is_object()) return wrong_type(wk, "an object", tc);
        if (auto e = check_fields(tc, {"id", "type", "function", "index"}, wk + ".")) return e;
        if (!tc.contains("function") || !tc["function"].is_object()) return bad(wk + ".function", "'" + wk + ".function': expected an object");
        const Json& f = tc["function"];
        if (!f.contains("name") || !f["name"].is_string()) return bad(wk + ".function.name", "'" + wk + ".function.name': expected a string");
        ChatToolCall call;
        call.name = f["name"].get<std::string>();
        if (f.contains("arguments")) {
          if (!f["arguments"].is_string()) return wrong_type(wk + ".function.arguments", "a string", f["arguments"]);
          call.arguments = f["arguments"].get<std::string>();
        } else {
          call.arguments = "{}";
        }
        if (tc.contains("id")) {
          if (!tc["id"].is_string()) return wrong_type(wk + ".id", "a string", tc["id"]);
          call.id = tc["id"].get<std::string>();
        }
        cm.tool_calls.push_back(std::move(call));
      }
    }
    r.messages.push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const Json& b, const RequestLimits& lim, GenerationRequest& r) {
  r = GenerationRequest{};
  r.chat = false;
  if (!b.is_object()) return bad("", "expected a JSON object as the request body, found " + type_of(b));
  if (auto e = check_fields(b, {"model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p",
                                "top_k", "min_p", "seed", "stop", "n", "echo", "suffix", "best_of", "logprobs",
                                "frequency_penalty", "presence_penalty", "logit_bias", "user", "cache_prompt",
                                "n_predict", "repeat_penalty", "ignore_eos"},
                            ""))
    return e;
  if (auto e = parse_common(b, lim, r)) return e;
  if (auto e = get_max_tokens(b, r, false)) return e;
  if (!r.max_tokens && !r.max_tokens_all) r.max_tokens = 16;
  if (auto e = get_logprobs(b, r, false)) return e;
  if (b.contains("echo") && !b["echo"].is_null() && b["echo"] != false) return unsupported("echo", "true");
  if (b.contains("suffix") && !b["suffix"].is_null()) return unsupported("suffix", "");
  if (b.contains("best_of") && !b["best_of"].is_null() && b["best_of"] != 1) return unsupported("best_of", "other than 1");
  if (!b.contains("prompt")) return bad("prompt", "'prompt' is required");
  const Json& p = b["prompt"];
  const Json* one = &p;
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) one = &p[0];
  if (one->is_string()) {
    r.prompt_text = one->get<std::string>();
  } else if (one->is_array() && !one->empty() && (*one)[0].is_number_integer()) {
    r.prompt_is_tokens = true;
    for (size_t i = 0; i < one->size(); ++i) {
      const Json& t = (*one)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        return bad("prompt", "'prompt[" + std::to_string(i) + "]': expected a token id, found " + t.dump().substr(0, 60));
      r.prompt_tokens.push_back(int32_t(t.get<int64_t>()));
    }
  } else if (p.is_array() && p.size() > 1) {
    return unsupported("prompt", "with several prompts (batch)");
  } else {
    return wrong_type("prompt", "a string or an array of token ids", p);
  }
  return std::nullopt;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned c = u[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) n = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 2;
    else if (c == 0xED) n = 2, hi = 0x9F;
    else if (c == 0xF0) n = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else if (c == 0xF4) n = 3, hi = 0x8F;
    else return false;
    if (i + size_t(n) >= s.size()) return false;  // truncated sequence
    if (u[i + 1] < lo || u[i + 1] > hi) return false;
    for (int k = 2; k <= n; ++k)
      if (u[i + k] < 0x80 || u[i + k] > 0xBF) return false;
    i += size_t(n) + 1;
  }
  return true;
}

}  // namespace ds4::server
