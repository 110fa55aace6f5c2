// The Backend over the real engine: a thin forwarding adapter.
#include <climits>
#include <exception>

#include "server/backend.h"

namespace prefixd::engine {

// Engine::n_vocab() is declared in engine.h at the server's request. Until engine.cpp defines
// it, this weak definition finds the vocabulary size by bisection on Detokenize, which throws
// std::out_of_range for an id outside the vocabulary (llama_vocab's id_to_token.at()). The
// engine's own (strong) definition replaces it at link time.
__attribute__((weak)) int32_t Engine::n_vocab() const {
  auto valid = [this](Token id) {
    try {
      Detokenize({id});
      return true;
    } catch (const std::exception&) {
      return false;
    }
  };
  if (!valid(0)) return 0;
  int32_t lo = 0, hi = INT32_MAX;  // valid(lo) and !valid(hi)
  while (hi - lo > 1) {
    int32_t mid = lo + (hi - lo) / 2;
    (valid(mid) ? lo : hi) = mid;
  }
  return lo + 1;
}

}  // namespace prefixd::engine

namespace prefixd::server {
namespace {

class EngineBackend final : public Backend {
 public:
  explicit EngineBackend(std::unique_ptr<engine::Engine> engine)
      : engine_(std::move(engine)), n_vocab_(engine_->n_vocab()) {}

  Result<Prompt> PrepareChat(const std::string& messages_json, const std::string& tools_json,
                             bool add_generation_prompt) const override {
    return engine_->PrepareChat(messages_json, tools_json, add_generation_prompt);
  }
  Result<Prompt> PrepareText(const std::string& text) const override {
    return engine_->PrepareText(text);
  }
  Result<CompletionResult> Complete(CompletionRequest request) override {
    return engine_->Complete(std::move(request));
  }
  std::string Detokenize(const std::vector<Token>& tokens) const override {
    return engine_->Detokenize(tokens);
  }
  std::string model_name() const override { return engine_->model_name(); }
  uint32_t n_ctx_per_slot() const override { return engine_->n_ctx_per_slot(); }
  int32_t n_vocab() const override { return n_vocab_; }
  EngineStats GetStats() const override { return engine_->GetStats(); }
  Status ClearCache() override { return engine_->ClearCache(); }

 private:
  std::unique_ptr<engine::Engine> engine_;
  int32_t n_vocab_;
};

}  // namespace

std::unique_ptr<Backend> NewEngineBackend(std::unique_ptr<engine::Engine> engine) {
  return std::make_unique<EngineBackend>(std::move(engine));
}

}  // namespace prefixd::server
