#include "engine/chat/prefix_renders_ahead.h"

#include <algorithm>
#include <system_error>

#include "engine/chat/capture_points.h"
#include "util/parallel.h"

namespace prefixd::engine {

PrefixRendersAhead::PrefixRendersAhead(const ChatTemplate& tmpl, const ParsedChat& chat,
                                       RenderMemo& memo, const RenderReuseScope& scope)
    : tmpl_(tmpl), chat_(chat), scope_(scope) {
  prefixes_ = PrefixesToCompare(chat);
  keys_ = PrefixKeys(tmpl, chat, prefixes_);
  records_ = memo.Find(keys_);
  const size_t n = chat.n_messages();
  std::vector<size_t> missing;
  for (size_t j = 0; j < prefixes_.size(); ++j) {
    const PrefixRender& p = prefixes_[j];
    // The full render's diff waits for the whole conversation without a generation prompt:
    // first, found in the memo or not.
    if (p.n_messages == n && p.variant == PrefixVariant::kPlain) items_.push_back({j, true});
    if (!records_[j]) missing.push_back(j);
  }
  const std::vector<bool> chosen = ChooseRenders(prefixes_, missing, n, kMaxPrefixRenders);
  for (size_t k = 0; k < missing.size(); ++k) {
    if (chosen[k] && (items_.empty() || missing[k] != items_.front().j)) {
      items_.push_back({missing[k], false});
    }
  }
  results_.resize(items_.size());
  // The calling thread goes on with the full render: the others take the renders.
  const size_t workers = std::min(SpareThreads(kPrefixRenderThreads) - 1, items_.size());
  for (size_t t = 0; t < workers; ++t) {
    try {
      threads_.emplace_back([this] { Work(); });
    } catch (const std::system_error&) {
      break;  // no thread: Finish makes the rest
    }
  }
}

PrefixRendersAhead::~PrefixRendersAhead() {
  stop_ = true;
  Join();
}

void PrefixRendersAhead::Join() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void PrefixRendersAhead::RenderItem(size_t k) {
  const Item& item = items_[k];
  const PrefixRender& p = prefixes_[item.j];
  if (item.shared_scope) {
    RenderReuseScope shared(scope_, RenderReuseScope::kShareRenders);
    results_[k] = tmpl_.RenderPrefix(chat_, p.n_messages, p.variant);
    return;
  }
  // Outside the shared scope: nothing else renders these, and its few entries are kept for
  // the full render's.
  results_[k] = tmpl_.RenderPrefix(chat_, p.n_messages, p.variant);
}

void PrefixRendersAhead::Work() {
  for (size_t k = next_++; k < items_.size() && !stop_; k = next_++) RenderItem(k);
}

std::vector<std::optional<Result<std::string>>> PrefixRendersAhead::Finish() {
  Work();
  Join();
  std::vector<std::optional<Result<std::string>>> out(prefixes_.size());
  for (size_t k = 0; k < items_.size(); ++k) out[items_[k].j] = std::move(results_[k]);
  return out;
}

}  // namespace prefixd::engine
