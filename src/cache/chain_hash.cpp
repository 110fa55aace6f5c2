#include "cache/chain_hash.h"

#include <cassert>

namespace prefixd::cache {
namespace {

// Tags are NUL-terminated so that no tag is a prefix of another.
void UpdateTag(Sha256& h, const char* tag) {
  h.Update(tag, std::char_traits<char>::length(tag) + 1);
}

Digest TaggedTokenHash(const char* tag, const Digest& parent, std::span<const Token> tokens) {
  Sha256 h;
  UpdateTag(h, tag);
  h.Update(parent.data(), parent.size());
  h.UpdateU64(tokens.size());
  h.Update(tokens.data(), tokens.size_bytes());
  return h.Finish();
}

}  // namespace

Digest DomainRoot(const DomainInputs& in) {
  Sha256 h;
  UpdateTag(h, "domain");
  h.Update(in.model_fingerprint.data(), in.model_fingerprint.size());
  h.Update(in.layout_fingerprint.data(), in.layout_fingerprint.size());
  h.UpdateU64(in.tenant_salt.size());
  h.Update(in.tenant_salt);
  return h.Finish();
}

ChainHash NextChainHash(const ChainHash& parent, std::span<const Token> block_tokens) {
  return TaggedTokenHash("block", parent, block_tokens);
}

Digest TailKey(const ChainHash& parent, std::span<const Token> tail_tokens) {
  return TaggedTokenHash("tail", parent, tail_tokens);
}

std::vector<ChainHash> ChainHashes(const Digest& domain, std::span<const Token> tokens,
                                   size_t block_size) {
  assert(block_size > 0);
  std::vector<ChainHash> out;
  out.reserve(tokens.size() / block_size);
  ChainHash h = domain;
  for (size_t begin = 0; begin + block_size <= tokens.size(); begin += block_size) {
    h = NextChainHash(h, tokens.subspan(begin, block_size));
    out.push_back(h);
  }
  return out;
}

}  // namespace prefixd::cache
