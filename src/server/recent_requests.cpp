#include "server/recent_requests.h"

#include <algorithm>

namespace prefixd::server {

RecentRequests::RecentRequests(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void RecentRequests::Add(RequestRecord r) {
  MutexLock lock(&mu_);
  if (r.evaluated_tokens > 0) {
    eval_ms_total_ += r.prompt_eval_ms;
    evaluated_total_ += uint64_t(r.evaluated_tokens);
  }
  if (evaluated_total_ > 0) {
    const double per_token = eval_ms_total_ / double(evaluated_total_);
    r.saved_ms = std::max(0.0, r.cached_tokens * per_token - r.restore_ms);
  }
  r.seq = next_seq_++;
  ring_.push_back(std::move(r));
  if (ring_.size() > capacity_) ring_.pop_front();
}

std::vector<RequestRecord> RecentRequests::Since(uint64_t after, const std::string* tenant) const {
  MutexLock lock(&mu_);
  std::vector<RequestRecord> out;
  for (const RequestRecord& r : ring_) {
    if (r.seq > after && (tenant == nullptr || r.tenant == *tenant)) out.push_back(r);
  }
  return out;
}

}  // namespace prefixd::server
