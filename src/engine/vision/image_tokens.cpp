#include "engine/vision/image_tokens.h"

#include <cstring>

namespace prefixd::engine {

std::vector<Token> ImageTokens(const Digest& identity, int32_t n) {
  // SHA-256 of (identity, row): full entropy per row, different at every offset, so no row of
  // one image can be mistaken for another row of it or of another image by a chosen file.
  std::vector<Token> out(size_t(n > 0 ? n : 0));
  for (int32_t i = 0; i < n; ++i) {
    Sha256 h;
    h.Update("prefixd image row v1");
    h.Update(identity.data(), identity.size());
    h.UpdateU64(uint64_t(i));
    const Digest d = h.Finish();
    uint32_t v = 0;
    std::memcpy(&v, d.data(), sizeof v);
    out[size_t(i)] = Token(-2 - int32_t(v & 0x3fffffffu));
  }
  return out;
}

}  // namespace prefixd::engine
