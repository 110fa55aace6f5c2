// PrefillCaptures: the bookkeeping of the capture points a slot's prefill passes. Before each
// prefill call it asks the context to keep the state at the points strictly inside the call
// (where the cache captures Snapshots inside calls); after the call it takes every point up to
// the call's end through CacheIo::Capture, from the sequence at a planned end or from the
// call's captures, and lets those go. The last call's captures wait until the request's first
// token is out (SlotRun::last_call): the sequence holds exactly the prompt until the first
// decode step, and the call keeps what it captured.
//
// Which points there are is the cache's plan (CacheIo::Restore, PlanCaptures: SlotRun::captures);
// the cursor through them is SlotRun::next_capture. A failed capture costs reuse later, never
// correctness: the failures come back for the caller to count.
//
// Thread-safety: the scheduler thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cache_io.h"
#include "engine/context.h"
#include "engine/job.h"
#include "util/status.h"

namespace prefixd::engine {

class PrefillCaptures {
 public:
  // `io` null: the cache is off and nothing is captured. `capture_in_call`: Snapshots are
  // captured inside calls (CacheStack::capture_in_call). REQUIRES: ctx and io outlive this.
  PrefillCaptures(Context& ctx, CacheIo* io, bool capture_in_call)
      : ctx_(ctx), io_(io), capture_in_call_(capture_in_call) {}

  // Before the call [slot.run.pos, stop): asks the context to keep the slot's state at the
  // capture points strictly inside it, in the order the captures come: the last of them where
  // there are more than a call keeps (a chat's tail and its latest messages are what a next turn
  // restores). None where Snapshots end calls.
  CallCaptures SetCallCaptures(const Slot& slot, int32_t stop);
  // The call failed: lets what SetCallCaptures asked for go.
  void ClearCallCaptures(const Slot& slot, const CallCaptures& in_call);
  // After the call that ended at `stop`: takes every capture point up to it (a Snapshot at a
  // planned end read from the sequence, one inside the call from the call's captures, those
  // past its capacity dropped; Tails of pure attention are sliced from the rows at publish
  // time), then lets the call's captures go. Returns the captures that failed.
  std::vector<Status> CaptureThrough(Slot& slot, int32_t stop, const CallCaptures& in_call);
  // The last prefill call's captures (SlotRun::last_call), once: before anything decodes past
  // the prompt.
  std::vector<Status> CaptureLastCall(Slot& slot);
  // A request that fails after its last prefill call lets the call's captures go unread.
  void DropLastCall(Slot& slot);

 private:
  Context& ctx_;
  CacheIo* io_;
  const bool capture_in_call_;
};

}  // namespace prefixd::engine
