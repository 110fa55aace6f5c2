// The engine's views of the cache: merging the tiers' prefix trees, and on a real tiny model,
// the slots' sessions, the listing by tenant and the eviction of one tree from RAM and disk.
#include "engine/prefix_views.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "cache/chain_hash.h"
#include "engine/engine.h"
#include "engine/testgen/test_model.h"
#include "engine/test_temp_dir.h"

namespace prefixd::engine {
namespace {

cache::PrefixSummary Summary(uint8_t domain, uint8_t root, uint64_t n_tokens, uint64_t used) {
  cache::PrefixSummary s;
  s.domain.fill(domain);
  s.root.fill(root);
  s.n_tokens = n_tokens;
  s.blocks = 2;
  s.bytes = 100;
  s.used_unix_ms = used;
  s.created_unix_ms = used - 1;
  return s;
}

TEST(PrefixViewsTest, MergesTheTiersByDomainAndRootNewestFirst) {
  std::vector<cache::PrefixSummary> ram = {Summary(1, 1, 64, 10), Summary(1, 2, 32, 30)};
  std::vector<cache::PrefixSummary> disk = {Summary(1, 1, 96, 20), Summary(2, 1, 32, 5)};
  disk[0].created_unix_ms = 0;  // the disk does not know
  std::vector<CachedPrefix> all = MergePrefixes(ram, disk, nullptr);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].root, "0202020202020202");  // used at 30
  const CachedPrefix& both = all[1];
  EXPECT_EQ(both.domain, "0101010101010101");
  EXPECT_EQ(both.root, "0101010101010101");
  EXPECT_TRUE(both.ram.held);
  EXPECT_TRUE(both.disk.held);
  EXPECT_EQ(both.n_tokens, 96u);
  EXPECT_EQ(both.used_unix_ms, 20u);
  EXPECT_EQ(both.created_unix_ms, 9u);
  EXPECT_FALSE(all[2].ram.held);
  Digest one;
  one.fill(1);
  EXPECT_EQ(MergePrefixes(ram, disk, &one).size(), 2u);
  ASSERT_TRUE(FindPrefix(disk, "0202020202020202", "0101010101010101").has_value());
  EXPECT_FALSE(FindPrefix(disk, "0202020202020202", "0202020202020202").has_value());
}

// Companion trees (the MTP head's, the draft model's) are listed with their role and the
// domain whose prompts they follow, and with that domain's list when it is a tenant's.
TEST(PrefixViewsTest, CompanionTreesAreMarkedAndListedWithTheirPromptsDomain) {
  std::vector<cache::PrefixSummary> ram = {Summary(1, 1, 64, 10), Summary(3, 4, 64, 11),
                                           Summary(2, 1, 32, 5), Summary(5, 6, 32, 4)};
  Digest one, two, three, five;
  one.fill(1);
  two.fill(2);
  three.fill(3);
  five.fill(5);
  Companions companions;
  companions[three] = {PrefixRole::kMtpHead, one};
  companions[five] = {PrefixRole::kDraftModel, two};
  std::vector<CachedPrefix> all = MergePrefixes(ram, {}, nullptr, companions);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].role, PrefixRole::kMtpHead);
  EXPECT_EQ(all[0].of_domain, "0101010101010101");
  EXPECT_EQ(all[1].role, PrefixRole::kPrompt);
  EXPECT_EQ(all[1].of_domain, "");
  EXPECT_EQ(all[3].role, PrefixRole::kDraftModel);
  EXPECT_EQ(all[3].of_domain, "0202020202020202");
  std::vector<CachedPrefix> mine = MergePrefixes(ram, {}, &one, companions);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0].domain, "0303030303030303");
  EXPECT_EQ(mine[1].domain, "0101010101010101");
  EXPECT_EQ(MergePrefixes(ram, {}, &three, companions).size(), 0u);  // not a tenant's domain
  EXPECT_STREQ(PrefixRoleName(PrefixRole::kMtpHead), "mtp_head");
}

TEST(PrefixViewsTest, RootIdIsTheFirstBlocksChainHashOrTheTailKey) {
  Digest domain;
  domain.fill(7);
  std::vector<Token> t = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(PrefixRootId(domain, t, 4),
            ShortId(cache::NextChainHash(domain, std::span<const Token>(t).first(4))));
  EXPECT_EQ(PrefixRootId(domain, std::span<const Token>(t).first(3), 4),
            ShortId(cache::TailKey(domain, std::span<const Token>(t).first(3))));
  EXPECT_EQ(PrefixRootId(domain, {}, 4), "");
}

class EngineInventoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-engine-inventory-" + std::to_string(getpid()));
    std::filesystem::create_directories(testing::RemoveAtExit(dir_.string()));
    const std::string model = (dir_ / "qwen35.gguf").string();
    ASSERT_TRUE(MakeTestModel({"qwen35", "tiny", 3}, model).ok());
    EngineOptions o;
    o.model_path = model;
    o.cache_dir = (dir_ / "cache").string();
    o.block_size = 32;
    o.n_ctx_per_slot = 1024;
    o.n_batch = o.n_ubatch = 256;
    o.n_threads = 2;
    o.ram_budget_bytes = 256ull << 20;
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }

  CompletionResult Run(const std::string& text, const std::string& salt = "") {
    auto prompt = engine_->PrepareText(text);
    EXPECT_TRUE(prompt.ok());
    CompletionRequest req;
    req.prompt = std::move(prompt).value();
    req.max_tokens = 2;
    req.tenant_salt = salt;
    auto r = engine_->Complete(std::move(req));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : CompletionResult{};
  }

  std::filesystem::path dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineInventoryTest, ListsSlotSessionsAndEvictsOneTreeFromBothTiers) {
  std::string system;
  for (int i = 0; i < 120; ++i) system += "word" + std::to_string(i) + " ";
  const std::string text =
      "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n";
  ASSERT_EQ(Run(text).usage.cached_tokens, 0);
  engine_->FlushCache();
  EngineStats s = engine_->GetStats();
  ASSERT_EQ(s.slots.size(), 1u);
  EXPECT_FALSE(s.slots[0].busy);
  EXPECT_GT(s.slots[0].n_tokens, 32u);
  EXPECT_EQ(s.memory_layout, "hybrid");
  EXPECT_EQ(s.block_size, 32u);
  EXPECT_GT(s.disk_quota_bytes, 0u);

  std::vector<CachedPrefix> all = engine_->ListCachedPrefixes(nullptr);
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const CachedPrefix& p) { return p.root == s.slots[0].session; });
  ASSERT_NE(it, all.end()) << "the slot's session is a listed tree";
  EXPECT_TRUE(it->ram.held);
  EXPECT_TRUE(it->disk.held);
  EXPECT_GT(it->ram.blocks, 0u);
  const std::string other = "another tenant";
  EXPECT_TRUE(engine_->ListCachedPrefixes(&other).empty());
  const std::string none;
  EXPECT_EQ(engine_->ListCachedPrefixes(&none).size(), all.size());

  auto ev = engine_->EvictCachedPrefix(it->domain, it->root);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_GT(ev->ram_entries, 0u);
  EXPECT_GT(ev->disk_records, 0u);
  for (const CachedPrefix& p : engine_->ListCachedPrefixes(nullptr)) EXPECT_NE(p.root, it->root);
  EXPECT_TRUE(engine_->EvictCachedPrefix(it->domain, it->root).status().IsNotFound());
  // Neither the slot nor a tier reuses what was evicted.
  EXPECT_LT(Run(text).usage.cached_tokens, 32);
}

TEST_F(EngineInventoryTest, EvictionRightAfterTheAnswerTakesWhatItsWritesStillPin) {
  std::string system;
  for (int i = 0; i < 120; ++i) system += "item" + std::to_string(i) + " ";
  const std::string text =
      "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n";
  Run(text);
  // No FlushCache: the request's disk records may still be queued when the eviction comes.
  const std::string session = engine_->GetStats().slots[0].session;
  std::vector<CachedPrefix> all = engine_->ListCachedPrefixes(nullptr);
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const CachedPrefix& p) { return p.root == session; });
  ASSERT_NE(it, all.end());
  auto ev = engine_->EvictCachedPrefix(it->domain, it->root);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_GT(ev->ram_entries, 0u) << "entries pinned by their queued writes stayed";
  engine_->FlushCache();
  for (const CachedPrefix& p : engine_->ListCachedPrefixes(nullptr)) {
    EXPECT_NE(p.root, session) << "the evicted prefix is still listed";
  }
}

}  // namespace
}  // namespace prefixd::engine
