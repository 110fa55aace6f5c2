// ModelCard: what the router says about a model whose server may not run yet — whether it reads
// images and the window a client should plan for — from its configuration, else from its GGUF's
// header, never by loading it. /v1/models and the router's start log show it; a model's server,
// once it runs, says its context itself (ModelView::n_ctx), which wins.
//
// The context: the model's section's ctx, else the router command line's --ctx, else (0 in
// both: as `serve` does) the trained context in its GGUF's header. The output cap: the
// section's n-predict, else the router's -n. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "router/models_config.h"
#include "util/status.h"

namespace prefixd::router {

enum class ContextSource { kUnknown, kConfigured, kTrained };
// "unknown", "configured", "trained": the names it leaves the process by (the start log).
const char* ContextSourceName(ContextSource source);

struct ModelCard {
  bool reads_images = false;   // a projector is configured (--mmproj)
  int64_t n_ctx = 0;           // tokens one request may hold; 0: unknown until its server runs
  ContextSource n_ctx_from = ContextSource::kUnknown;
  int64_t n_predict = 0;       // its server's -n; 0: none
};

// The router command line's settings, which every model's server gets unless its section sets
// its own. 0: none (the trained context; no output cap).
struct CardDefaults {
  int64_t ctx = 0;
  int64_t n_predict = 0;
};

// A GGUF's trained context (0: the file does not say); an error when the file cannot be read.
using TrainedContextFn = std::function<Result<int64_t>(const std::string& path)>;
// Reads it from the file's header (engine/model/gguf_header.h).
Result<int64_t> TrainedContextOf(const std::string& path);

// REQUIRES: spec as MergeSpecs returns it. Calls `trained` only when no context is configured;
// a file it cannot read leaves the context unknown.
ModelCard CardOf(const ModelSpec& spec, const CardDefaults& defaults,
                 const TrainedContextFn& trained);

}  // namespace prefixd::router
