#include "router/model_card.h"

#include <algorithm>

#include "engine/model/gguf_header.h"

namespace prefixd::router {

const char* ContextSourceName(ContextSource source) {
  switch (source) {
    case ContextSource::kConfigured: return "configured";
    case ContextSource::kTrained: return "trained";
    case ContextSource::kUnknown: break;
  }
  return "unknown";
}

Result<int64_t> TrainedContextOf(const std::string& path) {
  PREFIXD_ASSIGN_OR_RETURN(engine::GgufHeader header, engine::ReadGgufHeader(path));
  return header.n_ctx_train;
}

ModelCard CardOf(const ModelSpec& spec, const CardDefaults& defaults,
                 const TrainedContextFn& trained) {
  ModelCard card;
  card.reads_images = !spec.mmproj.empty();
  card.n_predict = spec.n_predict >= 0 ? spec.n_predict : defaults.n_predict;
  const int64_t ctx = spec.ctx >= 0 ? spec.ctx : defaults.ctx;
  if (ctx > 0) {
    card.n_ctx = ctx;
    card.n_ctx_from = ContextSource::kConfigured;
    return card;
  }
  // As `serve` does with --ctx 0: the trained length, at least 16.
  if (Result<int64_t> n = trained(spec.path); n.ok() && *n > 0) {
    card.n_ctx = std::max<int64_t>(*n, 16);
    card.n_ctx_from = ContextSource::kTrained;
  }
  return card;
}

}  // namespace prefixd::router
