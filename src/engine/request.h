// The values a request is made of and answered with: Prompt, CompletionRequest, CompletionResult,
// Usage, CacheOutcome, FinishReason. Plain copyable values, no behaviour (engine/completion.h
// carries a running request).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cache/types.h"
#include "engine/chat/chat_output.h"
#include "engine/sampler.h"
#include "engine/codec/types.h"
#include "engine/vision/image_prompt.h"

namespace prefixd::engine {

// Where a chat prompt's preparation (before the request queues) spent its time, for the log.
struct PrepareTimes {
  double parse_ms = 0;     // the messages parsed by the template (common_chat_msgs_parse_oaicompat)
  double render_ms = 0;    // the whole conversation rendered
  double tokenize_ms = 0;  // its text tokenized (TokenMemo)
  double points_ms = 0;    // capture points found (ChatCapturePoints / TextCapturePoints)
  double images_ms = 0;    // the images read by the projector (a file seen before: its digest)
};

// A tokenized prompt and where its capture points are (absolute token positions).
struct Prompt {
  std::vector<Token> tokens;
  std::vector<int32_t> capture_points;  // message boundaries: system end, user starts, tail
  // Chat prompts: how the reply is constrained (grammar, stops) and read (parser). The engine
  // itself uses only output.special_tokens (rendered as text for the parser); the caller
  // moves the grammar into SamplingOptions and the stops into CompletionRequest::stop.
  OutputFormat output;
  PrepareTimes times;
  // The images in `tokens` (image_prompt.h), in order; empty for a text prompt.
  std::vector<PromptImage> images;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;      // restored from the cache
  int32_t image_tokens_restored = 0;  // of which: image rows (their images not decoded again)
  int32_t evaluated_tokens = 0;   // prompt tokens actually decoded
  int32_t prefill_chunks = 0;     // llama_decode calls the prefill took
  int32_t completion_tokens = 0;
  double prefill_ms = 0;          // restore + prompt evaluation
  double restore_ms = 0;          // of which: lookup, disk reads, assembly, state set
  double prompt_eval_ms = 0;      // of which: inside llama_decode (the model itself)
  // Reading the Snapshots of the capture points: part of prefill_ms, except those of the last
  // prefill call, read after the first token went out (part of decode_ms, like publish_ms).
  double capture_ms = 0;
  int32_t captures = 0;           // capture points taken (a Snapshot read, or a Tail marked)
  uint64_t restored_bytes = 0;    // state bytes set into the sequence (0: the slot kept it)
  // Before the request queued, on its own thread: opening what the disk Tier adds to its
  // cached prefix (or, through RAM, reading it into the RAM Tier) and what the shared tier adds
  // (read into RAM). Not part of prefill_ms.
  double prefetch_ms = 0;
  double decode_ms = 0;
  // Of decode_ms: publishing the prompt's Blocks and Snapshots, after the first token went out
  // and before the second is decoded.
  double publish_ms = 0;
  double queue_ms = 0;
  // Speculative decoding: tokens drafted and verified, drafts taken, verification steps.
  int32_t draft_tokens = 0;
  int32_t draft_accepted = 0;
  int32_t draft_steps = 0;
  int32_t draft_replays = 0;      // rejections undone by restoring a checkpoint and replaying
  // draft-mtp: of cached_tokens, those whose MTP-head history came back with them (the rest of
  // the prompt ran through the head as the target decoded it; 0 with the cache off).
  int32_t mtp_restored_tokens = 0;
  // A digest of the drafted tokens in order (FNV-1a; 0: none): two runs drafted alike when
  // equal. What shows a restored MTP head drafts as one that read the whole prompt.
  uint64_t draft_digest = 0;
};

// Where a request's cached prefix came from, and why it reused nothing: the cache's own
// vocabulary (cache/types.h). kRam may mean a Snapshot set into a slot that kept its rows;
// kRemote, the shared tier read before the request queued.
using CacheTier = cache::Tier;
using CacheMiss = cache::MissReason;

// Why generation ended.
enum class FinishReason : uint8_t {
  kStop,       // end of generation or a stop string
  kLength,     // max_tokens, or the end of the slot's context
  kCancelled,  // the client went away (Completion::Cancel), or the engine shut down
};
// "stop", "length", "cancelled": the names logs use.
const char* FinishReasonName(FinishReason reason);

// Cache work that failed (reuse lost, the answer unaffected).
enum class CacheWork : uint8_t {
  kDomain,   // remembering the domain for `prefixd cache --model` (cache_dir/domains)
  kCapture,  // taking a Snapshot at a capture point
  kPublish,  // publishing Blocks, Snapshots and Tails
};
// "domain", "capture", "publish".
const char* CacheWorkName(CacheWork work);

// `counts` keyed by name (`name` of each key), for JSON and metrics; keys whose name is ""
// are left out.
template <typename Key>
std::map<std::string, uint64_t> CountsByName(const std::map<Key, uint64_t>& counts,
                                             const char* (*name)(Key)) {
  std::map<std::string, uint64_t> out;
  for (const auto& [key, n] : counts) {
    if (*name(key) != '\0') out[name(key)] += n;
  }
  return out;
}

// What the cache did for one request, for logs and metrics.
struct CacheOutcome {
  CacheTier tier = CacheTier::kNone;
  CacheMiss miss = CacheMiss::kNotMissed;
  int32_t diverged_at = -1;       // first token that differs from the longest cached path
  int32_t reusable_tokens = 0;    // longest prefix shared with anything cached (before -1)
};

struct CompletionRequest {
  Prompt prompt;
  int max_tokens = 256;
  SamplingOptions sampling;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  std::string tenant_salt;        // chosen by the server per API key, never by the client
  // Speculation knobs of this request (llama-server's speculative.n_max / .n_min); -1: the
  // server's. n_max 0 turns speculation off for the request.
  int32_t spec_n_max = -1;
  int32_t spec_n_min = -1;
};

struct CompletionResult {
  std::vector<Token> tokens;
  std::string text;
  // With SamplingOptions::top_logprobs >= 0: one entry per generated token (the end of
  // generation token excluded).
  std::vector<TokenLogprobs> logprobs;
  FinishReason finish_reason = FinishReason::kStop;
  std::string stop_word;          // the stop string that ended generation; "" when none did
  Usage usage;
  CacheOutcome cache;
};

}  // namespace prefixd::engine
