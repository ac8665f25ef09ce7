// engine/chat_output_parser.h — incremental parser of DeepSeek-V4 model output: splits the reasoning
// (before "</think>") from the content and turns DSML tool-call blocks into (name, JSON arguments)
// calls, one text piece at a time, so a streamed response never shows a marker that was cut
// between two tokens.
//
// Output grammar (facts from DeepSeek's encoding/encoding_dsv4.py, `parse_message_from_completion_text`
// and `parse_tool_calls`; see engine/chat_format.h for where it was read): in thinking mode the
// model writes reasoning, then "</think>", then the content; tool calls follow the content as
// "\n\n<｜DSML｜tool_calls>\n", invokes `<｜DSML｜invoke name="N">\n ... \n</｜DSML｜invoke>` holding
// parameters `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>` (V verbatim when
// string="true", else JSON), then "\n</｜DSML｜tool_calls>"; the turn ends at end-of-sequence (the
// caller stops there; the EOS token never reaches this parser).
//
// Leniency (the reference asserts instead): a tool-call block that starts before "</think>" ends the
// reasoning; text after a closed block is content again; an invoke that does not parse (no name,
// a duplicate parameter, a bad parameter) and a block left unclosed at finish() come back as
// content verbatim; a missing "</think>" leaves everything as reasoning. No text is ever dropped
// except the markup itself and the whitespace between the markup's elements.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ds4 {

/// One tool call parsed from DSML: `arguments` is the compact JSON text of an object.
struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

/// One piece of parsed output, in generation order.
struct ChatOutputEvent {
  enum class Kind { Reasoning, Content, ToolCall };
  Kind kind = Kind::Content;
  std::string text;     // Reasoning / Content
  ParsedToolCall call;  // ToolCall
};

/// Incremental parser. Not thread-safe.
class ChatOutputParser {
 public:
  /// `in_reasoning`: the prompt ended with "<think>" (thinking mode), so output starts as reasoning.
  explicit ChatOutputParser(bool in_reasoning);
  /// Feeds generated text (valid UTF-8 pieces); returns what can be emitted now. A suffix that may
  /// be the start of a marker is held back until more text arrives or finish().
  std::vector<ChatOutputEvent> push(std::string_view text);
  /// Ends the output: returns everything held back.
  std::vector<ChatOutputEvent> finish();
  /// True while no "</think>" (or tool-call block) has ended the reasoning yet.
  bool in_reasoning() const { return state_ == State::Reasoning; }

 private:
  enum class State { Reasoning, Content, Tools };
  std::vector<ChatOutputEvent> run(bool final);
  State state_;
  std::string buf_;
};

/// Parses one `<｜DSML｜invoke name="N">...</｜DSML｜invoke>` text (the whole of it); false if it is
/// malformed. Exposed for tests.
bool parse_dsml_invoke(std::string_view invoke, ParsedToolCall& out);

}  // namespace ds4
