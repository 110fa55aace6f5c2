#include "server/recent_requests.h"

#include <algorithm>
#include <cstddef>

namespace prefixd::server {

RecentRequests::RecentRequests(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void RecentRequests::Add(RequestRecord r) {
  MutexLock lock(&mu_);
  TenantLog& t = tenants_[r.tenant_salt];
  if (r.evaluated_tokens > 0) {
    t.eval_ms_total += r.prompt_eval_ms;
    t.evaluated_total += uint64_t(r.evaluated_tokens);
  }
  if (t.evaluated_total > 0) {
    const double per_token = t.eval_ms_total / double(t.evaluated_total);
    r.saved_ms = std::max(0.0, r.cached_tokens * per_token - r.restore_ms);
  }
  r.seq = next_seq_++;
  t.ring.emplace_back(++t.n_added, std::move(r));
  if (t.ring.size() > capacity_) t.ring.pop_front();
}

std::vector<RequestRecord> RecentRequests::AllSince(uint64_t after) const {
  std::vector<RequestRecord> out;
  for (const auto& [salt, t] : tenants_) {
    for (const auto& [own_seq, r] : t.ring) {
      if (r.seq > after) out.push_back(r);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.seq < b.seq; });
  if (out.size() > capacity_) out.erase(out.begin(), out.end() - std::ptrdiff_t(capacity_));
  return out;
}

std::vector<RequestRecord> RecentRequests::Since(uint64_t after,
                                                 const std::string* tenant_salt) const {
  MutexLock lock(&mu_);
  if (tenant_salt == nullptr) return AllSince(after);
  std::vector<RequestRecord> out;
  auto it = tenants_.find(*tenant_salt);
  if (it == tenants_.end()) return out;
  for (const auto& [own_seq, r] : it->second.ring) {
    if (own_seq <= after) continue;
    out.push_back(r);
    out.back().seq = own_seq;
  }
  return out;
}

}  // namespace prefixd::server
