// tests/server/server_unit_test.cpp — stop strings across token boundaries, UTF-8 validation and
// OpenAI request validation. Expected values are written by hand from the OpenAI API's field
// definitions and the behaviour documented in engine/server/*.h.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/server/openai_request.h"
#include "engine/server/stop_matcher.h"

namespace ds4::server {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  return out + m.finish();
}

TEST(StopMatcher, CutAcrossPieces) {
  StopMatcher m({"END"});
  EXPECT_EQ(feed(m, {"abc E", "N", "Dxyz"}), "abc ");
  EXPECT_TRUE(m.stopped());
  StopMatcher held({"END"});
  EXPECT_EQ(held.push("abcE"), "abc");  // "E" may start the stop string: held back
  EXPECT_EQ(held.push("x"), "Ex");
  EXPECT_EQ(held.finish(), "");
  StopMatcher tail({"END"});
  EXPECT_EQ(feed(tail, {"abcEN"}), "abcEN");  // never completed: released at finish
  EXPECT_FALSE(tail.stopped());
}

TEST(StopMatcher, EarliestOfSeveral) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(feed(m, {"hel", "lo wor", "ld"}), "hel");
  StopMatcher none({});
  EXPECT_EQ(feed(none, {"a", "b"}), "ab");
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\xc3"));          // truncated
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));  // surrogate U+D800
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
}

std::optional<ApiError> chat(const std::string& body, GenerationRequest& r) {
  return parse_chat_request(Json::parse(body), RequestLimits{}, r);
}

TEST(OpenAiRequest, ChatFieldsAndDefaults) {
  GenerationRequest r;
  auto e = chat(R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                    "max_completion_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,"seed":9,"stop":"x",
                    "stream":true,"stream_options":{"include_usage":true}})",
                r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens.value(), 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_TRUE(r.seed_given && r.stream && r.include_usage);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.chat_options.mode, ThinkingMode::Thinking);  // DeepSeek's default: thinking on
  GenerationRequest d;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}]})", d));
  EXPECT_EQ(d.sampling.temperature, 1.0f);  // OpenAI defaults
  EXPECT_EQ(d.sampling.top_p, 1.0f);
  EXPECT_FALSE(d.max_tokens.has_value());
}

TEST(OpenAiRequest, ThinkingSwitches) {
  GenerationRequest r;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"thinking":{"type":"disabled"}})", r));
  EXPECT_EQ(r.chat_options.mode, ThinkingMode::Chat);
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"thinking":false}})", r));
  EXPECT_EQ(r.chat_options.mode, ThinkingMode::Chat);
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"reasoning_effort":"max"})", r));
  EXPECT_EQ(r.chat_options.effort, ReasoningEffort::Max);
  auto e = chat(R"({"messages":[{"role":"user","content":"q"}],"reasoning_effort":"medium"})", r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "reasoning_effort");
}

TEST(OpenAiRequest, ToolsAndToolMessages) {
  GenerationRequest r;
  auto e = chat(R"({"messages":[{"role":"user","content":"q"},
                     {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
                     {"role":"tool","tool_call_id":"c1","content":"r"}],
                    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]})",
                r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.chat_options.tools.size(), 1u);
  EXPECT_EQ(r.chat_options.tools[0], R"({"name":"f","parameters":{"type":"object"}})");  // key order kept
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"tool_choice":"none",
                       "tools":[{"type":"function","function":{"name":"f"}}]})", r));
  EXPECT_TRUE(r.chat_options.tools.empty());  // tool_choice "none": no tools block
}

TEST(OpenAiRequest, RefusedByName) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"messages":[{"role":"user","content":"q"}],"n":2})", "n"},
      {R"({"messages":[{"role":"user","content":"q"}],"logprobs":1})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"q"}],"top_logprobs":1})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"q"}],"repeat_penalty":1.1})", "repeat_penalty"},
      {R"({"messages":[{"role":"user","content":"q"}],"ignore_eos":true})", "ignore_eos"},
      {R"({"messages":[{"role":"user","content":"q"}],"max_tokens":5,"n_predict":6})", "n_predict"},
      {R"({"messages":[{"role":"user","content":"q"}],"n_predict":0})", "n_predict"},
      {R"({"messages":[{"role":"user","content":"q"}],"presence_penalty":1})", "presence_penalty"},
      {R"({"messages":[{"role":"user","content":"q"}],"bogus":1})", "bogus"},
      {R"({"messages":[{"role":"user","content":"q","extra":1}]})", "messages[0].extra"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":"q"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"q"}],"top_p":0})", "top_p"},
      {R"({"messages":[{"role":"user","content":"q"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"q"}],"max_tokens":5,"max_completion_tokens":6})", "max_completion_tokens"},
      {R"({"messages":[{"role":"user","content":"q"}],"stop":["a","b","c","d","e"]})", "stop"},
      {R"({"messages":[{"role":"user","content":"q"}],"stop":[""]})", "stop"},
      {R"({"messages":[{"role":"user","content":"q"}],"stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
      {R"({"model":"m"})", "messages"},
  };
  for (const auto& c : cases) {
    GenerationRequest r;
    auto e = chat(c.body, r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body;
    EXPECT_NE(e->message.find(c.param), std::string::npos) << e->message;
  }
  // The ranges print as integers where they are ("[0, 2]", not "[0.000000, 2.000000]").
  {
    GenerationRequest r;
    auto e = chat(R"({"messages":[{"role":"user","content":"q"}],"temperature":3})", r);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("'temperature': expected a number in [0, 2], found 3"), std::string::npos) << e->message;
    e = chat(R"({"messages":[{"role":"user","content":"q"}],"top_p":1.5})", r);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("'top_p': expected a number in (0, 1], found 1.5"), std::string::npos) << e->message;
  }
  RequestLimits lim;
  lim.max_messages = 2;
  GenerationRequest r;
  auto e = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},
                                                          {"role":"user","content":"c"}]})"),
                              lim, r);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("at most 2"), std::string::npos) << e->message;
}

TEST(OpenAiRequest, Completions) {
  GenerationRequest r;
  ASSERT_FALSE(parse_completion_request(Json::parse(R"({"prompt":"abc"})"), {}, r));
  EXPECT_EQ(r.prompt_text, "abc");
  EXPECT_EQ(r.max_tokens.value(), 16);  // OpenAI's default for completions
  ASSERT_FALSE(parse_completion_request(Json::parse(R"({"prompt":[1,2,3],"max_tokens":4})"), {}, r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  auto e = parse_completion_request(Json::parse(R"({"prompt":["a","b"]})"), {}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
  e = parse_completion_request(Json::parse(R"({"prompt":"a","echo":true})"), {}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "echo");
}

TEST(OpenAiRequest, LogprobsAndLlamaCppFields) {
  GenerationRequest r;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"logprobs":true,"top_logprobs":5,"n_predict":7,
                        "repeat_penalty":1.0,"ignore_eos":false})", r));
  EXPECT_EQ(r.top_logprobs, 5);
  EXPECT_EQ(r.max_tokens.value(), 7);
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"logprobs":true})", r));
  EXPECT_EQ(r.top_logprobs, 0);
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"q"}],"logprobs":false})", r));
  EXPECT_EQ(r.top_logprobs, -1);
  ASSERT_FALSE(parse_completion_request(Json::parse(R"({"prompt":"a","logprobs":3,"n_predict":-1})"), {}, r));
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_TRUE(r.max_tokens_all);
  auto e = parse_completion_request(Json::parse(R"({"prompt":"a","logprobs":6})"), {}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logprobs");
}

TEST(TokenLogprob, HandComputed) {
  // logits {0, ln 3, ln 3 - 100}: p ~ {1/4, 3/4, ...}; log p(0) = -ln 4 - tiny, log p(1) = ln 3 - ln 4.
  const std::vector<float> logits = {0.0f, float(std::log(3.0)), float(std::log(3.0) - 100.0)};
  const TokenLogprob t = token_logprob(logits, 0, 2);
  EXPECT_EQ(t.id, 0);
  EXPECT_NEAR(t.logprob, -std::log(4.0), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_NEAR(t.top[0].second, std::log(0.75), 1e-6);
  EXPECT_EQ(t.top[1].first, 0);
  // Ties go to the lower id; n_top beyond the vocabulary is clamped.
  const std::vector<float> flat = {2.0f, 2.0f, 2.0f};
  const TokenLogprob u = token_logprob(flat, 2, 9);
  ASSERT_EQ(u.top.size(), 3u);
  EXPECT_EQ(u.top[0].first, 0);
  EXPECT_EQ(u.top[2].first, 2);
  EXPECT_NEAR(u.logprob, -std::log(3.0), 1e-6);
}

TEST(OpenAiRequest, ErrorBodyShape) {
  ApiError e;
  e.message = "m";
  e.param = "p";
  const Json b = error_body(e);
  EXPECT_EQ(b.dump(), R"({"error":{"message":"m","type":"invalid_request_error","param":"p","code":null}})");
}

}  // namespace
}  // namespace ds4::server
