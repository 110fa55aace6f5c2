#include "bench/bandwidth.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace prefixd::bench {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double MemcpyGBps(uint64_t bytes) {
  if (bytes == 0) return 0;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  const auto t0 = Clock::now();
  std::memcpy(b.data(), a.data(), bytes);
  const double s = SecondsSince(t0);
  if (b[bytes / 2] != 1) std::abort();  // keeps the copy
  return double(bytes) / s / 1e9;
}

double PlainReadGBps(const std::string& dir, uint64_t* bytes) {
  namespace fs = std::filesystem;
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  std::error_code ec;
  const auto t0 = Clock::now();
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += uint64_t(n);
    ::close(fd);
  }
  const double s = SecondsSince(t0);
  *bytes = total;
  return s > 0 ? double(total) / s / 1e9 : 0;
}

}  // namespace prefixd::bench
