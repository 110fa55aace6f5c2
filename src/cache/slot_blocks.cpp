#include "cache/slot_blocks.h"

#include <algorithm>
#include <unordered_set>

#include "cache/chain_hash.h"

namespace prefixd::cache {

namespace {

// The tokens two sequences share from position 0.
size_t SharedPrefix(std::span<const Token> a, std::span<const Token> b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return size_t(ia - a.begin());
}

}  // namespace

std::vector<ChainHash> SlotBlocks::ChainOf(const Held& old, const Digest& domain,
                                           std::span<const Token> tokens) const {
  size_t keep = 0;
  if (old.domain == domain) {
    keep = std::min(SharedPrefix(old.tokens, tokens) / block_size_, old.hashes.size());
  }
  std::vector<ChainHash> chain(old.hashes.begin(), old.hashes.begin() + keep);
  for (size_t k = keep; (k + 1) * block_size_ <= tokens.size(); ++k) {
    const ChainHash& parent = k == 0 ? domain : chain.back();
    chain.push_back(NextChainHash(parent, tokens.subspan(k * block_size_, block_size_)));
  }
  return chain;
}

void SlotBlocks::Hold(size_t slot, const Digest& domain, std::span<const Token> tokens) {
  MutexLock lock(&mu_);
  if (closed_) return;
  if (slot >= slots_.size()) slots_.resize(slot + 1);
  Held next;
  next.domain = domain;
  next.tokens.assign(tokens.begin(), tokens.end());
  next.hashes = ChainOf(slots_[slot], domain, tokens);
  const Held& old = slots_[slot];
  const size_t n = std::min(old.hashes.size(), next.hashes.size());
  const size_t kept = size_t(std::mismatch(old.hashes.begin(), old.hashes.begin() + n,
                                           next.hashes.begin()).first - old.hashes.begin());
  Release(old, kept);
  Acquire(next, kept);
  slots_[slot] = std::move(next);
}

void SlotBlocks::DropAll() {
  MutexLock lock(&mu_);
  for (Held& held : slots_) {
    Release(held, 0);
    held = Held{};
  }
}

void SlotBlocks::Close() {
  DropAll();
  MutexLock lock(&mu_);
  closed_ = true;
}

void SlotBlocks::Announce() const {
  MutexLock lock(&mu_);
  std::unordered_set<ChainHash, DigestHash> sent;
  for (const Held& held : slots_) {
    for (size_t k = 0; k < held.hashes.size(); ++k) {
      if (sent.insert(held.hashes[k]).second) SendStored(held, k);
    }
  }
}

size_t SlotBlocks::n_blocks() const {
  MutexLock lock(&mu_);
  return refs_.size();
}

void SlotBlocks::Release(const Held& held, size_t from) {
  for (size_t k = held.hashes.size(); k-- > from;) {
    auto it = refs_.find(held.hashes[k]);
    if (--it->second > 0) continue;
    refs_.erase(it);
    SendRemoved(held.domain, held.hashes[k], k + 1);
  }
}

void SlotBlocks::Acquire(const Held& held, size_t from) {
  for (size_t k = from; k < held.hashes.size(); ++k) {
    if (refs_[held.hashes[k]]++ == 0) SendStored(held, k);
  }
}

void SlotBlocks::SendStored(const Held& held, size_t k) const {
  BlockEvent e;
  e.kind = BlockEvent::Kind::kStored;
  e.tier = Tier::kSlot;
  e.domain = held.domain;
  e.hash = held.hashes[k];
  e.parent = k == 0 ? held.domain : held.hashes[k - 1];
  e.depth = k + 1;
  const auto first = held.tokens.begin() + ptrdiff_t(k * block_size_);
  e.tokens.assign(first, first + ptrdiff_t(block_size_));
  next_.OnBlockEvent(std::move(e));
}

void SlotBlocks::SendRemoved(const Digest& domain, const ChainHash& hash, size_t depth) const {
  BlockEvent e;
  e.kind = BlockEvent::Kind::kRemoved;
  e.tier = Tier::kSlot;
  e.domain = domain;
  e.hash = hash;
  e.depth = depth;
  next_.OnBlockEvent(std::move(e));
}

}  // namespace prefixd::cache
