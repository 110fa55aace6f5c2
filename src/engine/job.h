// Job and Slot: the engine's internal bookkeeping for one request and the sequence it runs on.
// Owned and touched only by the scheduler thread, except Job::completion, which the request's
// owner reads (engine/completion.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cache/store_tier.h"
#include "cache/types.h"
#include "engine/completion.h"
#include "engine/options.h"
#include "engine/stats.h"
#include "engine/sampler.h"
#include "engine/chat/text_stream.h"

namespace prefixd::engine {

using Clock = std::chrono::steady_clock;

inline double MillisSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What the prefetch found (cache_io.h, Prefetch): the restorable prefix RAM held and the ones
// the disk and the shared tier added to it (0: nothing).
struct PrefetchResult {
  size_t ram_tokens = 0;
  size_t disk_tokens = 0;
  size_t remote_tokens = 0;
  // The disk's prefix, opened and not read (TieredCache::Promote with open_disk): the restore
  // reads it straight into the sequence.
  std::shared_ptr<const cache::OpenedPrefix> opened;
};

struct Job {
  CompletionRequest request;
  std::shared_ptr<Completion> completion = std::make_shared<Completion>();
  Clock::time_point submitted = Clock::now();
  double prefetch_ms = 0;  // tier reads on the submitting thread (Usage::prefetch_ms)
  PrefetchResult prefetch;
};

// A point where the prefill ends a chunk and the cache takes a Snapshot (or a Tail).
struct CapturePoint {
  int32_t pos;
  cache::SnapshotKind kind;
};

// A Snapshot taken during prefill, published once the rows it depends on are published.
struct PendingSnapshot {
  int32_t pos;
  cache::SnapshotKind kind;
  std::vector<uint8_t> partial;  // empty for pure attention (a Tail of rows only)
  std::vector<uint8_t> mtp_carry;  // the MTP head's carry there (MtpSidecar; empty without)
};

// The capture points a prefill call kept inside itself (Context::SetCallCaptures): the slot's
// captures [first, first + set), in order.
struct CallCaptures {
  size_t first = 0;
  int32_t set = 0;
};

enum class Phase { kIdle, kPrefill, kGenerate };

// What a slot's sequence holds between requests: it outlives every request, and a next
// request of the same domain that starts with these tokens keeps them (slot-local reuse).
struct HeldSequence {
  std::vector<Token> tokens;  // decoded into the slot's seq, positions [0, size); empty: empty
  Digest domain{};
  size_t tail = 0;            // the last prompt's last capture point (its tail)

  // How much of a prompt of `domain` this sequence serves: the tokens they share, when that is
  // all the held tokens or reaches the held prompt's tail (all but its generation prompt,
  // which the next turn's history renders otherwise): a continuing turn, an exact repeat, an
  // edited last message. 0 when the prompt does not continue it.
  size_t Continues(std::span<const Token> prompt, const Digest& prompt_domain) const;
};

// One request's run on a slot: made anew when the request is admitted (StartRun),
// so nothing of the request before it carries over.
struct SlotRun {
  std::unique_ptr<Job> job;
  Digest domain{};
  int32_t pos = 0;                 // next position to decode
  int32_t restored = 0;            // P restored from the cache
  // The prompt's chunk schedule (PlanChunks): the ends of its prefill calls, the same with the
  // cache on or off; a warm prefill starts at the first end after `restored`.
  std::vector<int32_t> chunk_ends;
  std::vector<CapturePoint> captures;  // ascending, inside (restored, prompt size]
  size_t next_capture = 0;
  std::vector<PendingSnapshot> pending;
  // The last prefill call's captures, read once its first token is out (the sequence holds
  // exactly the prompt until the first decode step, and the call keeps what it captured).
  std::optional<CallCaptures> last_call;
  std::unique_ptr<Sampler> sampler;
  std::optional<TextStream> stream;
  uint64_t epoch = 0;              // the scheduler's clear epoch when the request started
  Token next_token = -1;           // sampled, not yet decoded
  // Speculation (empty without): the tokens before next_token (what the drafter reads), the
  // draft of this step and the partial state its rollback goes back to (Rollback::kCheckpoint).
  std::vector<Token> history;
  std::vector<Token> draft;
  std::vector<uint8_t> checkpoint;
  bool draft_pause = false;        // no draft at the next step (after a checkpoint's replay)
  bool publish_pending = false;    // the prompt is decoded but not yet published
  CompletionResult result;
  Clock::time_point started;
  Clock::time_point decode_started;
};

// The run of `job` on a slot it was just admitted to: its sampler, its text stream, its
// queue and prefetch times; `epoch`: the clear its held tokens were checked against.
SlotRun StartRun(std::unique_ptr<Job> job, const Digest& domain, std::unique_ptr<Sampler> sampler,
                 uint64_t epoch);

// A sequence of the context and what runs on it.
struct Slot {
  int32_t seq = 0;
  Phase phase = Phase::kIdle;
  uint64_t last_used = 0;  // admission order, for picking the least recently used slot
  HeldSequence held;       // lasts across requests
  SlotRun run;             // the request's own; meaningful while phase != kIdle
};

// What the slot's sequence holds when its request ends: the prompt up to slot.run.pos and the
// generated tokens that were fed back (the last sampled one never was). `generated`: the tokens
// sampled.
HeldSequence HeldAfter(const Slot& slot, std::span<const Token> generated);

// What GetStats shows of the slot: a busy slot's prompt, an idle one's held tokens, and with
// the cache on (`cache_on`) the prefix tree they belong to.
SlotView ViewOf(const Slot& slot, bool cache_on, uint32_t block_size);

}  // namespace prefixd::engine
