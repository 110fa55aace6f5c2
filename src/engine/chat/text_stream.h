// TextStream: turns generated tokens into text pieces safe to send to a client: never splits a
// UTF-8 character, and holds back text that may be the start of a stop string. Single-threaded.
#pragma once

#include <string>
#include <vector>

namespace prefixd::engine {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {}

  // Appends a token's bytes. Returns the text that can be emitted now (may be empty).
  // After a stop string is seen, stopped() is true and nothing more is emitted.
  std::string Push(const std::string& token_bytes);
  // Flushes what was held back (end of generation). Incomplete UTF-8 is dropped.
  std::string Finish();

  bool stopped() const { return stopped_; }
  // The stop string that ended the stream; "" while none has.
  const std::string& stop_word() const { return stop_word_; }
  const std::string& text() const { return emitted_; }  // everything emitted so far

 private:
  size_t SafeLength() const;  // bytes of pending_ that may be emitted

  std::vector<std::string> stop_;
  std::string pending_;
  std::string emitted_;
  bool stopped_ = false;
  std::string stop_word_;
};

}  // namespace prefixd::engine
