#include "cache/types.h"

namespace prefixd::cache {

const char* MissReasonName(MissReason reason) {
  switch (reason) {
    case MissReason::kNone: return "none";
    case MissReason::kNoEntry: return "no_entry";
    case MissReason::kDiverged: return "diverged";
    case MissReason::kNoSnapshot: return "no_snapshot";
    case MissReason::kEvicted: return "evicted";
    case MissReason::kVerificationFailed: return "verification_failed";
  }
  return "unknown";
}

}  // namespace prefixd::cache
