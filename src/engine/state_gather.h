// Setting a sequence state from pieces. llama_state_seq_set_data takes one
// contiguous buffer, so a restore used to copy every cached row into an assembled state and
// llama.cpp then copied it again into the KV tensors. SetStateGathered hands llama.cpp's state
// reader (llama_io_read_i, the interface its own file and buffer readers implement) a reader
// over the pieces instead: each tensor range is set straight from the piece(s) it lies in.
//
// Pieces may also lie in a payload still in its file (a disk record opened, not read:
// FileBackedPayload): those bytes are read from the file straight into the tensor, and their
// checksum is taken there, a slice at a time while the slice is in the CPU cache. So what is
// checked is exactly what was set, whatever the page cache does in between; the caller compares
// the checksums with the records' and clears the sequence on any mismatch.
//
// This uses llama.cpp's internal llama_io_read_i / llama_memory_i::state_read of the pinned
// version (docs/llama-patches.md, "Gathered state set"): the same calls
// llama_state_seq_set_data_ext makes after reading the header, in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "llama.h"
#include "util/env.h"

namespace prefixd::engine {

// A payload of `stand_in.size()` bytes at `file_offset` in `file`. The codec was handed
// `stand_in` for it: its first `front` bytes hold the payload's first bytes (what the codec
// parses: headers, cell metadata), the rest is address space only, never read. A piece inside
// stand_in past `front` is read from the file.
struct FileBackedPayload {
  std::span<const uint8_t> stand_in;
  size_t front = 0;
  const RandomAccessFile* file = nullptr;
  uint64_t file_offset = 0;
};

// Reads a sequence state (header {magic, seq_id}, then the memory's sections) from the
// concatenation of `pieces` into `seq`, as llama_state_seq_set_data_ext(ctx, bytes, size, seq,
// flags) would. Returns the bytes read, 0 on any error (what llama.cpp returns), including a
// file read that failed or came short.
// For each file-backed payload, `crcs[i]` is set to the Crc32c of its whole payload as set:
// the bytes the pieces read from the file (taken where they landed), its front, and the bytes
// no piece used (read from the file for the check only).
// REQUIRES: the caller owns ctx's thread; the pieces and the files outlive the call;
// crcs.size() == files.size(); the stand-ins do not overlap.
size_t SetStateGathered(llama_context* ctx, int32_t seq,
                        std::span<const std::span<const uint8_t>> pieces,
                        llama_state_seq_flags flags,
                        std::span<const FileBackedPayload> files = {},
                        std::span<uint32_t> crcs = {});

}  // namespace prefixd::engine
