// Where system and developer messages go before a chat template sees them.
//
// Many templates accept a system message only as the first message (Qwen3.5's raises "System
// message must be at the beginning."), some not at all after a user turn, and agents send them
// anywhere: Claude Code puts its environment block in messages[1], Codex sends several
// developer messages first. PlaceSystemMessages rewrites the list so that every template takes
// it and the rendering of a message never depends on messages after it, so the rendered
// prefix of a conversation stays the same when the conversation grows:
//  - the leading run of system / developer messages becomes one system message, their texts
//    joined by a blank line (one stays as it is, role and all);
//  - a later system / developer message is folded into a user turn: appended to the user
//    message just before it, or, after an assistant or tool message, opening a user message
//    that the next user message (if any) is appended to.
// Content may be a string or an array of text parts (request_parse.cpp checked them). Pure;
// thread-safe; never throws.
#pragma once

#include <nlohmann/json.hpp>

namespace prefixd::server {

nlohmann::json PlaceSystemMessages(const nlohmann::json& messages);

}  // namespace prefixd::server
