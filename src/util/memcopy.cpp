#include "util/memcopy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace prefixd {

void CopyStreaming(void* dst_v, const void* src_v, size_t n) {
#if defined(__x86_64__)
  constexpr size_t kStreamFrom = 4096;  // below: the stores' set-up outweighs them
  if (n < kStreamFrom) {
    std::memcpy(dst_v, src_v, n);
    return;
  }
  auto* dst = static_cast<uint8_t*>(dst_v);
  auto* src = static_cast<const uint8_t*>(src_v);
  const size_t head = (64 - (uintptr_t(dst) & 63)) & 63;  // up to the next cache line
  std::memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  std::memcpy(dst, src, n);
  _mm_sfence();
#else
  std::memcpy(dst_v, src_v, n);
#endif
}

namespace {
// The page-aligned part of [p, p + n): [*begin, *end).
void WholePages(void* p, size_t n, uintptr_t* begin, uintptr_t* end) {
#if defined(__linux__)
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
#else
  const uintptr_t page = 4096;
#endif
  *begin = (uintptr_t(p) + page - 1) & ~(page - 1);
  *end = std::max(*begin, (uintptr_t(p) + n) & ~(page - 1));
}

// Best effort: an older kernel says EINVAL and the pages fault in as they are written.
void Populate(uintptr_t begin, uintptr_t end) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)begin, (void)end;
#endif
}
}  // namespace

void ReservePopulated(std::vector<uint8_t>* v, size_t n) {
  v->reserve(n);
  constexpr size_t kPopulateFrom = size_t(1) << 20;
  if (n < kPopulateFrom) return;
  uintptr_t begin = 0, end = 0;
  WholePages(v->data(), n, &begin, &end);
  Populate(begin, end);
}

bool PopulatePieces(void* p, size_t n, size_t piece, const std::function<bool()>& stop) {
  uintptr_t begin = 0, end = 0;
  WholePages(p, n, &begin, &end);
  const uintptr_t step = std::max<uintptr_t>(piece & ~uintptr_t(4095), 4096);
  for (uintptr_t at = begin; at < end; at += std::min(step, end - at)) {
    if (stop && stop()) return false;
    Populate(at, at + std::min(step, end - at));
  }
  return true;
}

void ResizeForOverwrite(std::vector<uint8_t>& buf, size_t n) {
  ReservePopulated(&buf, n);
  buf.resize(n);
}

}  // namespace prefixd
