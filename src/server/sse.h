// Server-sent events framing for streamed completions, and Utf8Carry, which keeps a multi-byte
// character that a token boundary split from reaching a client in halves (a JSON string
// cannot hold half a character). Pure; not thread-shared.
#pragma once

#include <string>

namespace prefixd::server {

// "data: <json>\n\n".
std::string SseData(const std::string& json);
// The last event of every stream: "data: [DONE]\n\n".
const std::string& SseDone();

// Splits a byte stream into pieces that end on whole UTF-8 characters.
class Utf8Carry {
 public:
  // Returns the longest prefix of (held bytes + text) that ends on a character boundary and
  // holds back the rest (at most 3 bytes of an unfinished character).
  std::string Take(const std::string& text);
  // Returns whatever is held back (possibly an invalid sequence) and empties the carry.
  std::string Flush();

 private:
  std::string held_;
};

}  // namespace prefixd::server
