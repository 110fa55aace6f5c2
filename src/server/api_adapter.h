// ApiAdapter: the seam through which an API other than chat completions (the OpenAI Responses
// API, the Anthropic Messages API) runs on the chat-completions path.
//
// The API's route translates its request body into a /v1/chat/completions body; the chat path
// parses, validates and runs that body exactly as it runs a chat completion, and hands every
// answer it would have sent to the adapter instead:
//   - the final chat.completion JSON of a non-streamed request        -> FinalBody()
//     with what the JSON does not say about the end (AnswerEnd)
//   - each chat.completion.chunk JSON of a stream, then its end        -> ApiStream
//   - an error, before anything was sent                               -> ErrorBody()
// The HTTP status of an error is still HttpStatusOf(kind). The translated chat bodies always
// ask for stream_options.include_usage, so the last chunk of a stream carries the usage.
//
// Adapters are pure and hold no state but an ApiStream's; an ApiAdapter is thread-safe, an
// ApiStream is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace prefixd::server {

// How an answer ended, beyond the chat JSON's finish_reason.
struct AnswerEnd {
  std::string stop_sequence;  // the client's stop string that ended the answer; "" otherwise

  // The end of an answer whose generation stopped at `stop_word` ("" for none), given the
  // stop strings the client asked for (the template may have added its own).
  static AnswerEnd Of(const std::string& stop_word, const std::vector<std::string>& client_stop) {
    AnswerEnd end;
    for (const std::string& s : client_stop) {
      if (!stop_word.empty() && s == stop_word) end.stop_sequence = s;
    }
    return end;
  }
};

// One streamed response, translated chunk by chunk. The returned strings are SSE text (whole
// events, "\n\n"-terminated) ready to send; "" sends nothing.
class ApiStream {
 public:
  virtual ~ApiStream() = default;
  // One chat.completion.chunk (JSON text).
  virtual std::string OnChunk(const std::string& chunk_json) = 0;
  // The end of a stream that completed, in place of "data: [DONE]".
  virtual std::string OnEnd(const AnswerEnd& end) = 0;
  // The end of a stream that failed after its first event was sent.
  virtual std::string OnError(const ApiError& error) = 0;
};

// What a stream knows before its first chunk.
struct StreamStart {
  std::string model;            // the model id answered
  int64_t n_prompt_tokens = 0;  // tokens of the rendered prompt
};

class ApiAdapter {
 public:
  virtual ~ApiAdapter() = default;
  // The API's response body for a chat.completion (JSON text).
  virtual std::string FinalBody(const std::string& chat_json, const AnswerEnd& end) const = 0;
  // The API's error body for `error`.
  virtual std::string ErrorBody(const ApiError& error) const = 0;
  virtual std::unique_ptr<ApiStream> NewStream(const StreamStart& start) const = 0;
};

}  // namespace prefixd::server
