// engine/chat_output_parser.cpp — see chat_output_parser.h for the grammar and its source.
#include "engine/chat_output_parser.h"
#include "ds4/json_depth.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "engine/chat_format.h"

namespace ds4 {
namespace {

using namespace chat_tokens;
constexpr std::string_view kBlockStartNl = "\n\n<｜DSML｜tool_calls>";

// Earliest occurrence of any of `markers` in `s` (ties: the longer marker, listed first).
struct Hit {
  size_t pos = std::string::npos;
  size_t len = 0;
  size_t which = 0;
};
template <size_t N>
Hit find_first(std::string_view s, const std::array<std::string_view, N>& markers) {
  Hit h;
  for (size_t i = 0; i < N; ++i) {
    size_t p = s.find(markers[i]);
    if (p != std::string::npos && (p < h.pos)) h = {p, markers[i].size(), i};
  }
  return h;
}

// Length of the longest proper suffix of `s` that is a prefix of one of `markers`.
template <size_t N>
size_t held_suffix(std::string_view s, const std::array<std::string_view, N>& markers) {
  size_t best = 0;
  for (auto m : markers)
    for (size_t k = std::min(s.size(), m.size() - 1); k > best; --k)
      if (s.substr(s.size() - k) == m.substr(0, k)) {
        best = k;
        break;
      }
  return best;
}

void emit(std::vector<ChatOutputEvent>& ev, ChatOutputEvent::Kind k, std::string_view text) {
  if (text.empty()) return;
  if (!ev.empty() && ev.back().kind == k) {
    ev.back().text += text;
    return;
  }
  ChatOutputEvent e;
  e.kind = k;
  e.text = std::string(text);
  ev.push_back(std::move(e));
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Reads ` name="X"` style attribute `key` at the start of `s` (after optional spaces); advances.
bool read_attr(std::string_view& s, std::string_view key, std::string& value) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const std::string head = std::string(key) + "=\"";
  if (!s.starts_with(head)) return false;
  s.remove_prefix(head.size());
  size_t q = s.find('"');
  if (q == std::string::npos) return false;
  value = std::string(s.substr(0, q));
  s.remove_prefix(q + 1);
  return true;
}

}  // namespace

bool parse_dsml_invoke(std::string_view s, ParsedToolCall& out) {
  if (!s.starts_with(kInvokeOpen) || !s.ends_with(kInvokeClose)) return false;
  s.remove_prefix(kInvokeOpen.size());
  s.remove_suffix(kInvokeClose.size());
  std::string name;
  if (!read_attr(s, "name", name) || name.empty() || !s.starts_with(">")) return false;
  s.remove_prefix(1);
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  for (;;) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    if (s.empty()) break;
    if (!s.starts_with(kParameterOpen)) return false;
    s.remove_prefix(kParameterOpen.size());
    std::string key, str = "true";
    if (!read_attr(s, "name", key) || key.empty()) return false;
    std::string_view save = s;
    if (!read_attr(s, "string", str)) s = save, str = "true";
    if (str != "true" && str != "false") return false;
    if (!s.starts_with(">")) return false;
    s.remove_prefix(1);
    size_t end = s.find(kParameterClose);
    if (end == std::string::npos) return false;
    std::string value(s.substr(0, end));
    s.remove_prefix(end + kParameterClose.size());
    if (args.contains(key)) return false;  // duplicate parameter (the reference refuses it too)
    if (str == "true") {
      args[key] = value;
    } else {
      // Not JSON although string="false" (or nested deeper than a request may hold, less the level
      // of the arguments object a client sends back next turn): kept as text.
      bool parsed = false;
      if (json_depth(value, kMaxJsonRequestDepth - 1) <= kMaxJsonRequestDepth - 1) {
        try {
          args[key] = nlohmann::ordered_json::parse(value);
          parsed = true;
        } catch (const std::exception&) {
        }
      }
      if (!parsed) args[key] = value;
    }
  }
  out.name = std::move(name);
  out.arguments = args.dump();
  return true;
}

ChatOutputParser::ChatOutputParser(bool in_reasoning) : state_(in_reasoning ? State::Reasoning : State::Content) {}

std::vector<ChatOutputEvent> ChatOutputParser::push(std::string_view text) {
  buf_ += text;
  return run(false);
}

std::vector<ChatOutputEvent> ChatOutputParser::finish() { return run(true); }

std::vector<ChatOutputEvent> ChatOutputParser::run(bool final) {
  using K = ChatOutputEvent::Kind;
  std::vector<ChatOutputEvent> ev;
  size_t i = 0;  // consumed bytes of buf_
  for (;;) {
    std::string_view rest = std::string_view(buf_).substr(i);
    if (state_ == State::Reasoning || state_ == State::Content) {
      const K kind = state_ == State::Reasoning ? K::Reasoning : K::Content;
      static constexpr std::array<std::string_view, 3> kReasoningMarkers = {kThinkEnd, kBlockStartNl, kToolCallsOpen};
      static constexpr std::array<std::string_view, 2> kContentMarkers = {kBlockStartNl, kToolCallsOpen};
      Hit h = state_ == State::Reasoning ? find_first(rest, kReasoningMarkers) : find_first(rest, kContentMarkers);
      if (h.pos != std::string::npos) {
        emit(ev, kind, rest.substr(0, h.pos));
        const bool think_end = state_ == State::Reasoning && h.which == 0;
        state_ = think_end ? State::Content : State::Tools;
        i += h.pos + h.len;
        continue;
      }
      size_t hold = final ? 0
                          : (state_ == State::Reasoning ? held_suffix(rest, kReasoningMarkers)
                                                        : held_suffix(rest, kContentMarkers));
      emit(ev, kind, rest.substr(0, rest.size() - hold));
      i += rest.size() - hold;
      break;
    }
    // Tools: invokes, whitespace, the closing marker.
    size_t ws = 0;
    while (ws < rest.size() && is_ws(rest[ws])) ++ws;
    std::string_view r = rest.substr(ws);
    if (r.starts_with(kToolCallsClose)) {
      i += ws + kToolCallsClose.size();
      state_ = State::Content;
      continue;
    }
    if (r.starts_with(kInvokeOpen)) {
      size_t end = r.find(kInvokeClose);
      if (end == std::string::npos) {
        if (!final) break;  // wait for the rest of the invoke
        emit(ev, K::Content, r);
        i = buf_.size();
        break;
      }
      std::string_view inv = r.substr(0, end + kInvokeClose.size());
      ParsedToolCall call;
      if (parse_dsml_invoke(inv, call)) {
        ChatOutputEvent e;
        e.kind = K::ToolCall;
        e.call = std::move(call);
        ev.push_back(std::move(e));
      } else {
        emit(ev, K::Content, inv);  // malformed: kept verbatim
      }
      i += ws + inv.size();
      continue;
    }
    if (r.empty()) {
      i += ws;
      break;
    }
    // A possible start of a marker: wait for more text unless this is the end.
    const bool maybe = kToolCallsClose.starts_with(r) || kInvokeOpen.starts_with(r);
    if (maybe && !final) {
      i += ws;
      break;
    }
    // Anything else inside a block: text up to the next '<' is content (never dropped).
    size_t lt = r.find('<', 1);
    if (lt == std::string::npos) lt = r.size();
    emit(ev, K::Content, r.substr(0, lt));
    i += ws + lt;
  }
  buf_.erase(0, i);
  if (final && !buf_.empty()) {
    emit(ev, state_ == State::Reasoning ? K::Reasoning : K::Content, buf_);
    buf_.clear();
  }
  return ev;
}

}  // namespace ds4
