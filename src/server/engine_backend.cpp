// The Backend over the real engine: a thin forwarding adapter.
#include "server/backend.h"

namespace prefixd::server {
namespace {

class EngineBackend final : public Backend {
 public:
  explicit EngineBackend(std::unique_ptr<engine::Engine> engine)
      : engine_(std::move(engine)), n_vocab_(engine_->n_vocab()) {}

  using Backend::PrepareChat;
  Result<Prompt> PrepareChat(const std::string& messages_json,
                             const engine::ChatRenderOptions& options) const override {
    return engine_->PrepareChat(messages_json, options);
  }
  Result<Prompt> PrepareText(const std::string& text,
                             const std::string& memo_scope) const override {
    return engine_->PrepareText(text, memo_scope);
  }
  Result<std::shared_ptr<engine::Completion>> Start(CompletionRequest request) override {
    return engine_->Start(std::move(request));
  }
  std::string Detokenize(const std::vector<Token>& tokens) const override {
    return engine_->Detokenize(tokens);
  }
  std::string model_name() const override { return engine_->model_name(); }
  uint32_t n_ctx_per_slot() const override { return engine_->n_ctx_per_slot(); }
  int32_t n_vocab() const override { return n_vocab_; }
  EngineStats GetStats() const override { return engine_->GetStats(); }
  Status ClearCache() override { return engine_->ClearCache(); }
  std::string DomainIdOf(const std::string& tenant_salt) const override {
    return engine_->DomainIdOf(tenant_salt);
  }
  std::vector<engine::CachedPrefix> ListCachedPrefixes(
      const std::string* tenant_salt) const override {
    return engine_->ListCachedPrefixes(tenant_salt);
  }
  Result<engine::PrefixEviction> EvictCachedPrefix(const std::string& domain,
                                                   const std::string& root) override {
    return engine_->EvictCachedPrefix(domain, root);
  }

 private:
  std::unique_ptr<engine::Engine> engine_;
  int32_t n_vocab_;
};

}  // namespace

std::unique_ptr<Backend> NewEngineBackend(std::unique_ptr<engine::Engine> engine) {
  return std::make_unique<EngineBackend>(std::move(engine));
}

}  // namespace prefixd::server
