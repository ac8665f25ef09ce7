// tests/frontend/chat_format_test.cpp — DeepSeek-V4 prompt rendering; expected strings written by
// hand from the format description in engine/chat_format.h.
#include <gtest/gtest.h>

#include <vector>

#include "engine/chat_format.h"

namespace ds4 {
namespace {

const std::string B = "<｜begin▁of▁sentence｜>", E = "<｜end▁of▁sentence｜>", U = "<｜User｜>",
                  A = "<｜Assistant｜>";

std::string render(const std::vector<ChatMessage>& m, ThinkingMode mode, bool drop = true) {
  ChatOptions o;
  o.mode = mode;
  o.drop_thinking = drop;
  auto r = render_chat(m, o);
  EXPECT_TRUE(r.ok());
  return r.ok() ? r.value() : "";
}

TEST(ChatFormat, SingleTurn) {
  std::vector<ChatMessage> m = {{"user", "Hi", ""}};
  EXPECT_EQ(render(m, ThinkingMode::Chat), B + U + "Hi" + A + "</think>");
  EXPECT_EQ(render(m, ThinkingMode::Thinking), B + U + "Hi" + A + "<think>");
}

TEST(ChatFormat, SystemPromptHasNoToken) {
  std::vector<ChatMessage> m = {{"system", "You are helpful.", ""}, {"user", "Hi", ""}};
  EXPECT_EQ(render(m, ThinkingMode::Chat), B + "You are helpful." + U + "Hi" + A + "</think>");
}

TEST(ChatFormat, MultiTurnDropsOldReasoning) {
  std::vector<ChatMessage> m = {
      {"user", "hello", ""}, {"assistant", "Hello! I am DeepSeek.", "thinking..."}, {"user", "1+1=?", ""}};
  // Matches the public DeepSeek-V3.2 example rendering in thinking mode.
  EXPECT_EQ(render(m, ThinkingMode::Thinking),
            B + U + "hello" + A + "</think>Hello! I am DeepSeek." + E + U + "1+1=?" + A + "<think>");
  EXPECT_EQ(render(m, ThinkingMode::Chat),
            B + U + "hello" + A + "</think>Hello! I am DeepSeek." + E + U + "1+1=?" + A + "</think>");
  // Keeping the reasoning: the earlier turn opens <think> and the assistant writes reasoning first.
  EXPECT_EQ(render(m, ThinkingMode::Thinking, /*drop=*/false),
            B + U + "hello" + A + "<think>thinking...</think>Hello! I am DeepSeek." + E + U + "1+1=?" + A +
                "<think>");
}

TEST(ChatFormat, AssistantAfterLastUserKeepsReasoning) {
  std::vector<ChatMessage> m = {{"user", "q", ""}, {"assistant", "a", "r"}};
  EXPECT_EQ(render(m, ThinkingMode::Thinking), B + U + "q" + A + "<think>r</think>a" + E);
}

TEST(ChatFormat, ConsecutiveUsersAreOneTurn) {
  // encoding_dsv4.py merge_tool_messages: user messages in a row become one user turn whose parts
  // are joined by a blank line.
  std::vector<ChatMessage> m = {{"user", "a", ""}, {"user", "b", ""}};
  EXPECT_EQ(render(m, ThinkingMode::Chat), B + U + "a\n\nb" + A + "</think>");
}

TEST(ChatFormat, RejectsBadMessages) {
  std::vector<ChatMessage> bad_role = {{"function", "x", ""}};
  auto r = render_chat(bad_role, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("\"function\""), std::string::npos);
  std::vector<ChatMessage> late_system = {{"user", "x", ""}, {"system", "y", ""}};
  EXPECT_FALSE(render_chat(late_system, {}).ok());
  ChatOptions no_bos;
  no_bos.add_bos = false;
  std::vector<ChatMessage> m = {{"user", "Hi", ""}};
  EXPECT_EQ(render_chat(m, no_bos).value(), U + "Hi" + A + "</think>");
}

}  // namespace
}  // namespace ds4
