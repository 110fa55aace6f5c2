#include "engine/engine.h"

#include <algorithm>

#include "cache/types.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/capture_points.h"
#include "engine/chat/prefix_renders_ahead.h"
#include "engine/chat/render_memo.h"
#include "engine/chat/token_memo.h"
#include "engine/scheduler.h"
#include "util/stopwatch.h"
#include "util/log.h"

namespace prefixd::engine {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "stop";
}

const char* CacheWorkName(CacheWork work) {
  switch (work) {
    case CacheWork::kDomain: return "domain";
    case CacheWork::kCapture: return "capture";
    case CacheWork::kPublish: return "publish";
  }
  return "";
}

const char* PrefixRoleName(PrefixRole role) {
  switch (role) {
    case PrefixRole::kPrompt: return "prompt";
    case PrefixRole::kMtpHead: return "mtp_head";
    case PrefixRole::kDraftModel: return "draft_model";
  }
  return "prompt";
}

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<Model> model;
  std::unique_ptr<ChatTemplate> chat;
  RenderMemo render_memo;  // what the capture points know of earlier requests' prefixes
  std::unique_ptr<TokenMemo> token_memo;  // the tokens of earlier prompts' pieces
  std::unique_ptr<Projector> projector;  // --mmproj; null: the model reads no images
  std::unique_ptr<Scheduler> scheduler;  // last: stops before what it borrows goes

  Status PrepareImages(const ChatRender& render, const ParsedChat& chat,
                       const ChatRenderOptions& options, PrefixRendersAhead& ahead,
                       Prompt* prompt);
};

namespace {

// 0 (as llama-server's -c 0) becomes the trained length; a context beyond what the model's
// learned position table holds is capped to it, with a log line (llama.cpp would index past
// the table and abort on the first prompt that long).
Status FitContextToModel(const Model& model, uint32_t* n_ctx_per_slot) {
  if (*n_ctx_per_slot == 0) *n_ctx_per_slot = uint32_t(std::max(model.n_ctx_train(), 16));
  const int limit = model.n_pos_max();
  if (limit <= 0 || *n_ctx_per_slot <= uint32_t(limit)) return Status::OK();
  if (limit < 16) {
    return Status::InvalidArgument("model architecture '" + model.arch() + "' has learned " +
                                   "positions for only " + std::to_string(limit) + " tokens");
  }
  Logf(LogLevel::kWarning,
       "context capped at %d tokens per slot (requested %u): model architecture '%s' has "
       "learned absolute positions for %d tokens only",
       limit, *n_ctx_per_slot, model.arch().c_str(), limit);
  *n_ctx_per_slot = uint32_t(limit);
  return Status::OK();
}

// A projector, when one is asked for: the speculation types that decode the prompt's tokens in
// another context (a draft model, the MTP head) would meet image rows there, so they are refused
// beside it.
Status LoadProjector(const Model& model, const EngineOptions& options,
                     std::unique_ptr<Projector>* out) {
  if (options.projector.path.empty()) return Status::OK();
  for (SpecType t : options.spec.types) {
    if (t == SpecType::kDraft || t == SpecType::kDraftMtp) {
      return Status::InvalidArgument("--mmproj with --spec-type draft or draft-mtp: a draft "
                                     "context would meet the images' rows; choose one");
    }
  }
  PREFIXD_ASSIGN_OR_RETURN(*out, Projector::Load(model, options.projector));
  Logf(LogLevel::kInfo, "images: projector %s (%s), %d-wide embeddings", options.projector.path.c_str(),
       (*out)->type().c_str(), (*out)->n_embd());
  return Status::OK();
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() {
  if (impl_ && impl_->projector) impl_->projector->SetStores({});  // the stores go first
}

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.n_slots == 0 || options.block_size == 0 ||
      (options.n_ctx_per_slot != 0 && options.n_ctx_per_slot < 16)) {
    return Status::InvalidArgument("engine: slots, block size and context must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ModelOptions mopt{options.model_path, options.n_gpu_layers};
  mopt.devices = DeviceChoice{options.rpc_servers, options.devices};
  mopt.load_mtp = std::find(options.spec.types.begin(), options.spec.types.end(),
                            SpecType::kDraftMtp) != options.spec.types.end();
  PREFIXD_ASSIGN_OR_RETURN(impl->model, Model::Load(mopt));
  PREFIXD_RETURN_IF_ERROR(FitContextToModel(*impl->model, &impl->options.n_ctx_per_slot));
  auto chat = ChatTemplate::Create(*impl->model, options.chat_template);
  if (chat.ok()) {
    impl->chat = std::move(chat).value();
  } else if (!options.chat_template.empty()) {
    return chat.status();  // a template the user chose must work
  }  // a model without a template serves completions only
  impl->token_memo = TokenMemo::ForModel(*impl->model);
  PREFIXD_RETURN_IF_ERROR(LoadProjector(*impl->model, impl->options, &impl->projector));
  PREFIXD_ASSIGN_OR_RETURN(impl->scheduler, Scheduler::Create(*impl->model, impl->options,
                                                              impl->projector.get()));
  if (impl->projector) impl->projector->SetStores(impl->scheduler->LowerStores());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<Prompt> Engine::PrepareChat(const std::string& messages_json, const std::string& tools_json,
                                   bool add_generation_prompt) const {
  ChatRenderOptions ro;
  ro.add_generation_prompt = add_generation_prompt;
  ro.tools_json = tools_json;
  return PrepareChat(messages_json, ro);
}

Result<Prompt> Engine::PrepareChat(const std::string& messages_json,
                                   const ChatRenderOptions& options) const {
  if (!impl_->chat) return Status::InvalidArgument("this model has no chat template");
  Prompt prompt;
  Stopwatch watch;
  RenderReuseScope reuse_renders;
  PREFIXD_ASSIGN_OR_RETURN(ParsedChat chat, impl_->chat->Parse(messages_json, options));
  prompt.times.parse_ms = watch.Lap();
  PrefixRendersAhead ahead(*impl_->chat, chat, impl_->render_memo, reuse_renders);
  PREFIXD_ASSIGN_OR_RETURN(ChatRender render, impl_->chat->RenderWithOutput(chat));
  prompt.times.render_ms = watch.Lap();
  if (!options.images.empty()) {
    PREFIXD_RETURN_IF_ERROR(impl_->PrepareImages(render, chat, options, ahead, &prompt));
    prompt.output = std::move(render.output);
    ResolveOutputTokens(*impl_->model, render.preserved_tokens, &prompt.output);
    return prompt;
  }
  prompt.tokens = impl_->token_memo->Tokenize(render.prompt, options.memo_scope);
  prompt.times.tokenize_ms = watch.Lap();
  auto points = ChatCapturePoints(*impl_->model, *impl_->chat, chat, render.prompt,
                                  prompt.tokens, impl_->render_memo, nullptr, &ahead);
  if (points.ok()) prompt.capture_points = std::move(points).value();
  prompt.times.points_ms = watch.Lap();
  prompt.output = std::move(render.output);
  ResolveOutputTokens(*impl_->model, render.preserved_tokens, &prompt.output);
  return prompt;
}

// The images of a chat (options.images, in marker order) read by the projector, the render
// tokenized around their markers, the capture points found on it, then each marker replaced by
// its image (image_prompt.h). A non-causal image must be one call: one larger than a ubatch is
// refused here, before it queues.
Status Engine::Impl::PrepareImages(const ChatRender& render, const ParsedChat& chat,
                                   const ChatRenderOptions& options, PrefixRendersAhead& ahead,
                                   Prompt* prompt) {
  if (!projector) return Status::InvalidArgument("this model reads no images (serve it with --mmproj)");
  Stopwatch watch;
  std::vector<ImageInsert> inserts;
  for (size_t i = 0; i < options.images.size(); ++i) {
    Result<ImageInsert> ins = projector->Prepare(options.images[i], options.memo_scope);
    if (!ins.ok()) {
      return Status::InvalidArgument("image " + std::to_string(i + 1) + ": " +
                                     ins.status().message());
    }
    for (const ImagePiece& piece : ins->pieces) {
      if (!piece.image || !piece.image->non_causal() ||
          uint32_t(piece.image->n_tokens()) <= this->options.n_ubatch) {
        continue;
      }
      return Status::InvalidArgument(
          "image " + std::to_string(i + 1) + " is " + std::to_string(piece.image->n_tokens()) +
          " tokens, decoded in one call: more than the ubatch of " +
          std::to_string(this->options.n_ubatch) + " (raise --ubatch-size, or lower "
          "--image-max-tokens)");
    }
    inserts.push_back(std::move(*ins));
  }
  prompt->times.images_ms = watch.Lap();
  const PieceTokenizer tokenize = [&](std::string_view piece, bool first) {
    return token_memo->Tokenize(piece, options.memo_scope, first);
  };
  PREFIXD_ASSIGN_OR_RETURN(MarkedTokens marked,
                           TokenizeAroundMarkers(tokenize, render.prompt, inserts.size()));
  prompt->times.tokenize_ms = watch.Lap();
  auto points = ChatCapturePoints(*model, *this->chat, chat, render.prompt, marked.tokens,
                                  render_memo, nullptr, &ahead);
  if (points.ok()) prompt->capture_points = std::move(points).value();
  ExpandImages(marked, inserts, &prompt->tokens, &prompt->images, &prompt->capture_points);
  prompt->times.points_ms = watch.Lap();
  return Status::OK();
}

Result<Prompt> Engine::PrepareText(const std::string& text, const std::string& memo_scope) const {
  Prompt prompt;
  Stopwatch watch;
  prompt.tokens = impl_->token_memo->Tokenize(text, memo_scope);
  prompt.times.tokenize_ms = watch.Lap();
  prompt.capture_points = TextCapturePoints(*impl_->model, prompt.tokens);
  prompt.times.points_ms = watch.Lap();
  return prompt;
}

Result<std::shared_ptr<Completion>> Engine::Start(CompletionRequest request) {
  return impl_->scheduler->Start(std::move(request));
}

Result<CompletionResult> Engine::Complete(CompletionRequest request, const PieceFn& on_piece) {
  PREFIXD_ASSIGN_OR_RETURN(std::shared_ptr<Completion> completion, Start(std::move(request)));
  return Drain(*completion, on_piece);
}

std::vector<Token> Engine::Tokenize(const std::string& text) const {
  return impl_->model->Tokenize(text, true);
}

std::string Engine::Detokenize(const std::vector<Token>& tokens) const {
  return impl_->model->Detokenize(tokens, true);
}

const std::string& Engine::model_name() const { return impl_->options.model_path; }
int32_t Engine::n_vocab() const { return impl_->model->n_vocab(); }
uint32_t Engine::n_ctx_per_slot() const { return impl_->options.n_ctx_per_slot; }
EngineStats Engine::GetStats() const {
  EngineStats s = impl_->scheduler->GetStats();
  if (impl_->projector) {
    const ProjectorStats p = impl_->projector->stats();
    s.reads_images = true;
    s.images_prepared = p.images_prepared;
    s.images_encoded = p.images_encoded;
    s.image_encoder_hits = p.encoder_hits;
    s.image_encoder_hits_disk = p.encoder_hits_disk;
    s.image_encoder_hits_remote = p.encoder_hits_remote;
    s.image_encoder_bytes = p.cached_bytes;
  }
  return s;
}
Status Engine::ClearCache() { return impl_->scheduler->ClearCache(); }
std::string Engine::DomainIdOf(const std::string& tenant_salt) const {
  return impl_->scheduler->DomainIdOf(tenant_salt);
}

std::vector<CachedPrefix> Engine::ListCachedPrefixes(const std::string* tenant_salt) const {
  return impl_->scheduler->ListCachedPrefixes(tenant_salt);
}
Result<PrefixEviction> Engine::EvictCachedPrefix(const std::string& domain,
                                                 const std::string& root) {
  return impl_->scheduler->EvictCachedPrefix(domain, root);
}
void Engine::FlushCache() { impl_->scheduler->FlushDisk(); }

}  // namespace prefixd::engine
