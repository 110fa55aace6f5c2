// Setting a sequence state from pieces (issue 15). llama_state_seq_set_data takes one
// contiguous buffer, so a restore used to copy every cached row into an assembled state and
// llama.cpp then copied it again into the KV tensors. SetStateGathered hands llama.cpp's state
// reader (llama_io_read_i, the interface its own file and buffer readers implement) a reader
// over the pieces instead: each tensor range is set straight from the piece(s) it lies in.
//
// This uses llama.cpp's internal llama_io_read_i / llama_memory_i::state_read of the pinned
// version (docs/llama-patches.md, "Gathered state set"): the same calls
// llama_state_seq_set_data_ext makes after reading the header, in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "llama.h"

namespace prefixd::engine {

// Reads a sequence state (header {magic, seq_id}, then the memory's sections) from the
// concatenation of `pieces` into `seq`, as llama_state_seq_set_data_ext(ctx, bytes, size, seq,
// flags) would. Returns the bytes read, 0 on any error (what llama.cpp returns).
// REQUIRES: the caller owns ctx's thread; the pieces outlive the call.
size_t SetStateGathered(llama_context* ctx, int32_t seq,
                        std::span<const std::span<const uint8_t>> pieces,
                        llama_state_seq_flags flags);

}  // namespace prefixd::engine
