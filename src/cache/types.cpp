#include "cache/types.h"

#include "util/buffer_pool.h"

namespace prefixd::cache {

Payload::~Payload() { BufferPool::Shared().Give(std::move(bytes)); }

const char* MissReasonName(MissReason reason) {
  switch (reason) {
    case MissReason::kNone: return "none";
    case MissReason::kNoEntry: return "no_entry";
    case MissReason::kDiverged: return "diverged";
    case MissReason::kNoSnapshot: return "no_snapshot";
    case MissReason::kEvicted: return "evicted";
    case MissReason::kVerificationFailed: return "verification_failed";
    case MissReason::kNotMissed: return "";
    case MissReason::kDisabled: return "disabled";
    case MissReason::kRestoreFailed: return "restore_failed";
  }
  return "unknown";
}

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone: return "none";
    case Tier::kSlot: return "slot";
    case Tier::kRam: return "ram";
    case Tier::kDisk: return "disk";
    case Tier::kRemote: return "remote";
  }
  return "none";
}

}  // namespace prefixd::cache
