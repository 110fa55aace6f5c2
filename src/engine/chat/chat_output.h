// Chat output: what a chat render says about the reply it asks for — the grammar that
// constrains it, the control tokens and stops it needs, the parser that reads it — and that
// parser, which splits generated text into reasoning, content and tool calls with llama.cpp
// common's chat parser (common_chat_parse, common_chat_msg_diff). Nothing here includes
// llama.h; the server uses these types and the parser as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/codec/types.h"

namespace prefixd::engine {

// Where a grammar came from; decides whether the generation prompt is fed to it first.
enum class GrammarKind : uint8_t {
  kNone,
  kUser,          // a GBNF the client gave (never prefilled)
  kOutputFormat,  // from a JSON schema
  kToolCalls,     // from the chat template (tools, tool_choice, response_format)
};

// What starts a lazy grammar.
struct GrammarTrigger {
  enum class Type : uint8_t { kToken, kWord, kPattern, kPatternFull };
  Type type = Type::kWord;
  std::string value;  // the word or regex (kToken: the token's text)
  Token token = -1;   // kToken only
};

// A GBNF constraint on sampling. Lazy grammars apply only once a trigger was generated.
struct GrammarSpec {
  GrammarKind kind = GrammarKind::kNone;
  std::string gbnf;
  bool lazy = false;
  std::vector<GrammarTrigger> triggers;
  // Already in the prompt; fed to kOutputFormat/kToolCalls. With the thinking tags, set for
  // every chat reply (a reasoning budget reads them without a grammar).
  std::string generation_prompt;
  // The template's thinking block: a lazy grammar is not started inside it (llama-server's
  // reasoning-budget sampler, with no budget). Empty when the template does not think.
  std::string thinking_start;
  std::vector<std::string> thinking_end;
  // A forced tool call (tool_choice required, a named function, Anthropic's any / tool): how the
  // template writes a call up to where the model chooses (the call header every tool shares),
  // which the sampler decodes as the reply's next tokens once no reasoning block is open (at
  // once, or after the block's end tag), so the reply is a call and not text before one that
  // never comes. Empty: the grammar alone decides.
  std::string forced_call;
  // With several tools, each tool's header after forced_call (its name, and what the template
  // writes between the name and the arguments): once the model's text after forced_call fits
  // only one of them, the sampler decodes the rest of that one.
  std::vector<std::string> forced_call_rests;
  bool empty() const { return kind == GrammarKind::kNone || gbnf.empty(); }
};

// How a chat reply is constrained and read: the format of the render that asked for it.
// Default: plain content, no grammar, nothing special.
struct OutputFormat {
  int chat_format = 0;            // common_chat_format; 0: content only
  std::string parser;             // the PEG parser, serialized ("" : content only)
  std::string generation_prompt;  // what the template put after the last message
  bool parse_tool_calls = false;  // tools were given and tool_choice is not "none"
  std::vector<Token> special_tokens;  // control tokens the parser needs, rendered as text
  std::vector<std::string> additional_stops;  // the template's stops (join the client's)
  GrammarSpec grammar;
};

struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// A reply as the parser reads it.
struct ChatMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ChatToolCall> tool_calls;
};

// What one more piece of text added to the reply. tool_index is npos when the delta is not
// about a tool call; a tool call's first delta carries its id and name, later ones only
// argument text.
struct ChatDelta {
  static constexpr size_t npos = size_t(-1);
  std::string reasoning_content;
  std::string content;
  size_t tool_index = npos;
  ChatToolCall tool_call;
};

// Reads a reply as it grows. Each Update() parses the whole text so far (as llama-server
// does) and returns what changed since the last call. Text that does not parse in the
// format becomes plain content (the parser never fails a request). Tool call ids are made up
// once per call ("call_" + 24 random characters) and kept. Single-threaded.
class ChatOutputParser {
 public:
  explicit ChatOutputParser(const OutputFormat& format);
  ~ChatOutputParser();
  ChatOutputParser(const ChatOutputParser&) = delete;
  ChatOutputParser& operator=(const ChatOutputParser&) = delete;

  // `text` is the whole reply so far; `is_final` once it is complete.
  std::vector<ChatDelta> Update(const std::string& text, bool is_final);
  // The reply as parsed by the last Update().
  const ChatMessage& message() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses a whole reply at once.
ChatMessage ParseChatOutput(const OutputFormat& format, const std::string& text);

}  // namespace prefixd::engine
