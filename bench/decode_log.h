// The log bench/decode_counter.cpp writes in a server under test: one line per llama_decode
// call, "<tokens> <ubatches> <outputs>". The bench marks where a request starts and counts the
// prefill calls after the mark once the request is answered.
//
// Thread-safety: the functions hold no state; one reader per log.
#pragma once

#include <cstdint>
#include <string>

namespace prefixd::bench {

// The log's size now: where the next request's lines will start (0 when there is no log yet).
int64_t DecodeLogMark(const std::string& path);

// The prefill calls logged after `mark` and the ubatches llama.cpp split them into: calls of
// more than one token, or of one token without an output (a decode step of one slot is a single
// token with its output; a prompt's last call of one token counts as a step).
struct PrefillCount {
  int64_t calls = 0;
  int64_t ubatches = 0;
};
PrefillCount CountPrefill(const std::string& path, int64_t mark);

}  // namespace prefixd::bench
