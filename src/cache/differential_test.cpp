// Randomized differential test: PrefixCache against a plain reference model.
//
// The reference records every prefix ever stored (Block rows, Block-end Snapshots, Tails) with
// a weak_ptr to the payload the cache kept. The cache holds exactly one reference to each
// payload it holds, so "still in the cache" is known without asking it: the payload is alive
// with more references than the test itself holds (pinned Matches). Every Lookup must then be
// valid (each payload belongs to an entry whose tokens match the request) and maximal among the
// entries still present; the budget must hold, and pinned payloads must never be evicted.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unordered_map>

#include "cache/cache_test_util.h"
#include "cache/prefix_cache.h"

namespace prefixd::cache {
namespace {

using Match = PrefixCache::Match;
constexpr size_t kB = 4;

struct Config {
  const char* name;
  bool has_rows;
  bool needs_snapshot;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

struct RefEntry {
  std::weak_ptr<const Payload> rows;  // Block rows or Tail rows
  std::weak_ptr<const Payload> snap;  // Block-end Snapshot or Tail Snapshot
  SnapshotKind kind = SnapshotKind::kBlockBoundary;
};

using Key = std::pair<int, std::vector<Token>>;  // (domain index, prefix tokens)

struct PayloadInfo {
  Key key;
  bool is_snapshot = false;
};

class Harness {
 public:
  Harness(Config cfg, uint32_t seed, size_t budget)
      : cfg_(cfg),
        rng_(seed),
        cache_(PrefixCache::Options{kB, budget, cfg.has_rows, cfg.needs_snapshot}),
        budget_(budget) {
    domains_ = {testing::TestDomain(1), testing::TestDomain(2)};
  }

  void Run(int n_ops) {
    for (int i = 0; i < n_ops; ++i) {
      Step();
      CheckInvariants();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  const Stats stats() const { return cache_.GetStats(); }

 private:
  // ---- payload presence --------------------------------------------------------------------
  bool Present(const std::weak_ptr<const Payload>& w) const {
    PayloadRef p = w.lock();
    if (!p) return false;
    auto it = pinned_refs_.find(p.get());
    long held_by_test = 1 + (it == pinned_refs_.end() ? 0 : it->second);
    return p.use_count() > held_by_test;
  }

  PayloadRef NewPayload(const Key& key, bool is_snapshot, size_t lo, size_t hi) {
    uint64_t id = next_id_++;
    info_[id] = PayloadInfo{key, is_snapshot};
    return testing::MakePayload(std::uniform_int_distribution<size_t>(lo, hi)(rng_), id);
  }

  // ---- random requests ---------------------------------------------------------------------
  std::vector<Token> RandomSequence() {
    std::vector<Token> s;
    if (!pool_.empty() && Coin(0.8)) {
      s = pool_[Rand(pool_.size())];
      int what = static_cast<int>(Rand(4));
      if (what == 0 && !s.empty()) s.resize(Rand(s.size() + 1));
      if (what == 1 && !s.empty()) s[Rand(s.size())] = static_cast<Token>(Rand(3));
      if (what >= 2) {
        for (size_t n = Rand(2 * kB + 1); n > 0; --n) s.push_back(static_cast<Token>(Rand(3)));
      }
    } else {
      for (size_t n = Rand(6 * kB + 3); n > 0; --n) s.push_back(static_cast<Token>(Rand(3)));
    }
    if (s.size() > 8 * kB) s.resize(8 * kB);
    if (pool_.size() < 64) {
      pool_.push_back(s);
    } else {
      pool_[Rand(pool_.size())] = s;
    }
    return s;
  }

  size_t Rand(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  bool Coin(double p) { return std::bernoulli_distribution(p)(rng_); }

  // ---- operations --------------------------------------------------------------------------
  void Step() {
    int d = static_cast<int>(Rand(2));
    std::vector<Token> s = RandomSequence();
    size_t r = Rand(100);
    if (r < 30) return InsertBlocks(d, s);
    if (r < 55) return InsertSnapshot(d, s);
    if (r < 92) return LookupAndCheck(d, s, /*pin=*/Rand(10) == 0);
    if (r < 97 && !pins_.empty()) return Unpin(Rand(pins_.size()));
    if (r < 99) return void(cache_.Trim(Rand(budget_)));
    cache_.Clear();  // drops pinned entries from the index too: release the pins
    pins_.clear();
    pinned_refs_.clear();
  }

  void InsertBlocks(int d, const std::vector<Token>& s) {
    size_t n_blocks = s.size() / kB;
    if (n_blocks == 0) return;
    size_t first = Coin(0.5) ? 0 : Rand(n_blocks);
    size_t count = 1 + Rand(n_blocks - first);
    std::vector<std::weak_ptr<const Payload>> ours;
    std::vector<PayloadRef> rows;
    for (size_t k = first; k < first + count; ++k) {
      Key key{d, std::vector<Token>(s.begin(), s.begin() + (k + 1) * kB)};
      rows.push_back(cfg_.has_rows ? NewPayload(key, false, 8, 40) : nullptr);
      ours.push_back(rows.back());
    }
    if (count == 1 && Coin(0.5)) {
      cache_.InsertBlock(domains_[d], std::span(s).first((first + 1) * kB), std::move(rows[0]));
    } else {
      cache_.InsertBlocks(domains_[d], s, first, rows);
    }
    rows.clear();
    for (size_t i = 0; i < count; ++i) {
      Key key{d, std::vector<Token>(s.begin(), s.begin() + (first + i + 1) * kB)};
      if (cfg_.has_rows && Present(ours[i])) blocks_[key].rows = ours[i];
    }
  }

  void InsertSnapshot(int d, const std::vector<Token>& s) {
    if (s.empty()) return;
    size_t p = 1 + Rand(s.size());
    Key key{d, std::vector<Token>(s.begin(), s.begin() + p)};
    bool tail = p % kB != 0;
    if (!tail && !cfg_.needs_snapshot) return;
    PayloadRef snap = cfg_.needs_snapshot ? NewPayload(key, true, 8, 60) : nullptr;
    PayloadRef rows = cfg_.has_rows && tail ? NewPayload(key, false, 8, 20) : nullptr;
    std::weak_ptr<const Payload> wsnap = snap, wrows = rows;
    auto kind = static_cast<SnapshotKind>(Rand(kSnapshotKindCount));
    InsertOutcome o = cache_.InsertSnapshot(domains_[d], key.second, kind, std::move(snap),
                                            std::move(rows));
    RefEntry& e = snaps_[key];
    if (o == InsertOutcome::kInserted) {
      ASSERT_TRUE(cfg_.needs_snapshot ? Present(wsnap) : Present(wrows));
      e = RefEntry{wrows, wsnap, kind};
    } else if (o == InsertOutcome::kAlreadyPresent) {
      ASSERT_TRUE(EntryPresent(e)) << "already present, but the reference has it evicted";
      e.kind = std::max(e.kind, kind);
    } else {
      ASSERT_FALSE(Present(wsnap) || Present(wrows)) << "refused, but kept";
    }
  }

  void Unpin(size_t i) {
    for (const PayloadRef* p : PayloadsOf(pins_[i])) {
      if (--pinned_refs_[p->get()] == 0) pinned_refs_.erase(p->get());
    }
    pins_.erase(pins_.begin() + static_cast<long>(i));
  }

  static std::vector<const PayloadRef*> PayloadsOf(const Match& m) {
    std::vector<const PayloadRef*> out;
    for (const auto& r : m.rows) out.push_back(&r.rows);
    if (m.snapshot) out.push_back(&m.snapshot);
    return out;
  }

  // ---- the reference's answer --------------------------------------------------------------
  bool EntryPresent(const RefEntry& e) const {
    return cfg_.needs_snapshot ? Present(e.snap) : Present(e.rows);
  }

  static bool IsPrefixOf(const std::vector<Token>& key, const std::vector<Token>& s, size_t n) {
    return key.size() <= n && std::equal(key.begin(), key.end(), s.begin());
  }

  static size_t Common(const std::vector<Token>& key, size_t from, const std::vector<Token>& s,
                       size_t limit) {
    size_t n = 0;
    while (from + n < key.size() && from + n < limit && key[from + n] == s[from + n]) ++n;
    return n;
  }

  size_t ExpectedAttention(int d, const std::vector<Token>& s, size_t limit) const {
    size_t a = 0;
    while ((a + 1) * kB <= limit) {
      auto it = blocks_.find(Key{d, std::vector<Token>(s.begin(), s.begin() + (a + 1) * kB)});
      if (it == blocks_.end() || !Present(it->second.rows)) break;
      ++a;
    }
    size_t base = a * kB, extra = 0;
    auto consider = [&](const Key& k, const RefEntry& e, bool is_block) {
      if (k.first != d || !Present(e.rows) || k.second.size() <= base) return;
      size_t start = is_block ? k.second.size() - kB : k.second.size() / kB * kB;
      if (start != base || !IsPrefixOf({k.second.begin(), k.second.begin() + base}, s, limit)) {
        return;
      }
      extra = std::max(extra, Common(k.second, base, s, limit));
    };
    for (const auto& [k, e] : blocks_) consider(k, e, true);
    for (const auto& [k, e] : snaps_) consider(k, e, false);
    return base + extra;
  }

  size_t ExpectedSnapshot(int d, const std::vector<Token>& s, size_t limit) const {
    size_t best = 0;
    for (const auto& [k, e] : snaps_) {
      if (k.first == d && Present(e.snap) && IsPrefixOf(k.second, s, limit)) {
        best = std::max(best, k.second.size());
      }
    }
    return best;
  }

  // ---- checks ------------------------------------------------------------------------------
  void LookupAndCheck(int d, const std::vector<Token>& s, bool pin) {
    size_t max_len = Rand(s.size() + 2);
    size_t limit = std::min(max_len, s.size());
    Match m = cache_.Lookup(domains_[d], s, max_len);
    size_t want = cfg_.needs_snapshot ? ExpectedSnapshot(d, s, limit)
                                      : ExpectedAttention(d, s, limit);
    ASSERT_EQ(m.n_tokens, want) << "limit " << limit << " size " << s.size();
    ASSERT_LE(m.diverged_at, limit);
    ASSERT_GE(m.diverged_at, m.n_tokens);
    ASSERT_EQ(m.reason == MissReason::kNone, m.n_tokens == limit);
    CheckRows(d, s, m);
    CheckSnapshot(d, s, m);
    if (pin && pins_.size() < 4) {
      for (const PayloadRef* p : PayloadsOf(m)) ++pinned_refs_[p->get()];
      pins_.push_back(std::move(m));
    }
  }

  const PayloadInfo& Info(const PayloadRef& p) const {
    return info_.at(testing::PayloadTag(p));
  }

  void CheckRows(int d, const std::vector<Token>& s, const Match& m) const {
    if (!cfg_.has_rows) {
      ASSERT_TRUE(m.rows.empty());
      return;
    }
    size_t pos = 0;
    for (const auto& span : m.rows) {
      ASSERT_TRUE(span.rows);
      const PayloadInfo& info = Info(span.rows);
      ASSERT_FALSE(info.is_snapshot);
      ASSERT_EQ(info.key.first, d);
      const auto& key = info.key.second;
      bool block = key.size() % kB == 0;
      size_t start = block ? key.size() - kB : key.size() / kB * kB;
      ASSERT_EQ(start, pos) << "rows out of order";
      ASSERT_GT(span.n_tokens, 0u);
      ASSERT_LE(start + span.n_tokens, key.size());
      ASSERT_TRUE(std::equal(key.begin(), key.begin() + start + span.n_tokens, s.begin()))
          << "rows of a different prefix";
      if (cfg_.needs_snapshot) ASSERT_EQ(start + span.n_tokens, key.size()) << "sliced";
      pos += span.n_tokens;
    }
    ASSERT_EQ(pos, m.n_tokens);
  }

  void CheckSnapshot(int d, const std::vector<Token>& s, const Match& m) const {
    if (!cfg_.needs_snapshot || m.n_tokens == 0) {
      ASSERT_FALSE(m.snapshot);
      return;
    }
    ASSERT_TRUE(m.snapshot);
    const PayloadInfo& info = Info(m.snapshot);
    ASSERT_TRUE(info.is_snapshot);
    ASSERT_EQ(info.key.first, d);
    ASSERT_EQ(info.key.second.size(), m.n_tokens);
    ASSERT_TRUE(std::equal(info.key.second.begin(), info.key.second.end(), s.begin()));
    ASSERT_EQ(m.kind, snaps_.at(info.key).kind);
  }

  void CheckInvariants() const {
    Status st = cache_.CheckConsistency();
    ASSERT_TRUE(st.ok()) << st.ToString();
    uint64_t present = 0;
    for (const auto& [k, e] : blocks_) {
      if (Present(e.rows)) present += e.rows.lock()->bytes.size();
    }
    for (const auto& [k, e] : snaps_) {
      if (Present(e.rows)) present += e.rows.lock()->bytes.size();
      if (Present(e.snap)) present += e.snap.lock()->bytes.size();
      if (cfg_.has_rows && EntryPresent(e)) AncestorRowsPresent(k);
    }
    Stats st2 = cache_.GetStats();
    ASSERT_EQ(st2.ram.total(), present) << "the cache holds payloads the index cannot reach";
    ASSERT_LE(st2.ram.total(), budget_);
    for (const Match& m : pins_) {
      for (const PayloadRef* p : PayloadsOf(m)) {
        ASSERT_TRUE(Present(*p)) << "a pinned payload was evicted";
      }
    }
  }

  void AncestorRowsPresent(const Key& k) const {
    for (size_t end = kB; end <= k.second.size(); end += kB) {
      Key block{k.first, std::vector<Token>(k.second.begin(), k.second.begin() + end)};
      auto it = blocks_.find(block);
      ASSERT_TRUE(it != blocks_.end() && Present(it->second.rows))
          << "an entry outlived the Block rows it depends on";
    }
  }

  Config cfg_;
  std::mt19937 rng_;
  PrefixCache cache_;
  size_t budget_;
  std::vector<Digest> domains_;
  std::vector<std::vector<Token>> pool_;
  std::map<Key, RefEntry> blocks_, snaps_;
  std::unordered_map<uint64_t, PayloadInfo> info_;
  uint64_t next_id_ = 1;
  std::vector<Match> pins_;
  std::unordered_map<const Payload*, long> pinned_refs_;
};

class DifferentialTest : public ::testing::TestWithParam<Config> {};

TEST_P(DifferentialTest, MatchesTheReference) {
  uint64_t hits = 0, evictions = 0, inserted = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    Harness h(GetParam(), seed, 120 + 60 * seed);
    h.Run(4000);
    if (HasFatalFailure()) return;
    Stats s = h.stats();
    hits += s.hits;
    evictions += s.evictions;
    inserted += s.inserts[static_cast<size_t>(InsertOutcome::kInserted)];
  }
  EXPECT_GT(hits, 300u);
  EXPECT_GT(evictions, 100u);
  EXPECT_GT(inserted, 500u);
}

INSTANTIATE_TEST_SUITE_P(Models, DifferentialTest,
                         ::testing::Values(Config{"attention", true, false},
                                           Config{"hybrid", true, true},
                                           Config{"recurrent", false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace prefixd::cache
