// Capture points: the token positions where the prefill scheduler ends a chunk and the cache
// takes a Snapshot, because a later request is likely to restore exactly there — the end of
// the system prompt, the start of every user message, and the tail (the end of the last
// message before the generation prompt). Branch points are added per request by the engine.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/model/model.h"
#include "engine/chat/render_memo.h"
#include "engine/codec/types.h"
#include "util/status.h"

namespace prefixd::engine {

class PrefixRendersAhead;

// For a rendered chat: renders every prefix messages[:i] (PrefixesToCompare) and compares it
// with the full render; the shared length is a message boundary. Rendering messages[:i] is
// often not a token prefix of the full render (templates strip reasoning of earlier turns,
// merge text at boundaries), so a boundary is where the two renders agree, never a guessed
// token id. Returns ascending positions in (0, full.size()).
// `options` must be those the full render used (the tools change the system prompt);
// `full_text` is that render and `full` its tokens. Renders are compared as text (fast even
// for long conversations) and a shared length is mapped to the last token boundary at or
// before it; when the tokens do not spell the text back, token by token instead.
// This is the reference: 2n renders of up to the whole conversation on every call.
Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const std::string& messages_json,
                                               const ChatRenderOptions& options,
                                               const std::string& full_text,
                                               std::span<const Token> full);

// The most prefixes one memoized call renders. A request that meets more unknown prefixes at
// once (a long conversation seen for the first time: 2 renders per message, each of up to the
// whole conversation, 15 s for 200 short messages) renders the first message's, the last
// kRecentMessages messages' and evenly spaced others up to this many; the rest get no capture
// point (a divergence there restores from an earlier point). A session that goes on renders
// only its new messages again.
inline constexpr size_t kMaxPrefixRenders = 48;
inline constexpr size_t kRecentMessages = 4;
// The most threads one request renders its prefixes on (fewer on a machine with fewer).
inline constexpr size_t kPrefixRenderThreads = 8;

// What one memoized ChatCapturePoints call did, for tests and the bench.
struct CapturePointStats {
  size_t prefixes = 0;  // prefix renders the points are found from (PrefixesToCompare)
  size_t renders = 0;   // of which rendered by this call; `memo` proved the others
  size_t by_split = 0;  // of the others, proved by a split (the boundary moved forward)
  size_t by_text = 0;   // proved by an earlier full render (the boundary moved back)
  size_t skipped = 0;   // not rendered, over kMaxPrefixRenders: no capture point there
  double render_ms = 0; // time spent in those renders (and the placeholder's, when rendered)
};

// The same points as the reference (up to kMaxPrefixRenders unknown prefixes; beyond, a
// subset of them), rendering only the prefixes whose shared length `memo` cannot prove (RenderMemo): on a conversation that grows by k messages, about 2k + 1 renders,
// also when a new user message makes the template rewrite earlier turns (e.g. strip their
// reasoning): splits and the previous full render, which `memo` keeps, prove those.
// When the tokens do not spell the text back it renders every prefix, as the reference does.
// `ahead`, when given, holds the renders begun for this chat (PrefixRendersAhead, made with
// this memo): its lookup and renders are taken in place of this call's own; the points are
// the same.
// REQUIRES: `chat` was parsed by `tmpl`, `full_text` is tmpl.Render(chat), `full` its tokens.
// Thread-safe (memo is); `stats` and `ahead` may be null.
Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const ParsedChat& chat,
                                               const std::string& full_text,
                                               std::span<const Token> full, RenderMemo& memo,
                                               CapturePointStats* stats = nullptr,
                                               PrefixRendersAhead* ahead = nullptr);

// Which of the unproven prefixes (indices into `prefixes`, ascending) to render: all of them up
// to `max_renders`; beyond, those a later request most likely restores at (the last
// kRecentMessages messages, whose boundaries a continuing session and a regenerated answer
// restore at, and the first message, which other sessions share), then evenly spaced others.
std::vector<bool> ChooseRenders(const std::vector<PrefixRender>& prefixes,
                                const std::vector<size_t>& unproven, size_t n_messages,
                                size_t max_renders);

// For raw completion text (no message list): every chat-format message start token
// (<|im_start|> and its equivalents) after position 0 is a boundary.
std::vector<int32_t> TextCapturePoints(const Model& model, std::span<const Token> tokens);

}  // namespace prefixd::engine
