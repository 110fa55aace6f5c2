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

#include "cache/stats.h"

namespace prefixd::cache {

const char* InsertOutcomeName(InsertOutcome outcome) {
  switch (outcome) {
    case InsertOutcome::kInserted: return "inserted";
    case InsertOutcome::kAlreadyPresent: return "already_present";
    case InsertOutcome::kRefusedTooLarge: return "refused_too_large";
    case InsertOutcome::kRefusedNoRoom: return "refused_no_room";
    case InsertOutcome::kRefusedNoParent: return "refused_no_parent";
    case InsertOutcome::kRefusedInvalid: return "refused_invalid";
    case InsertOutcome::kRefusedConflict: return "refused_conflict";
  }
  return "unknown";
}

}  // namespace prefixd::cache
