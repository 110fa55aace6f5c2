// Engine: the cache-aware inference pipeline the server and the CLI talk to.
//
// A request's way through (docs/architecture.md): mark capture points (memoized: only new
// messages are rendered), pick the Slot that holds the longest prefix of the prompt (a session continuing
// keeps it: nothing restored), else restore the longest restorable prefix (RAM tier, then disk,
// then the shared tier), prefill the rest in chunks that end exactly at capture points (taking
// snapshots there and slicing the new blocks from one ranged read of the new rows), generate,
// publish. Any failed check drops the entry and prefills cold.
//
// Thread-safety: every public method may be called from any thread. Start() returns at once
// (Complete() blocks until its request ends); requests run concurrently on n_slots slots with
// continuous batching on one scheduler thread that owns the llama context. Owns the Model,
// the Context, the PrefixCache and the DiskStore.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/completion.h"
#include "engine/options.h"
#include "engine/request.h"
#include "engine/stats.h"
#include "util/status.h"

namespace prefixd::engine {

class Engine {
 public:
  // Loads the model and starts the scheduler. InvalidArgument when the model cannot serve
  // causal completions (Model::Load says why) or the options are out of range.
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();

  // Renders an OpenAI messages array (JSON text) with the chat template and marks the
  // message boundaries as capture points. Remembers what it learnt of each prefix (a bounded
  // RenderMemo), so a continuing conversation renders only its new messages again.
  // `options` go into the full render and every prefix render alike; the Prompt's output says
  // how the reply is constrained and read. InvalidArgument when the messages or the options
  // do not render.
  Result<Prompt> PrepareChat(const std::string& messages_json,
                             const ChatRenderOptions& options) const;
  Result<Prompt> PrepareChat(const std::string& messages_json, const std::string& tools_json,
                             bool add_generation_prompt = true) const;
  // Tokenizes raw completion text (special tokens parsed); the chat format's special tokens
  // (<|im_start|>, <|im_end|>) mark the capture points.
  // `memo_scope`: as ChatRenderOptions::memo_scope.
  Result<Prompt> PrepareText(const std::string& text, const std::string& memo_scope = "") const;

  // Queues one request and returns it running: its text and its result arrive through the
  // Completion (engine/completion.h), on no thread of the caller's. ResourceExhausted when the
  // queue is full (the server answers 503), InvalidArgument when the prompt does not fit the
  // context. The tier reads that find its cached prefix on disk or in the shared tier run
  // here, on the calling thread, before it queues (Usage::prefetch_ms).
  Result<std::shared_ptr<Completion>> Start(CompletionRequest request);
  // Start, then Drain (engine/completion.h): blocks until the request ends, handing each text
  // piece to `on_piece` on the calling thread.
  Result<CompletionResult> Complete(CompletionRequest request, const PieceFn& on_piece = {});

  std::vector<Token> Tokenize(const std::string& text) const;
  std::string Detokenize(const std::vector<Token>& tokens) const;
  const std::string& model_name() const;
  // The context each slot has, after the cap (EngineOptions::n_ctx_per_slot).
  uint32_t n_ctx_per_slot() const;
  // requested by server: the vocabulary size, so that token ids from clients (/detokenize,
  // /v1/completions with a token-array prompt) are checked before they reach llama.cpp.
  int32_t n_vocab() const;
  EngineStats GetStats() const;
  Status ClearCache();
  // The prefix trees the tiers hold, merged over RAM and disk: every domain's, or only the
  // domain of `*tenant_salt` when it is not null. O(entries + disk records); reads no payload.
  std::vector<CachedPrefix> ListCachedPrefixes(const std::string* tenant_salt) const;
  // The domain id (CachedPrefix::domain, SlotView::domain) of a tenant salt's entries.
  std::string DomainIdOf(const std::string& tenant_salt) const;
  // Evicts the prefix tree `root` of `domain` (CachedPrefix's hex ids) from RAM and disk; idle
  // slots forget their sequences before the next request (as after ClearCache), so nothing
  // evicted is reused. NotFound when no tier holds it.
  Result<PrefixEviction> EvictCachedPrefix(const std::string& domain, const std::string& root);
  // Waits until everything published so far is written to the disk and the shared tier (or
  // dropped there).
  void FlushCache();

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
