// PrefixRendersAhead: the prefix renders a request's capture points need, begun as soon as its
// chat is parsed, on spare threads beside the full render, instead of after the full render and
// its tokenization. Which ones: the prefixes the render memo holds no record of (a continuing
// conversation: its new messages' and the tail's), chosen as ChatCapturePoints would choose
// them (ChooseRenders); and first the whole conversation without a generation prompt, in the
// request's shared render scope, so that the full render's generation-prompt diff waits for it
// instead of making it again (patch 0004). A render is a function of the chat alone, so each
// result is the one a render made later would give; ChatCapturePoints takes them in place of
// its own renders.
//
// On a machine with one thread to spare the calling thread makes them all in Finish, in order.
//
// Thread-safety: one object per request, used from the thread that made it.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/chat/render_memo.h"
#include "util/status.h"

namespace prefixd::engine {

class PrefixRendersAhead {
 public:
  // Looks the chat's prefixes (PrefixesToCompare) up in `memo` and begins the renders.
  // REQUIRES: tmpl, chat and scope outlive this object; scope lives on the calling thread.
  PrefixRendersAhead(const ChatTemplate& tmpl, const ParsedChat& chat, RenderMemo& memo,
                     const RenderReuseScope& scope);
  // Drops the renders not begun and waits for those begun.
  ~PrefixRendersAhead();
  PrefixRendersAhead(const PrefixRendersAhead&) = delete;
  PrefixRendersAhead& operator=(const PrefixRendersAhead&) = delete;

  const std::vector<PrefixRender>& prefixes() const { return prefixes_; }
  const std::vector<PrefixKey>& keys() const { return keys_; }
  // The memo's records of keys() as found when this began (nullopt: none).
  const std::vector<std::optional<PrefixRecord>>& records() const { return records_; }

  // Makes on the calling thread the renders no thread has begun, waits for the others, and
  // gives each prefix's render, indexed as prefixes(): nullopt for those not rendered here.
  // REQUIRES: called once.
  std::vector<std::optional<Result<std::string>>> Finish();

 private:
  struct Item {
    size_t j;           // index into prefixes_
    bool shared_scope;  // rendered in the request's shared scope
  };
  void Work();
  void RenderItem(size_t k);
  void Join();

  const ChatTemplate& tmpl_;
  const ParsedChat& chat_;
  const RenderReuseScope& scope_;
  std::vector<PrefixRender> prefixes_;
  std::vector<PrefixKey> keys_;
  std::vector<std::optional<PrefixRecord>> records_;
  std::vector<Item> items_;
  std::vector<std::optional<Result<std::string>>> results_;  // by item; written once each
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace prefixd::engine
