#include "engine/chat/render_memo.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <list>
#include <unordered_map>

#include "util/mutex.h"
#include "util/process_memory.h"

namespace prefixd::engine {

namespace {

size_t SharedChars(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  constexpr size_t kBlock = 64;  // memcmp whole blocks first: texts share up to megabytes
  while (i + kBlock <= n && std::memcmp(a.data() + i, b.data() + i, kBlock) == 0) i += kBlock;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

size_t SharedSuffixChars(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[a.size() - 1 - i] == b[b.size() - 1 - i]) ++i;
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
  UpdateString(h, RenderOptionsKey(chat.options()));
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

std::optional<PrefixSplit> MakePrefixSplit(std::string_view prefix, std::string_view placeholder) {
  const size_t tail = SharedSuffixChars(prefix, placeholder);
  if (tail == 0 || tail > kMaxSplitTail) return std::nullopt;
  PrefixSplit s;
  s.at = prefix.size() - tail;
  s.head_digest = Sha256Of(prefix.substr(0, s.at));
  s.tail = std::string(prefix.substr(s.at));
  return s;
}

PrefixRecord Rebound(const PrefixRecord& r, uint64_t boundary, char next_char,
                     const Digest& head_digest) {
  assert(boundary <= r.length);
  PrefixRecord out = r;
  out.boundary = boundary;
  out.next_char = boundary < r.length ? next_char : 0;
  out.head_digest = head_digest;
  return out;
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

std::optional<uint64_t> SharedLengthBySplit(const PrefixSplit& split, std::string_view full,
                                            const Digest& head_digest) {
  assert(split.at <= full.size());
  if (head_digest != split.head_digest) return std::nullopt;
  return split.at + SharedChars(split.tail, full.substr(split.at));
}

std::optional<uint64_t> SharedLengthByText(const PrefixRecord& r, const Digest& text_head_digest,
                                           uint64_t text_shared) {
  assert(!r.refused);
  if (text_shared >= r.boundary || text_head_digest != r.head_digest) return std::nullopt;
  return text_shared;
}

struct RenderMemo::Impl {
  using Entry = std::pair<PrefixKey, PrefixRecord>;
  RenderMemoOptions options;
  mutable Mutex mu;
  std::list<Entry> lru PREFIXD_GUARDED_BY(mu);  // most recently used first
  std::unordered_map<PrefixKey, std::list<Entry>::iterator, KeyHash> index PREFIXD_GUARDED_BY(mu);
  // Most recently used first.
  std::list<std::shared_ptr<const std::string>> texts PREFIXD_GUARDED_BY(mu);
  size_t text_bytes PREFIXD_GUARDED_BY(mu) = 0;
  size_t record_bytes PREFIXD_GUARDED_BY(mu) = 0;  // BytesOf every record in lru

  size_t reported PREFIXD_GUARDED_BY(mu) = 0;  // bytes added to Gauge()

  void EvictTexts() PREFIXD_REQUIRES(mu) {
    while (text_bytes > options.max_text_bytes) {
      text_bytes -= texts.back()->size();
      texts.pop_back();
    }
  }
  // The memory of every memo, for /metrics: each record's list and hash nodes and its split's
  // tail (up to kMaxSplitTail characters: the tails, not the nodes, are most of it), as the
  // heap chunks they take, and the kept texts.
  static MemoryGauge& Gauge() {
    static MemoryGauge g("render_memo");
    return g;
  }
  static size_t BytesOf(const PrefixRecord& r) {
    constexpr size_t kList = HeapChunkBytes(sizeof(Entry) + 2 * sizeof(void*));  // prev, next
    // The index's node (next, key, iterator, the cached hash) and its share of the buckets.
    constexpr size_t kIndex = HeapChunkBytes(sizeof(void*) + sizeof(PrefixKey) +
                                             sizeof(void*) + sizeof(size_t)) + 2 * sizeof(void*);
    const size_t tail = r.split && r.split->tail.capacity() > 15  // else inside the string
                            ? HeapChunkBytes(r.split->tail.capacity() + 1) : 0;
    return kList + kIndex + tail;
  }
  void EvictRecords() PREFIXD_REQUIRES(mu) {
    while (!lru.empty() &&
           (lru.size() > options.max_entries || record_bytes > options.max_record_bytes)) {
      record_bytes -= BytesOf(lru.back().second);
      index.erase(lru.back().first);
      lru.pop_back();
    }
  }
  void Report() PREFIXD_REQUIRES(mu) {
    const size_t now = record_bytes + text_bytes;
    Gauge().Add(int64_t(now) - int64_t(reported));
    reported = now;
  }
};

RenderMemo::RenderMemo(const RenderMemoOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
RenderMemo::~RenderMemo() { Clear(); }

std::vector<std::optional<PrefixRecord>> RenderMemo::Find(std::span<const PrefixKey> keys) {
  std::vector<std::optional<PrefixRecord>> out(keys.size());
  MutexLock lock(&impl_->mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = impl_->index.find(keys[i]);
    if (it == impl_->index.end()) continue;
    impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
    out[i] = it->second->second;
  }
  return out;
}

void RenderMemo::Put(std::span<const std::pair<PrefixKey, PrefixRecord>> records) {
  MutexLock lock(&impl_->mu);
  for (const auto& [key, record] : records) {
    auto it = impl_->index.find(key);
    if (it != impl_->index.end()) {
      impl_->record_bytes -= Impl::BytesOf(it->second->second);
      it->second->second = record;
      impl_->record_bytes += Impl::BytesOf(it->second->second);
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      continue;
    }
    impl_->lru.emplace_front(key, record);
    impl_->index.emplace(key, impl_->lru.begin());
    impl_->record_bytes += Impl::BytesOf(impl_->lru.front().second);
  }
  impl_->EvictRecords();
  impl_->Report();
}

size_t RenderMemo::size() const {
  MutexLock lock(&impl_->mu);
  return impl_->lru.size();
}

void RenderMemo::PutText(std::string text) {
  if (text.size() > impl_->options.max_text_bytes) return;
  MutexLock lock(&impl_->mu);
  for (auto it = impl_->texts.begin(); it != impl_->texts.end(); ++it) {
    if (**it != text) continue;  // kept already (a repeated request): only refresh it
    impl_->texts.splice(impl_->texts.begin(), impl_->texts, it);
    return;
  }
  // A kept text that is a prefix of this one shares no more with any later text than this one
  // does: a conversation that grows keeps its latest render, not one per turn.
  for (auto it = impl_->texts.begin(); it != impl_->texts.end();) {
    const std::string& kept = **it;
    if (kept.size() < text.size() && text.compare(0, kept.size(), kept) == 0) {
      impl_->text_bytes -= kept.size();
      it = impl_->texts.erase(it);
    } else {
      ++it;
    }
  }
  impl_->text_bytes += text.size();
  impl_->texts.push_front(std::make_shared<const std::string>(std::move(text)));
  impl_->EvictTexts();
  impl_->Report();
}

ClosestText RenderMemo::FindClosestText(std::string_view full) {
  std::vector<std::shared_ptr<const std::string>> texts;
  {
    MutexLock lock(&impl_->mu);
    texts.assign(impl_->texts.begin(), impl_->texts.end());
  }
  ClosestText best;
  for (const auto& t : texts) {
    const uint64_t shared = SharedChars(*t, full);
    if (!best.text || shared > best.shared) best = {t, shared};
  }
  if (best.text) {
    MutexLock lock(&impl_->mu);
    for (auto it = impl_->texts.begin(); it != impl_->texts.end(); ++it) {
      if (*it != best.text) continue;
      impl_->texts.splice(impl_->texts.begin(), impl_->texts, it);
      break;
    }
  }
  return best;
}

size_t RenderMemo::n_texts() const {
  MutexLock lock(&impl_->mu);
  return impl_->texts.size();
}

void RenderMemo::Clear() {
  MutexLock lock(&impl_->mu);
  impl_->lru.clear();
  impl_->index.clear();
  impl_->record_bytes = 0;
  impl_->texts.clear();
  impl_->text_bytes = 0;
  impl_->Report();
}

}  // namespace prefixd::engine
