// tests/frontend/chat_tools_test.cpp — DeepSeek-V4 tool rendering, reasoning effort, and the
// incremental output parser. Expected strings are written by hand from the format facts listed in
// engine/chat_format.h and engine/chat_output_parser.h (DeepSeek's encoding_dsv4.py), not
// produced by the code under test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/chat_format.h"
#include "engine/chat_output_parser.h"

namespace ds4 {
namespace {

const std::string B = "<｜begin▁of▁sentence｜>", E = "<｜end▁of▁sentence｜>", U = "<｜User｜>",
                  A = "<｜Assistant｜>", D = "｜DSML｜";

std::string render_ok(const std::vector<ChatMessage>& m, const ChatOptions& o) {
  auto r = render_chat(m, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : "";
}

TEST(ChatTools, PythonJsonDumps) {
  EXPECT_EQ(python_json_dumps(R"({"b":1,"a":[true,null,"x\u00e9\n"]})").value(),
            "{\"b\": 1, \"a\": [true, null, \"x\xc3\xa9\\n\"]}");
  EXPECT_FALSE(python_json_dumps("{nope").ok());
}

TEST(ChatTools, ToolsBlockFollowsSystemText) {
  ChatOptions o;
  o.tools = {R"({"name":"get_weather","parameters":{"type":"object"}})"};
  std::vector<ChatMessage> m = {{"system", "Be brief.", ""}, {"user", "Weather?", ""}};
  const std::string p = render_ok(m, o);
  const std::string head = B + "Be brief.\n\n## Tools\n\n";
  ASSERT_EQ(p.substr(0, head.size()), head);
  // The schema is one Python-style JSON line in the "Available Tool Schemas" section, and the
  // block ends with the sentence that closes the section and a newline, then the user turn.
  EXPECT_NE(p.find("### Available Tool Schemas\n\n{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}\n\n"),
            std::string::npos);
  const std::string tail = "to invoke tool calls.\n" + U + "Weather?" + A + "</think>";
  ASSERT_GE(p.size(), tail.size());
  EXPECT_EQ(p.substr(p.size() - tail.size()), tail);
  EXPECT_NE(p.find("<" + D + "tool_calls>\n<" + D + "invoke name=\"$TOOL_NAME\">"), std::string::npos);
}

TEST(ChatTools, ToolsWithoutSystemGetAnEmptySystemText) {
  ChatOptions o;
  o.tools = {R"({"name":"f"})"};
  std::vector<ChatMessage> m = {{"user", "q", ""}};
  EXPECT_EQ(render_ok(m, o).substr(0, B.size() + 10), B + "\n\n## Tools");
}

TEST(ChatTools, ToolCallRoundTripRendering) {
  // user -> assistant with two calls -> two tool results (given in the reverse order) -> reply.
  ChatMessage asst{"assistant", "Let me check.", "need data"};
  asst.tool_calls = {{"c1", "get_weather", R"({"city":"Paris","days":3})"}, {"c2", "get_time", "{}"}};
  ChatMessage t2{"tool", "12:00", ""};
  t2.tool_call_id = "c2";
  ChatMessage t1{"tool", "sunny", ""};
  t1.tool_call_id = "c1";
  std::vector<ChatMessage> m = {{"user", "Paris?", ""}, asst, t2, t1};
  ChatOptions o;
  o.mode = ThinkingMode::Thinking;
  o.add_bos = false;
  o.tools = {R"({"name":"get_weather"})"};
  const std::string p = render_ok(m, o);
  const std::string sys_end = "to invoke tool calls.\n";
  const size_t at = p.find(sys_end);
  ASSERT_NE(at, std::string::npos);
  // With tools nothing is dropped: every user turn opens <think>, the assistant keeps its reasoning.
  const std::string expect =
      U + "Paris?" + A + "<think>" + "need data</think>Let me check.\n\n<" + D + "tool_calls>\n<" + D +
      "invoke name=\"get_weather\">\n<" + D + "parameter name=\"city\" string=\"true\">Paris</" + D +
      "parameter>\n<" + D + "parameter name=\"days\" string=\"false\">3</" + D + "parameter>\n</" + D +
      "invoke>\n<" + D + "invoke name=\"get_time\">\n\n</" + D + "invoke>\n</" + D + "tool_calls>" + E + U +
      "<tool_result>sunny</tool_result>\n\n<tool_result>12:00</tool_result>" + A + "<think>";
  EXPECT_EQ(p.substr(at + sys_end.size()), expect);
}

TEST(ChatTools, ReasoningEffortMaxPrefix) {
  std::vector<ChatMessage> m = {{"user", "q", ""}};
  ChatOptions o;
  o.mode = ThinkingMode::Thinking;
  o.effort = ReasoningEffort::Max;
  const std::string p = render_ok(m, o);
  EXPECT_EQ(p.substr(0, B.size() + 18), B + "Reasoning Effort: ");
  EXPECT_EQ(p.substr(p.size() - (U.size() + 1 + A.size() + 7)), U + "q" + A + "<think>");
  EXPECT_NE(p.find("left unchecked.\n\n" + U), std::string::npos);
  o.effort = ReasoningEffort::High;  // adds nothing
  EXPECT_EQ(render_ok(m, o), B + U + "q" + A + "<think>");
  o.effort = ReasoningEffort::Max;
  o.mode = ThinkingMode::Chat;  // only in thinking mode
  EXPECT_EQ(render_ok(m, o), B + U + "q" + A + "</think>");
}

TEST(ChatTools, BadToolInputs) {
  ChatOptions o;
  o.tools = {"[1]"};
  std::vector<ChatMessage> m = {{"user", "q", ""}};
  EXPECT_FALSE(render_chat(m, o).ok());
  ChatMessage a{"assistant", "", ""};
  a.tool_calls = {{"x", "f", "[1,2]"}};
  std::vector<ChatMessage> m2 = {{"user", "q", ""}, a};
  auto r = render_chat(m2, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("JSON object"), std::string::npos);
}

// ---- output parser ----

struct Collected {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

void collect(Collected& c, const std::vector<ChatOutputEvent>& ev) {
  for (const auto& e : ev) {
    if (e.kind == ChatOutputEvent::Kind::Reasoning) c.reasoning += e.text;
    if (e.kind == ChatOutputEvent::Kind::Content) c.content += e.text;
    if (e.kind == ChatOutputEvent::Kind::ToolCall) c.calls.push_back(e.call);
  }
}

// Feeds `text` in pieces of `step` bytes (cutting markers anywhere) and checks that no streamed
// content/reasoning piece ever contains a DSML or think marker fragment that is later completed.
Collected parse_in_pieces(const std::string& text, bool thinking, size_t step) {
  ChatOutputParser p(thinking);
  Collected c;
  for (size_t i = 0; i < text.size(); i += step) collect(c, p.push(text.substr(i, step)));
  collect(c, p.finish());
  return c;
}

const std::string kCallText = "I will look.\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"get_weather\">\n<" + D +
                              "parameter name=\"city\" string=\"true\">Paris, \"FR\"</" + D + "parameter>\n<" + D +
                              "parameter name=\"days\" string=\"false\">[1, 2]</" + D + "parameter>\n</" + D +
                              "invoke>\n</" + D + "tool_calls>";

TEST(ChatOutputParser, ThinkingContentAndToolCallAtEveryCut) {
  const std::string text = "hmm, weather</think>" + kCallText;
  for (size_t step : {1, 2, 3, 5, 7, 1000}) {
    Collected c = parse_in_pieces(text, true, step);
    EXPECT_EQ(c.reasoning, "hmm, weather") << step;
    EXPECT_EQ(c.content, "I will look.") << step;
    ASSERT_EQ(c.calls.size(), 1u) << step;
    EXPECT_EQ(c.calls[0].name, "get_weather");
    EXPECT_EQ(c.calls[0].arguments, R"({"city":"Paris, \"FR\"","days":[1,2]})");
  }
}

TEST(ChatOutputParser, MarkerFragmentsNeverStreamAsContent) {
  // Byte by byte: every content piece emitted before the block must be a prefix of "I will look.".
  ChatOutputParser p(false);
  std::string streamed;
  for (char ch : kCallText) {
    for (const auto& e : p.push(std::string(1, ch)))
      if (e.kind == ChatOutputEvent::Kind::Content) streamed += e.text;
    EXPECT_EQ(std::string("I will look.").substr(0, streamed.size()), streamed);
  }
  for (const auto& e : p.finish()) EXPECT_NE(e.kind, ChatOutputEvent::Kind::Content);
  EXPECT_EQ(streamed, "I will look.");
}

TEST(ChatOutputParser, ChatModeIsAllContent) {
  Collected c = parse_in_pieces("Hello </think> <think> world\n\n", false, 1);
  EXPECT_EQ(c.reasoning, "");
  EXPECT_EQ(c.content, "Hello </think> <think> world\n\n");  // held newlines are flushed at finish
}

TEST(ChatOutputParser, MissingThinkEndKeepsReasoning) {
  Collected c = parse_in_pieces("thinking forever </thi", true, 3);
  EXPECT_EQ(c.reasoning, "thinking forever </thi");
  EXPECT_EQ(c.content, "");
}

TEST(ChatOutputParser, ToolCallWithoutThinkEndEndsReasoning) {
  Collected c = parse_in_pieces("plan" + kCallText.substr(std::string("I will look.").size()), true, 4);
  EXPECT_EQ(c.reasoning, "plan");
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.calls.size(), 1u);
}

TEST(ChatOutputParser, UnclosedAndMalformedBlocksComeBackVerbatim) {
  const std::string open = "<" + D + "tool_calls>\n<" + D + "invoke name=\"f\">\n<" + D + "parameter name=\"a\" str";
  Collected c = parse_in_pieces("x" + open, false, 2);
  EXPECT_EQ(c.content, "x<" + D + "invoke name=\"f\">\n<" + D + "parameter name=\"a\" str");
  EXPECT_TRUE(c.calls.empty());
  // An invoke without a name is kept as content; the next good invoke still parses; text after
  // the closed block is content again.
  const std::string bad = "<" + D + "invoke>oops</" + D + "invoke>";
  const std::string good = "<" + D + "invoke name=\"g\">\n</" + D + "invoke>";
  Collected d = parse_in_pieces("<" + D + "tool_calls>\n" + bad + "\n" + good + "\n</" + D + "tool_calls> after",
                                false, 3);
  EXPECT_EQ(d.content, bad + " after");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "g");
  EXPECT_EQ(d.calls[0].arguments, "{}");
}

TEST(ChatOutputParser, InvokeParsing) {
  ParsedToolCall c;
  EXPECT_TRUE(parse_dsml_invoke("<" + D + "invoke name=\"n\">\n<" + D + "parameter name=\"v\" string=\"false\">not json</" +
                                    D + "parameter>\n</" + D + "invoke>",
                                c));
  EXPECT_EQ(c.arguments, R"({"v":"not json"})");
  EXPECT_FALSE(parse_dsml_invoke("<" + D + "invoke name=\"n\"><" + D + "parameter name=\"v\" string=\"true\">1</" + D +
                                     "parameter><" + D + "parameter name=\"v\" string=\"true\">2</" + D + "parameter></" +
                                     D + "invoke>",
                                 c));  // duplicate parameter
  EXPECT_FALSE(parse_dsml_invoke("<" + D + "invoke name=\"n\">junk</" + D + "invoke>", c));
}

}  // namespace
}  // namespace ds4
