// Content addresses of the prompt cache.
//
// The domain root binds every Block to one model, one cache layout and one tenant: two
// requests can share a Block only when all three are equal. A Block's ChainHash covers its
// tokens and, through its parent, every token before it. A Tail is keyed in its own hash
// domain (a different tag), so a Tail key can never equal a ChainHash.
//
// Thread-safety: all functions are pure and may be called from any thread.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cache/types.h"

namespace prefixd::cache {

struct DomainInputs {
  prefixd::Digest model_fingerprint;   // weights: see FileFingerprint()
  prefixd::Digest layout_fingerprint;  // KV types, flash-attn/v_trans, RoPE, SWA, LoRA, ...
  std::string tenant_salt;             // empty when tenants share
};

// h_{-1}: SHA-256("domain" || model || layout || len(salt) || salt).
prefixd::Digest DomainRoot(const DomainInputs& in);

// h_k = SHA-256("block" || parent || len || block_tokens as little-endian int32).
ChainHash NextChainHash(const ChainHash& parent, std::span<const Token> block_tokens);

// SHA-256("tail" || parent || len || tail_tokens).
prefixd::Digest TailKey(const ChainHash& parent, std::span<const Token> tail_tokens);

// The ChainHashes of the first floor(tokens.size() / block_size) Blocks of `tokens`.
// REQUIRES: block_size > 0.
std::vector<ChainHash> ChainHashes(const prefixd::Digest& domain, std::span<const Token> tokens,
                                   size_t block_size);

}  // namespace prefixd::cache
