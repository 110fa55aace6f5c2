#include "bench/decode_log.h"

#include <filesystem>
#include <fstream>

namespace prefixd::bench {

int64_t DecodeLogMark(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : int64_t(size);
}

PrefillCount CountPrefill(const std::string& path, int64_t mark) {
  PrefillCount count;
  std::ifstream in(path);
  if (!in) return count;
  in.seekg(mark);
  int64_t tokens = 0, ubatches = 0, outputs = 0;
  while (in >> tokens >> ubatches >> outputs) {
    if (tokens <= 1 && outputs > 0) continue;
    ++count.calls;
    count.ubatches += ubatches;
  }
  return count;
}

}  // namespace prefixd::bench
