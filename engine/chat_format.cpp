// engine/chat_format.cpp — see chat_format.h for the format and its source.
#include "engine/chat_format.h"
#include "ds4/json_depth.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

namespace ds4 {
namespace {

using OJson = nlohmann::ordered_json;

// The two fixed prompt texts of the release's encoder (encoding_dsv4.py: REASONING_EFFORT_MAX and
// TOOLS_TEMPLATE). They are model-interface data, like the special tokens: the model was trained on
// exactly these bytes, so they are reproduced verbatim rather than paraphrased.
constexpr std::string_view kEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

std::string tools_block(const std::vector<std::string>& schema_lines) {
  std::string lines;
  for (size_t i = 0; i < schema_lines.size(); ++i) lines += (i ? "\n" : "") + schema_lines[i];
  std::string s =
      "## Tools\n\n"
      "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
      "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
      "<｜DSML｜tool_calls>\n"
      "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
      "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
      "...\n"
      "</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
      "...\n"
      "</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
      "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
      "<think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n";
  s += lines;
  s += "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
  return s;
}

void dump_python(const OJson& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += OJson(it.key()).dump();
      out += ": ";
      dump_python(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      dump_python(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump();  // strings: only '"', '\\' and control characters escaped, as ensure_ascii=False
  }
}

std::string python_dumps(const OJson& v) {
  std::string s;
  dump_python(v, s);
  return s;
}

// One user turn after merging: its parts, in order (already rendered text).
struct Turn {
  std::string role;  // system, user, assistant, developer
  std::vector<std::string> parts;          // user: text parts and <tool_result> parts
  std::vector<std::string> result_ids;     // per part: the tool_call_id of a tool result, else ""
  std::vector<bool> is_result;             // per part: a tool result
  const ChatMessage* msg = nullptr;        // the source message (system, assistant, developer)
  bool keep_reasoning = true;
};

Result<std::string> render_invoke(const ChatToolCall& c, size_t msg_index) {
  using namespace chat_tokens;
  if (auto e = json_depth_error(c.arguments, kMaxJsonRequestDepth,
                                "chat message " + std::to_string(msg_index) + ": tool call '" + c.name + "': arguments");
      !e.empty())
    return Error{e};
  OJson args;
  try {
    args = OJson::parse(c.arguments);
  } catch (const std::exception&) {
    args = OJson::object({{"arguments", c.arguments}});  // as the reference does for unparsable text
  }
  if (!args.is_object())
    return Error{"chat message " + std::to_string(msg_index) + ": tool call '" + c.name +
                 "': expected arguments to be a JSON object, found " + std::string(args.type_name())};
  std::string params;
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) params += "\n";
    first = false;
    const bool is_str = it.value().is_string();
    params += std::string(kParameterOpen) + " name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") +
              "\">" + (is_str ? it.value().get<std::string>() : python_dumps(it.value())) +
              std::string(kParameterClose);
  }
  return std::string(kInvokeOpen) + " name=\"" + c.name + "\">\n" + params + "\n" + std::string(kInvokeClose);
}

}  // namespace

Result<std::string> python_json_dumps(std::string_view json) {
  if (auto e = json_depth_error(json, kMaxJsonRequestDepth, "JSON text"); !e.empty()) return Error{e};
  try {
    return python_dumps(OJson::parse(json));
  } catch (const std::exception& e) {
    return Error{std::string("expected valid JSON: ") + e.what()};
  }
}

Result<std::string> render_chat(std::span<const ChatMessage> messages, const ChatOptions& opts) {
  using namespace chat_tokens;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      return Error{"chat message " + std::to_string(i) +
                   ": expected role system, user, assistant, tool or developer, found \"" + r + "\""};
    if (r == "system" && i != 0)
      return Error{"chat message " + std::to_string(i) + ": a system message must be the first message"};
  }
  std::vector<std::string> schemas;
  for (size_t i = 0; i < opts.tools.size(); ++i) {
    if (auto e = json_depth_error(opts.tools[i], kMaxJsonRequestDepth, "tool " + std::to_string(i)); !e.empty())
      return Error{e};
    OJson t;
    try {
      t = OJson::parse(opts.tools[i]);
    } catch (const std::exception&) {
      return Error{"tool " + std::to_string(i) + ": expected a JSON object, found invalid JSON"};
    }
    if (!t.is_object()) return Error{"tool " + std::to_string(i) + ": expected a JSON object, found " + t.type_name()};
    schemas.push_back(python_dumps(t));
  }
  const bool tools = !schemas.empty();

  // 1. Merge: user and tool messages in a row form one user turn.
  static const ChatMessage kEmptySystem{"system", "", ""};
  std::vector<Turn> turns;
  if (tools && (messages.empty() || messages[0].role != "system"))
    turns.push_back(Turn{"system", {}, {}, {}, &kEmptySystem});
  for (const auto& m : messages) {
    if (m.role == "user" || m.role == "tool") {
      if (turns.empty() || turns.back().role != "user") turns.push_back(Turn{"user", {}, {}, {}, nullptr});
      if (m.role == "tool") {
        turns.back().parts.push_back("<tool_result>" + m.content + "</tool_result>");
        turns.back().result_ids.push_back(m.tool_call_id);
        turns.back().is_result.push_back(true);
      } else {
        turns.back().parts.push_back(m.content);
        turns.back().result_ids.push_back("");
        turns.back().is_result.push_back(false);
      }
    } else {
      turns.push_back(Turn{m.role, {}, {}, {}, &m});
    }
  }
  // 2. Tool results in the order of the preceding assistant turn's calls (stable; unknown ids first).
  std::map<std::string, size_t> call_order;
  for (auto& t : turns) {
    if (t.role == "assistant" && !t.msg->tool_calls.empty()) {
      call_order.clear();
      for (size_t k = 0; k < t.msg->tool_calls.size(); ++k)
        if (!t.msg->tool_calls[k].id.empty()) call_order.emplace(t.msg->tool_calls[k].id, k);
    } else if (t.role == "user" && !call_order.empty()) {
      std::vector<size_t> slots, order;
      for (size_t k = 0; k < t.parts.size(); ++k)
        if (t.is_result[k]) slots.push_back(k);
      order = slots;
      auto key = [&](size_t k) {
        auto it = call_order.find(t.result_ids[k]);
        return it == call_order.end() ? size_t(0) : it->second;
      };
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
      std::vector<std::string> parts = t.parts;
      for (size_t k = 0; k < slots.size(); ++k) parts[slots[k]] = t.parts[order[k]];
      t.parts = std::move(parts);
    }
  }
  // 3. Dropping reasoning (thinking mode, no tools): earlier assistants lose it, earlier developer
  // turns are removed.
  const bool thinking = opts.mode == ThinkingMode::Thinking;
  const bool drop = opts.drop_thinking && !tools;
  auto last_user_of = [](const std::vector<Turn>& ts) {
    int last = -1;
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].role == "user" || ts[i].role == "developer") last = int(i);
    return last;
  };
  if (thinking && drop) {
    const int lu = last_user_of(turns);
    std::vector<Turn> kept;
    for (size_t i = 0; i < turns.size(); ++i) {
      if (turns[i].role == "developer" && int(i) < lu) continue;
      kept.push_back(turns[i]);
      if (turns[i].role == "assistant" && int(i) < lu) kept.back().keep_reasoning = false;
    }
    turns = std::move(kept);
  }
  const int last_user = last_user_of(turns);

  // 4. Render.
  std::string out;
  if (opts.add_bos) out += kBos;
  if (thinking && opts.effort == ReasoningEffort::Max && !turns.empty()) out += kEffortMax;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& t = turns[i];
    if (t.role == "system") {
      out += t.msg->content;
      if (tools) out += "\n\n" + tools_block(schemas);
    } else if (t.role == "developer") {
      out += kUser;
      out += t.msg->content;
    } else if (t.role == "user") {
      out += kUser;
      for (size_t k = 0; k < t.parts.size(); ++k) out += (k ? "\n\n" : "") + t.parts[k];
    } else {  // assistant
      const ChatMessage& m = *t.msg;
      if (thinking && (!drop || int(i) > last_user)) {
        out += t.keep_reasoning ? m.reasoning : "";
        out += kThinkEnd;
      }
      out += m.content;
      if (!m.tool_calls.empty()) {
        out += "\n\n";
        out += kToolCallsOpen;
        out += "\n";
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          auto inv = render_invoke(m.tool_calls[k], i);
          if (!inv) return inv.error();
          out += (k ? "\n" : "") + inv.value();
        }
        out += "\n";
        out += kToolCallsClose;
      }
      out += kEos;
    }
    // A user turn followed by an assistant turn, or ending the conversation (generation prompt),
    // gets the assistant prefix.
    const bool next_is_assistant = i + 1 < turns.size() && turns[i + 1].role == "assistant";
    const bool last = i + 1 == turns.size();
    if ((t.role == "user" || t.role == "developer") && (next_is_assistant || last)) {
      out += kAssistant;
      const bool open_thinking = thinking && (!drop || int(i) >= last_user);
      out += open_thinking ? kThinkStart : kThinkEnd;
    }
  }
  return out;
}

}  // namespace ds4
