// FakeBackend: a Backend for the server's unit tests (never linked into prefixd).
// Tokens are bytes (n_vocab 256); the reply is a fixed string sent one byte per piece, with an
// optional delay, up to the first stop string; the "cache" reports as cached the longest prefix
// shared with an earlier prompt of the same tenant salt. Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "server/backend.h"
#include "util/hash.h"

namespace prefixd::server {

class FakeBackend : public Backend {
 public:
  std::string reply = "Hello, world!";
  std::chrono::milliseconds piece_delay{0};
  uint32_t n_ctx = 256;
  std::atomic<bool> queue_full{false};
  std::atomic<int> cancelled{0};
  std::atomic<int> completions{0};

  engine::OutputFormat output;            // what PrepareChat's prompts say of the reply
  // The options of the last PrepareChat (read them only while no request runs).
  mutable engine::ChatRenderOptions last_options;

  using Backend::PrepareChat;
  Result<Prompt> PrepareChat(const std::string& messages_json,
                             const engine::ChatRenderOptions& options) const override {
    if (messages_json.find("\"bad-template\"") != std::string::npos) {
      return Status::InvalidArgument("chat template failed on the messages");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_options = options;
    }
    auto p = PrepareText(messages_json + options.tools_json, options.memo_scope);
    if (p.ok()) p->output = output;
    return p;
  }
  Result<Prompt> PrepareText(const std::string& text, const std::string&) const override {
    Prompt p;
    for (unsigned char c : text) p.tokens.push_back(Token(c));
    return p;
  }
  ~FakeBackend() override {
    for (std::thread& t : producers_) t.join();
  }
  // Produces the reply on a thread of its own (the real engine's scheduler thread stands here).
  Result<std::shared_ptr<engine::Completion>> Start(CompletionRequest request) override {
    if (queue_full) return Status::ResourceExhausted("queue full (64 waiting)");
    ++completions;
    auto completion = std::make_shared<engine::Completion>();
    std::lock_guard<std::mutex> lock(mu_);
    producers_.emplace_back([this, completion, req = std::move(request)] {
      completion->Finish(Produce(req, *completion));
    });
    return completion;
  }
  std::string Detokenize(const std::vector<Token>& tokens) const override {
    std::string s;
    for (Token t : tokens) s += char(t);
    return s;
  }
  std::string model_name() const override { return "fake-model"; }
  uint32_t n_ctx_per_slot() const override { return n_ctx; }
  int32_t n_vocab() const override { return 256; }
  EngineStats GetStats() const override {
    EngineStats s;
    s.requests = uint64_t(completions.load());
    s.misses_by_reason[engine::CacheMiss::kNoEntry] = 1;
    s.bytes_by_tier[engine::CacheTier::kRam] = 1234;
    s.ram_budget_bytes = 4096;
    s.disk_quota_bytes = 8192;
    s.disk_records = 3;
    s.bytes_by_tier[engine::CacheTier::kDisk] = 7000;
    s.disk_index_bytes = 500;
    s.disk_records_by_kind = {{engine::RecordKind::kBlockRows, 2}, {engine::RecordKind::kSnapshot, 1}};
    s.memory_layout = "attention";
    s.block_size = 16;
    s.buffer_pool.kept_bytes = 3 << 20;
    s.buffer_pool.takes = 5;
    s.buffer_pool.reused = 2;
    s.slots = {engine::SlotView{true, 40, "00000000000000aa", DomainIdOf("")},
               engine::SlotView{}};
    return s;
  }
  std::string DomainIdOf(const std::string& tenant_salt) const override {
    return DigestHex(Sha256Of(tenant_salt), 8);
  }
  // One prefix tree per distinct prompt: domain = the salt's first 16 hex digits of SHA-256,
  // root = the prompt's.
  std::vector<engine::CachedPrefix> ListCachedPrefixes(
      const std::string* tenant_salt) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<engine::CachedPrefix> out;
    for (const auto& [salt, tokens] : seen_) {
      if (tenant_salt != nullptr && salt != *tenant_salt) continue;
      engine::CachedPrefix p = PrefixOf(salt, tokens);
      if (std::none_of(out.begin(), out.end(), [&](const auto& q) { return q.root == p.root; })) {
        out.push_back(p);
      }
    }
    return out;
  }
  Result<engine::PrefixEviction> EvictCachedPrefix(const std::string& domain,
                                                   const std::string& root) override {
    std::lock_guard<std::mutex> lock(mu_);
    engine::PrefixEviction ev;
    std::erase_if(seen_, [&](const auto& e) {
      engine::CachedPrefix p = PrefixOf(e.first, e.second);
      bool hit = p.domain == domain && p.root == root;
      ev.ram_entries += hit ? 1 : 0;
      return hit;
    });
    if (ev.ram_entries == 0) return Status::NotFound("no cached prefix " + domain + "/" + root);
    return ev;
  }
  Status ClearCache() override {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.clear();
    return Status::OK();
  }
  std::string last_salt() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_salt_;
  }
  std::vector<std::string> last_stop() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_stop_;
  }
  std::string last_grammar() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_grammar_;
  }

 private:
  CompletionResult Produce(const CompletionRequest& request, engine::Completion& completion) {
    CompletionResult r;
    r.usage.prompt_tokens = int32_t(request.prompt.tokens.size());
    r.usage.cached_tokens = CachedPrefix(request);
    r.usage.evaluated_tokens = r.usage.prompt_tokens - r.usage.cached_tokens;
    r.cache.tier = r.usage.cached_tokens > 0 ? engine::CacheTier::kRam : engine::CacheTier::kNone;
    if (r.usage.cached_tokens == 0) r.cache.miss = engine::CacheMiss::kNoEntry;
    r.finish_reason = engine::FinishReason::kLength;
    for (int i = 0; i < request.max_tokens; ++i) {
      if (size_t(i) >= reply.size()) {
        r.finish_reason = engine::FinishReason::kStop;
        break;
      }
      if (std::string s = StopAt(request.stop, size_t(i)); !s.empty()) {
        r.finish_reason = engine::FinishReason::kStop;
        r.stop_word = s;
        break;
      }
      if (piece_delay.count() > 0) std::this_thread::sleep_for(piece_delay);
      std::string piece(1, reply[size_t(i)]);
      if (!completion.Put(piece)) {
        r.finish_reason = engine::FinishReason::kCancelled;
        ++cancelled;
        break;
      }
      r.text += piece;
      r.tokens.push_back(Token((unsigned char)piece[0]));
    }
    r.usage.completion_tokens = int32_t(r.tokens.size());
    if (request.sampling.top_logprobs >= 0) AddLogprobs(request.sampling.top_logprobs, &r);
    std::lock_guard<std::mutex> lock(mu_);
    last_salt_ = request.tenant_salt;
    last_stop_ = request.stop;
    last_grammar_ = request.sampling.grammar.gbnf;
    return r;
  }

  // The stop string that the reply starts at `i`, or "".
  std::string StopAt(const std::vector<std::string>& stop, size_t i) const {
    for (const std::string& s : stop) {
      if (!s.empty() && reply.compare(i, s.size(), s) == 0) return s;
    }
    return "";
  }

  // Each token: logprob -0.5, then `n` alternatives with -1, -2, ...
  static void AddLogprobs(int n, CompletionResult* r) {
    for (Token t : r->tokens) {
      engine::TokenLogprobs lp;
      lp.chosen = {t, std::string(1, char(t)), -0.5f};
      for (int i = 0; i < n; ++i) lp.top.push_back({Token(i), std::string(1, char('a' + i)), -1.0f - i});
      r->logprobs.push_back(std::move(lp));
    }
  }

  static engine::CachedPrefix PrefixOf(const std::string& salt, const std::vector<Token>& tokens) {
    engine::CachedPrefix p;
    p.domain = DigestHex(Sha256Of(salt), 8);
    std::string text(tokens.begin(), tokens.end());
    p.root = DigestHex(Sha256Of(text), 8);
    p.n_tokens = tokens.size();
    p.used_unix_ms = 1;
    p.ram = {true, 1, 0, 0, tokens.size()};
    return p;
  }

  int32_t CachedPrefix(const CompletionRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = 0;
    for (const auto& [salt, tokens] : seen_) {
      if (salt != req.tenant_salt) continue;
      auto mm = std::mismatch(tokens.begin(), tokens.end(), req.prompt.tokens.begin(),
                              req.prompt.tokens.end());
      best = std::max(best, size_t(mm.first - tokens.begin()));
    }
    best = std::min(best, req.prompt.tokens.empty() ? 0 : req.prompt.tokens.size() - 1);
    seen_.emplace_back(req.tenant_salt, req.prompt.tokens);
    return int32_t(best);
  }

  mutable std::mutex mu_;
  std::vector<std::pair<std::string, std::vector<Token>>> seen_;
  std::string last_salt_;
  std::vector<std::string> last_stop_;
  std::string last_grammar_;
  std::vector<std::thread> producers_;  // guarded by mu_
};

}  // namespace prefixd::server
