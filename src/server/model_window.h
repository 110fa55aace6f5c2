// The window a client should plan for: what /v1/models says about a model so that an agent
// compacts its conversation before the server refuses it, rather than after.
//
// `context` is the tokens one request may hold, prompt and answer together (the slot's
// context). `max_output` is the output cap the server suggests: `-n` when the operator set
// one, else an eighth of the window within [1024, 32000] — large enough for a tool call or a
// file, small enough that a client reserving it for the answer (Claude Code reserves its
// output cap plus a buffer below the window) keeps most of the window for the conversation.
// Pure; thread-safe.
#pragma once

#include <cstdint>

namespace prefixd::server {

struct ModelWindow {
  int64_t context = 0;
  int64_t max_output = 0;
};

// REQUIRES: n_ctx > 0. n_predict: the server's -n (0: none).
ModelWindow ModelWindowOf(int64_t n_ctx, int64_t n_predict);

}  // namespace prefixd::server
