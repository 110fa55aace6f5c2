#include "engine/chat/text_stream.h"

#include <algorithm>

namespace prefixd::engine {

namespace {

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary.
size_t CompleteUtf8(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back >= need ? n : n - back;
  }
  return n;
}

}  // namespace

size_t TextStream::SafeLength() const {
  size_t safe = CompleteUtf8(pending_);
  for (const std::string& s : stop_) {  // hold back a suffix that may grow into a stop string
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > 0; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        safe = std::min(safe, pending_.size() - k);
        break;
      }
    }
  }
  return safe;
}

std::string TextStream::Push(const std::string& token_bytes) {
  if (stopped_) return {};
  pending_ += token_bytes;
  for (const std::string& s : stop_) {
    if (s.empty()) continue;
    if (size_t at = pending_.find(s); at != std::string::npos) {
      stopped_ = true;
      stop_word_ = s;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      emitted_ += out;
      return out;
    }
  }
  size_t safe = SafeLength();
  std::string out = pending_.substr(0, safe);
  pending_.erase(0, safe);
  emitted_ += out;
  return out;
}

std::string TextStream::Finish() {
  if (stopped_) return {};
  std::string out = pending_.substr(0, CompleteUtf8(pending_));
  pending_.clear();
  emitted_ += out;
  return out;
}

}  // namespace prefixd::engine
