// Context: a llama_context with several sequences (one per Slot) and the primitives the
// prefill scheduler, the cache and generation are built from: batched decode, logits, sequence
// removal, and sequence state get/set (whole or partial).
//
// Thread-safety: a Context belongs to the thread that created it (the engine's scheduler
// thread) and every method that reaches the llama context aborts when called from another one:
// ggml's CPU backend keeps an OpenMP thread team per calling thread, and a second team halves
// decode speed on a small machine. Not internally synchronized. Owns its llama_context; borrows the Model, which must
// outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/rope_layout.h"
#include "engine/state_gather.h"
#include "engine/codec/types.h"
#include "util/status.h"

struct llama_context;
struct llama_batch;

namespace prefixd::engine {

struct ContextOptions {
  uint32_t n_ctx_per_seq = 8192;  // context length each sequence gets
  uint32_t n_seq = 1;             // sequences (slots)
  uint32_t n_batch = 2048;        // largest logical batch handed to one decode
  uint32_t n_ubatch = 512;        // physical micro-batch
  int n_threads = 0;              // decode (generation) threads; 0: all cores
  int n_threads_batch = 0;        // prefill threads; 0: the same as n_threads
  bool flash_attn = false;
  // A sliding-window cache (iswa layouts) of the context's size (llama.cpp's context default),
  // or of a window plus a ubatch (false; llama-server's default): then the window layers
  // attend over those cells instead of every position so far, and hold that much memory. Part
  // of the cache-layout fingerprint when false: the cells a Snapshot's layout names lie in a
  // ring that size.
  bool swa_full = true;
  KvType type_k = KvType::kF16;   // KV cache types; part of the cache-layout fingerprint
  KvType type_v = KvType::kF16;
  // Recurrent states llama.cpp keeps per token for rolling back rejected drafts (n_rs_seq;
  // only archs whose graph supports it, others ignore it). 0: none.
  uint32_t n_rs_seq = 0;
  // Recurrent states a prefill call can keep at positions inside it (llama.cpp patch 0009:
  // the Gated DeltaNet hybrids; others ignore it): each costs one sequence's recurrent state
  // of memory. 0: none.
  uint32_t n_rs_capture = 0;
  // A multi-token-prediction draft context (LLAMA_CONTEXT_TYPE_MTP) over the model's NextN
  // layers, in place of the model's own graph: speculation's draft-mtp (speculation.h).
  bool mtp = false;
};

// Told what happens to a Context's sequences, on its thread, after it happened: every
// successful decode (the batch as decoded, so the model's outputs for it can still be read),
// every truncation and every clear (which SetState and SetStatePieces begin with). The MTP
// draft context follows the target's sequences through it (speculation.cpp).
class SequenceObserver {
 public:
  virtual ~SequenceObserver() = default;
  virtual void Decoded(const llama_batch& batch) = 0;
  virtual void Truncated(int32_t seq, int32_t p0) = 0;
  virtual void Cleared(int32_t seq) = 0;
};

// One token of a multi-sequence batch.
struct BatchToken {
  Token token;
  int32_t pos;
  int32_t seq;
  bool want_logits;
};

enum class StatePart { kWhole, kPartial };  // kPartial: only the recurrent / SWA section

class Context {
 public:
  static Result<std::unique_ptr<Context>> Create(const Model& model, const ContextOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Decodes `tokens` for `seq` at positions [pos0, pos0 + n) as ONE llama_decode call.
  // REQUIRES: tokens.size() <= n_batch. Keeps the last token's logits when `want_last_logits`.
  Status DecodeChunk(int32_t seq, std::span<const Token> tokens, int32_t pos0,
                     bool want_last_logits);
  // Decodes `n` rows of embeddings (n x the model's input width, row-major) for `seq` at
  // positions [pos0, pos0 + n) as ONE llama_decode call: an image's rows (prompt_decode.h).
  // With `non_causal` the rows attend to each other both ways (gemma3's images). The observer
  // is not told (it follows tokens; the engine refuses the MTP head with a projector).
  // `rope`: on an M-RoPE model, the rows' rope positions as 4 sections of n (time, height,
  // width, unused: libmtmd's decoder positions); empty elsewhere (rope by the cell positions).
  // REQUIRES: 0 < n <= n_batch, and n <= n_ubatch when non_causal.
  Status DecodeEmbeddings(int32_t seq, const float* rows, int32_t n, int32_t pos0,
                          bool non_causal, bool want_last_logits,
                          std::span<const int32_t> rope = {});
  // Where `seq`'s rope positions leave its cell positions (rope_layout.h): every later
  // DecodeChunk and DecodeBatch of `seq` rotates its tokens by RopeLayout::TimeAt of their
  // positions. Set before a prompt's first decode; an identity layout is the default.
  void SetRopeLayout(int32_t seq, RopeLayout layout);
  // Decodes a mixed batch of several sequences in one call; logits of tokens marked
  // want_logits are read afterwards with Logits(i) where i is the index in `batch`.
  Status DecodeBatch(std::span<const BatchToken> batch);
  // Logits of the i-th token of the last decode that asked for logits (-1: the last one).
  const float* Logits(int32_t i = -1) const;

  void SeqClear(int32_t seq);
  // Removes positions [p0, inf) of `seq`. Returns false when the memory cannot (recurrent).
  bool SeqTruncate(int32_t seq, int32_t p0);
  // Highest position held by `seq`, or -1 when empty.
  int32_t SeqPosMax(int32_t seq) const;

  Result<std::vector<uint8_t>> GetState(int32_t seq, StatePart part) const;
  // The same, and the cell layout of its sliding-window caches in `*layout` (cell_layout.h;
  // empty for a model without one). What a Snapshot keeps.
  Result<std::vector<uint8_t>> GetState(int32_t seq, StatePart part,
                                        std::vector<uint8_t>* layout) const;
  // The whole state restricted to the attention (and SWA) cells with positions in [p0, p1);
  // a recurrent section is written whole. One pass over the rows that are asked for, not over
  // the whole context (llama.cpp patch 0001, docs/llama-patches.md). Parse it with ParseState;
  // EncodeRows slices it as it slices a whole state. Written into `reuse` when its capacity
  // holds it (a caller's scratch, pages already present), else into a buffer of the pool.
  Result<std::vector<uint8_t>> GetStateRange(int32_t seq, int32_t p0, int32_t p1,
                                             std::vector<uint8_t> reuse = {}) const;
  // Sets a state into `seq` (cleared first). Fails closed: any refusal by llama.cpp is an error
  // and leaves `seq` cleared. With a `layout` (GetState's), the sliding-window caches' cells go
  // where they were; a layout that does not fit the state is a refusal.
  Status SetState(int32_t seq, std::span<const uint8_t> bytes, StatePart part,
                  std::span<const uint8_t> layout = {});

  // Sets a partial state (GetState kPartial: the recurrent / SWA section) into `seq` without
  // clearing its attention rows; with SeqTruncate at the position the partial was taken at
  // after it, the sequence is what it was then (speculation's checkpoint).
  Status RestorePartial(int32_t seq, std::span<const uint8_t> bytes);

  // SetState(seq, concatenation of `pieces`, kWhole) without the concatenation: llama.cpp
  // reads the state through a reader over the pieces and copies each tensor row straight from
  // them (state_gather.cpp), so a restore moves its bytes once. `size` is the pieces' total.
  // Pieces inside a FileBackedPayload's stand-in are read from its file, and `crcs` gets each
  // such payload's checksum as set (state_gather.h); the caller compares them with the
  // records' and clears `seq` when one differs.
  Status SetStatePieces(int32_t seq, std::span<const std::span<const uint8_t>> pieces,
                        size_t size, std::span<const FileBackedPayload> files = {},
                        std::span<uint32_t> crcs = {}, std::span<const uint8_t> layout = {});

  // Captures inside a call (llama.cpp patches 0009-0018): whether the partial state at a
  // position inside a DecodeChunk call can be had without ending the call there: a
  // sliding-window model (kIswa, kDsaIswa: its window at P is still in the cache after the
  // call), or a recurrent state the graph keeps (the Gated DeltaNet, short-convolution and Mamba
  // models, with ContextOptions::n_rs_capture; a hybrid's window beside it as kIswa's, 0014).
  bool CapturesInCall() const;
  // For the following DecodeChunk calls (until the next call of this): keep `seq`'s state at
  // each of `positions`, strictly inside a call. Returns how many were accepted: the first
  // min(size, n_rs_capture) of recurrent states, all for a window. An empty span clears them.
  int32_t SetCallCaptures(int32_t seq, std::span<const int32_t> positions);
  // How many positions one call keeps (SetCallCaptures): n_rs_capture for recurrent states,
  // any number for a window.
  int32_t CallCaptureCapacity() const;
  // The partial state (GetState kPartial, with its sliding-window cell layout into `*layout`)
  // a call that ended at capture i's position would have left, byte for byte. NotFound when
  // the decode did not take it (a position the calls did not go past).
  Result<std::vector<uint8_t>> CallCapture(int32_t i, std::vector<uint8_t>* layout = nullptr) const;

  const Model& model() const { return model_; }
  const ContextOptions& options() const { return options_; }
  uint32_t n_batch() const { return options_.n_batch; }
  uint32_t n_ubatch() const { return options_.n_ubatch; }
  uint32_t n_rs_seq() const;  // what llama.cpp kept of ContextOptions::n_rs_seq (0: none)
  llama_context* raw() const { return ctx_; }
  // At most one observer; null removes it. It must outlive its registration.
  void SetObserver(SequenceObserver* observer) { observer_ = observer; }

 private:
  Context(const Model& model, const ContextOptions& options);
  void RequireOwner() const;  // aborts off the owning thread
  const Model& model_;
  ContextOptions options_;
  Status Decode(const llama_batch& batch);  // llama_decode, then the observer
  llama_context* ctx_ = nullptr;
  SequenceObserver* observer_ = nullptr;
  struct {
    int32_t seq = -1;
    std::vector<int32_t> positions;
  } call_captures_;  // SetCallCaptures
  std::vector<RopeLayout> rope_;  // by seq; SetRopeLayout
  const RopeLayout& RopeOf(int32_t seq) const;
  std::thread::id owner_;
};

}  // namespace prefixd::engine
