// Capture points: the token positions where the prefill scheduler ends a chunk and the cache
// takes a Snapshot, because a later request is likely to restore exactly there — the end of
// the system prompt, the start of every user message, and the tail (the end of the last
// message before the generation prompt). Branch points are added per request by the engine.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/model.h"
#include "engine/types.h"
#include "util/status.h"

namespace prefixd::engine {

// For a rendered chat: renders every prefix messages[:i] (without a generation prompt) and
// compares its tokens with the full render token by token; the shared length is a message
// boundary. Rendering messages[:i] is often not a token prefix of the full render (templates
// strip reasoning of earlier turns, merge text at boundaries), so a boundary is where the two
// renders agree, never a guessed token id. Returns ascending positions in (0, full.size()).
// `options` must be those the full render used (the tools change the system prompt);
// `full_text` is that render and `full` its tokens. Renders are compared as text (fast even
// for long conversations) and a shared length is mapped to the last token boundary at or
// before it; when the tokens do not spell the text back, token by token instead.
Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const std::string& messages_json,
                                               const ChatRenderOptions& options,
                                               const std::string& full_text,
                                               std::span<const Token> full);

// For raw completion text (no message list): every chat-format message start token
// (<|im_start|> and its equivalents) after position 0 is a boundary.
std::vector<int32_t> TextCapturePoints(const Model& model, std::span<const Token> tokens);

}  // namespace prefixd::engine
