#include "server/sse.h"

namespace prefixd::server {

std::string SseData(const std::string& json) { return "data: " + json + "\n\n"; }

const std::string& SseDone() {
  static const std::string kDone = "data: [DONE]\n\n";
  return kDone;
}

namespace {

// Length of the UTF-8 sequence a lead byte starts, or 1 for a byte that starts none.
size_t SequenceLength(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF7) return 4;
  if (lead >= 0xE0) return lead <= 0xEF ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

}  // namespace

std::string Utf8Carry::Take(const std::string& text) {
  std::string all = held_ + text;
  held_.clear();
  // Look back at most 3 bytes for the lead byte of an unfinished sequence.
  size_t n = all.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(all[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    if (SequenceLength(c) > back) {
      held_ = all.substr(n - back);
      all.resize(n - back);
    }
    break;
  }
  return all;
}

std::string Utf8Carry::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace prefixd::server
