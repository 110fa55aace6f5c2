// Backend: the few engine calls the HTTP routes need, as an interface so that the routes,
// validation, streaming, metrics and admission logic can be tested against a fake.
// NewEngineBackend() adapts the real engine::Engine (engine_backend.cpp); the contract of every
// method is the engine's (engine/engine.h).
//
// Thread-safety: every method may be called from any thread; Start() returns at once,
// Complete() blocks its caller.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace prefixd::server {

using engine::CompletionRequest;
using engine::CompletionResult;
using engine::EngineStats;
using engine::Prompt;
using engine::Token;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Result<Prompt> PrepareChat(const std::string& messages_json,
                                     const engine::ChatRenderOptions& options) const = 0;
  // The plain form: tools only.
  Result<Prompt> PrepareChat(const std::string& messages_json, const std::string& tools_json,
                             bool add_generation_prompt) const {
    engine::ChatRenderOptions options;
    options.tools_json = tools_json;
    options.add_generation_prompt = add_generation_prompt;
    return PrepareChat(messages_json, options);
  }
  // `memo_scope`: the tenant's salt (ChatRenderOptions::memo_scope).
  virtual Result<Prompt> PrepareText(const std::string& text,
                                     const std::string& memo_scope) const = 0;
  // The request running (Engine::Start). ResourceExhausted when the queue is full;
  // InvalidArgument when the prompt does not fit the context.
  virtual Result<std::shared_ptr<engine::Completion>> Start(CompletionRequest request) = 0;
  // Start, then wait for the end (engine::Drain).
  Result<CompletionResult> Complete(CompletionRequest request) {
    PREFIXD_ASSIGN_OR_RETURN(std::shared_ptr<engine::Completion> c, Start(std::move(request)));
    return engine::Drain(*c);
  }
  virtual std::string Detokenize(const std::vector<Token>& tokens) const = 0;
  virtual std::string model_name() const = 0;
  virtual uint32_t n_ctx_per_slot() const = 0;
  virtual int32_t n_vocab() const = 0;
  virtual EngineStats GetStats() const = 0;
  virtual Status ClearCache() = 0;
  // nullptr: every domain's prefix trees; else only those of that tenant salt's domain.
  virtual std::vector<engine::CachedPrefix> ListCachedPrefixes(
      const std::string* tenant_salt) const = 0;
  virtual Result<engine::PrefixEviction> EvictCachedPrefix(const std::string& domain,
                                                           const std::string& root) = 0;
  // The domain id of a tenant salt's entries and sessions (CachedPrefix::domain).
  virtual std::string DomainIdOf(const std::string& tenant_salt) const = 0;
};

// Wraps the real engine. REQUIRES: engine is not null.
std::unique_ptr<Backend> NewEngineBackend(std::unique_ptr<engine::Engine> engine);

}  // namespace prefixd::server
