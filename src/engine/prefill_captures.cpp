#include "engine/prefill_captures.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>

namespace prefixd::engine {

CallCaptures PrefillCaptures::SetCallCaptures(const Slot& slot, int32_t stop) {
  CallCaptures out{slot.run.next_capture, 0};
  if (!capture_in_call_ || io_ == nullptr) return out;
  std::vector<int32_t> inside;
  for (size_t i = slot.run.next_capture;
       i < slot.run.captures.size() && slot.run.captures[i].pos < stop; ++i) {
    inside.push_back(slot.run.captures[i].pos);
  }
  const size_t cap = size_t(std::max(ctx_.CallCaptureCapacity(), 0));
  const size_t skip = inside.size() > cap ? inside.size() - cap : 0;
  out.first += skip;
  if (inside.size() > skip) {
    out.set = ctx_.SetCallCaptures(slot.seq, std::span<const int32_t>(inside).subspan(skip));
  }
  return out;
}

void PrefillCaptures::ClearCallCaptures(const Slot& slot, const CallCaptures& in_call) {
  if (in_call.set > 0) ctx_.SetCallCaptures(slot.seq, {});
}

std::vector<Status> PrefillCaptures::CaptureThrough(Slot& slot, int32_t stop,
                                                    const CallCaptures& in_call) {
  std::vector<Status> failed;
  SlotRun& run = slot.run;
  const Clock::time_point t_capture = Clock::now();
  const int32_t captured_before = run.result.usage.captures;
  for (; io_ && run.next_capture < run.captures.size() && run.captures[run.next_capture].pos <= stop;
       ++run.next_capture) {
    const CapturePoint& point = run.captures[run.next_capture];
    const size_t k = run.next_capture;
    const bool kept = k >= in_call.first && k < in_call.first + size_t(in_call.set);
    if (point.pos < stop && !kept && capture_in_call_) continue;  // past the capacity
    Status cst = io_->Capture(slot, point, point.pos < stop && kept ? int32_t(k - in_call.first) : -1);
    run.result.usage.captures += cst.ok();
    if (!cst.ok()) failed.push_back(std::move(cst));
  }
  if (run.result.usage.captures > captured_before) {
    run.result.usage.capture_ms += MillisSince(t_capture);
  }
  ClearCallCaptures(slot, in_call);
  return failed;
}

std::vector<Status> PrefillCaptures::CaptureLastCall(Slot& slot) {
  if (std::optional<CallCaptures> in_call = std::exchange(slot.run.last_call, std::nullopt)) {
    return CaptureThrough(slot, slot.run.pos, *in_call);
  }
  return {};
}

void PrefillCaptures::DropLastCall(Slot& slot) {
  std::optional<CallCaptures> in_call = std::exchange(slot.run.last_call, std::nullopt);
  if (in_call) ClearCallCaptures(slot, *in_call);
}

}  // namespace prefixd::engine
