#include "engine/render_memo.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

namespace prefixd::engine {

namespace {

size_t SharedChars(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

void UpdateString(Sha256& h, std::string_view s) {
  h.UpdateU64(s.size());
  h.Update(s);
}

// Hashes everything but the messages that decides what a prefix renders to.
Digest Seed(const ChatTemplate& tmpl, const ParsedChat& chat) {
  Sha256 h;
  UpdateString(h, "prefixd-render-memo-v1");
  h.Update(tmpl.fingerprint().data(), tmpl.fingerprint().size());
  UpdateString(h, chat.options().tools_json);
  UpdateString(h, chat.render_date());
  return h.Finish();
}

Digest Chain(const Digest& parent, std::string_view message_json) {
  Sha256 h;
  h.Update(parent.data(), parent.size());
  UpdateString(h, message_json);
  return h.Finish();
}

PrefixKey VariantKey(const Digest& chain, PrefixVariant variant) {
  Sha256 h;
  h.Update(chain.data(), chain.size());
  const uint8_t v = uint8_t(variant);
  h.Update(&v, 1);
  return h.Finish();
}

struct KeyHash {
  size_t operator()(const PrefixKey& k) const {
    size_t h;
    std::memcpy(&h, k.data(), sizeof h);
    return h;
  }
};

}  // namespace

PrefixRecord MakePrefixRecord(std::string_view prefix, std::string_view full) {
  PrefixRecord r;
  r.length = prefix.size();
  r.boundary = SharedChars(prefix, full);
  if (r.boundary < r.length) r.next_char = prefix[r.boundary];
  r.head_digest = Sha256Of(prefix.substr(0, r.boundary));
  return r;
}

std::vector<PrefixKey> PrefixKeys(const ChatTemplate& tmpl, const ParsedChat& chat,
                                  std::span<const PrefixRender> prefixes) {
  // chains[i]: the chain hash of messages[:i].
  std::vector<Digest> chains(chat.n_messages() + 1);
  chains[0] = Seed(tmpl, chat);
  for (size_t i = 0; i < chat.n_messages(); ++i) {
    chains[i + 1] = Chain(chains[i], chat.message_json(i));
  }
  std::vector<PrefixKey> keys;
  keys.reserve(prefixes.size());
  for (const PrefixRender& p : prefixes) {
    keys.push_back(VariantKey(chains[p.n_messages], p.variant));
  }
  return keys;
}

std::vector<Digest> PrefixDigests(std::string_view full, std::span<const uint64_t> boundaries) {
  std::vector<size_t> order(boundaries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return boundaries[a] < boundaries[b]; });
  std::vector<Digest> out(boundaries.size());
  Sha256 h;
  uint64_t at = 0;
  Digest at_digest = h.Peek();
  for (size_t i : order) {
    const uint64_t b = boundaries[i];
    if (b != at) {
      h.Update(full.data() + at, b - at);
      at = b;
      at_digest = h.Peek();
    }
    out[i] = at_digest;
  }
  return out;
}

bool ProvesSharedLength(const PrefixRecord& r, std::string_view full, const Digest& head_digest) {
  if (head_digest != r.head_digest) return false;
  return r.boundary == r.length || r.boundary == full.size() || full[r.boundary] != r.next_char;
}

struct RenderMemo::Impl {
  using Entry = std::pair<PrefixKey, PrefixRecord>;
  RenderMemoOptions options;
  mutable std::mutex mu;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<PrefixKey, std::list<Entry>::iterator, KeyHash> index;
};

RenderMemo::RenderMemo(const RenderMemoOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
RenderMemo::~RenderMemo() = default;

std::vector<std::optional<PrefixRecord>> RenderMemo::Find(std::span<const PrefixKey> keys) {
  std::vector<std::optional<PrefixRecord>> out(keys.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = impl_->index.find(keys[i]);
    if (it == impl_->index.end()) continue;
    impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
    out[i] = it->second->second;
  }
  return out;
}

void RenderMemo::Put(std::span<const std::pair<PrefixKey, PrefixRecord>> records) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [key, record] : records) {
    auto it = impl_->index.find(key);
    if (it != impl_->index.end()) {
      it->second->second = record;
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      continue;
    }
    impl_->lru.emplace_front(key, record);
    impl_->index.emplace(key, impl_->lru.begin());
  }
  while (impl_->lru.size() > impl_->options.max_entries) {
    impl_->index.erase(impl_->lru.back().first);
    impl_->lru.pop_back();
  }
}

size_t RenderMemo::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lru.size();
}

void RenderMemo::Clear() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->lru.clear();
  impl_->index.clear();
}

}  // namespace prefixd::engine
