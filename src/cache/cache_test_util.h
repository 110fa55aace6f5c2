// Helpers shared by the cache tests (not part of the library).
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include "cache/chain_hash.h"
#include "cache/types.h"

namespace prefixd::cache::testing {

inline PayloadRef MakePayload(size_t n_bytes, uint64_t tag = 0) {
  auto p = std::make_shared<Payload>();
  p->bytes.assign(n_bytes, static_cast<uint8_t>(tag));
  if (n_bytes >= sizeof tag) std::memcpy(p->bytes.data(), &tag, sizeof tag);
  return p;
}

inline uint64_t PayloadTag(const PayloadRef& p) {
  uint64_t tag = 0;
  if (p && p->bytes.size() >= sizeof tag) std::memcpy(&tag, p->bytes.data(), sizeof tag);
  if (p && !p->bytes.empty() && p->bytes.size() < sizeof tag) tag = p->bytes[0];
  return tag;
}

// FNV-1a of a token prefix: tags payloads with the prefix they belong to.
inline uint64_t PrefixTag(std::span<const Token> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (Token t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ull;
  }
  return h ^ tokens.size();
}

inline std::vector<Token> Iota(size_t n, Token first = 0) {
  std::vector<Token> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<Token>(i);
  return v;
}

inline Digest TestDomain(uint8_t seed) {
  DomainInputs in;
  in.model_fingerprint.fill(seed);
  in.layout_fingerprint.fill(1);
  return DomainRoot(in);
}

}  // namespace prefixd::cache::testing
