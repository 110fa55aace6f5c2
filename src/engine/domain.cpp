#include "engine/domain.h"

#include <cstdlib>
#include <filesystem>

#include "cache/chain_hash.h"
#include "cache/fingerprint.h"
#include "util/env.h"

namespace prefixd::engine {

namespace {

// Bump when the rows payload or snapshot byte format changes: old entries stop matching.
constexpr uint64_t kCodecVersion = 2;  // 2: Snapshot payloads end in a cell layout

// llama.cpp stores a quantized K or V rotated (a Hadamard transform, smoothing outliers before
// quantization) unless LLAMA_ATTN_ROT_DISABLE is a nonzero number (read as it reads it, with
// atoi): a record saved one way holds other values than the other way reads.
bool AttentionRotationDisabled() {
  const char* v = std::getenv("LLAMA_ATTN_ROT_DISABLE");
  return v != nullptr && std::atoi(v) != 0;
}

Digest LayoutFingerprint(const Model& model, const ContextOptions& ctx, StateMode mode) {
  Sha256 h;
  h.Update("prefixd-layout");
  h.UpdateU64(kCodecVersion);
  h.Update(model.arch());
  h.Update(MemoryLayoutName(model.layout()));
  if (mode != StateMode::kSliced) h.Update(StateModeName(mode));  // sliced: as before
  h.Update(KvTypeName(ctx.type_k));
  h.Update(KvTypeName(ctx.type_v));
  if (IsQuantized(ctx.type_k) || IsQuantized(ctx.type_v)) {  // f16 domains stay as they were
    h.Update(AttentionRotationDisabled() ? "attn-rot-off" : "attn-rot-on");
  }
  h.UpdateU64(ctx.flash_attn ? 1 : 0);  // decides the V layout (transposed or not)
  h.UpdateU64(uint64_t(model.n_swa()));
  if (!ctx.swa_full && model.n_swa() > 0) {  // full-size domains stay as they were
    h.Update("swa-ring");
    h.UpdateU64(ctx.n_ubatch);  // the ring's size: the window plus a ubatch
  }
  for (const char* key : {"rope.freq_base", "rope.scaling.type", "rope.scaling.factor"}) {
    h.Update(model.Meta(model.arch() + "." + key));
    h.Update("|");
  }
  return h.Finish();
}

}  // namespace

Result<DomainFingerprints> ComputeFingerprints(const Model& model, const ContextOptions& ctx,
                                               const EngineOptions& options, StateMode mode) {
  DomainFingerprints fp;
  std::string memo_path;
  if (!options.cache_dir.empty()) {
    (void)Env::Default()->CreateDirs(options.cache_dir);  // a memo not saved costs a re-hash
    memo_path = options.cache_dir + "/fingerprints.tsv";
  } else {
    memo_path = std::filesystem::temp_directory_path() / "prefixd-fingerprints.tsv";
  }
  cache::FingerprintMemo memo(memo_path);
  PREFIXD_ASSIGN_OR_RETURN(fp.model, cache::FileFingerprint(model.path(), memo));
  fp.layout = LayoutFingerprint(model, ctx, mode);
  return fp;
}

Digest DomainFor(const DomainFingerprints& fp, const std::string& tenant_salt) {
  return cache::DomainRoot({fp.model, fp.layout, tenant_salt});
}

}  // namespace prefixd::engine
