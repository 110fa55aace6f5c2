// The decode of a prefill call over a prompt that may hold images: the call's tokens as one
// llama_decode, or, where the call holds image rows (image_tokens.h), its text runs as tokens
// and each image's rows as that image's embeddings (Projector::Embeddings: from the encoder
// cache, or encoded now), in order. A call that starts inside an image (a restore that ended
// there) decodes the image's remaining rows only: every earlier row's keys and values are in
// the restored state, computed over the whole image as in a cold run, so the rest attends to
// what it attended to then. The chunk schedule ends calls at every image's bounds
// (ImageCuts), so a call holds either text or one image's rows, and a non-causal image (whose
// rows must be one call) is never split.
#pragma once

#include <span>
#include <vector>

#include "engine/context.h"
#include "engine/request.h"
#include "engine/rope_layout.h"
#include "util/status.h"

namespace prefixd::engine {

class Projector;

// The image bounds of `prompt` (each image's first row and the token after its last), as
// chunk-schedule cuts: ascending, unique, inside (0, n).
std::vector<int32_t> ImageCuts(const Prompt& prompt);

// How many of the prompt's first `n` tokens are image rows.
int32_t ImageRowsBefore(const Prompt& prompt, int32_t n);

// Where the prompt's rope positions leave its cell positions (rope_layout.h): each image's rows
// and the rope steps it takes (fewer than its rows on an M-RoPE projector).
RopeLayout RopeLayoutOf(const Prompt& prompt);

// Decodes prompt.tokens [p0, p1) for `seq` at cell positions p0.. (token indices, one per
// image row). On an M-RoPE projector it first sets the sequence's RopeLayoutOf(prompt) into
// `ctx`, so the rows and the text after them, the answer's tokens included, rotate as the
// model learned. Keeps the last row's logits when `want_last_logits`. `*images_decoded` counts
// the images whose rows it decoded. REQUIRES: projector not null when the prompt holds images.
Status DecodePromptRange(Context& ctx, Projector* projector, int32_t seq, const Prompt& prompt,
                         int32_t p0, int32_t p1, bool want_last_logits,
                         int32_t* images_decoded = nullptr);

}  // namespace prefixd::engine
