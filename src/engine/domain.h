// Domain fingerprints: what a cached Block's identity includes besides its tokens — the model's
// weights (content digest, remembered per file identity), everything that changes the KV
// layout or values (KV types, flash attention / V layout, RoPE, SWA window, the state codec's
// version, the architecture's memory layout) and the tenant salt. A different model or setting
// can never hit.
#pragma once

#include <string>

#include "engine/context.h"
#include "engine/options.h"
#include "engine/stats.h"
#include "engine/model/model.h"
#include "util/hash.h"

namespace prefixd::engine {

struct DomainFingerprints {
  Digest model{};
  Digest layout{};
};

// Hashes the model file once (memo in <cache_dir>/fingerprints.tsv when a cache dir is set).
// `mode` is part of the layout fingerprint: sliced and whole-state entries never mix.
Result<DomainFingerprints> ComputeFingerprints(const Model& model, const ContextOptions& ctx,
                                               const EngineOptions& options, StateMode mode);

// The domain root for a tenant: H(model, layout, salt).
Digest DomainFor(const DomainFingerprints& fp, const std::string& tenant_salt);

}  // namespace prefixd::engine
