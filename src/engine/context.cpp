#include "engine/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>

#include "engine/cell_layout.h"
#include "engine/state_gather.h"
#include "util/buffer_pool.h"
#include "llama.h"

namespace prefixd::engine {

namespace {

ggml_type GgmlType(KvType type) {
  switch (type) {
    case KvType::kF32: return GGML_TYPE_F32;
    case KvType::kF16: return GGML_TYPE_F16;
    case KvType::kBF16: return GGML_TYPE_BF16;
    case KvType::kQ8_0: return GGML_TYPE_Q8_0;
    case KvType::kQ4_0: return GGML_TYPE_Q4_0;
  }
  return GGML_TYPE_F16;
}

// The head size of K (`key`) or V: the GGUF's key_length / value_length, else n_embd / n_head.
int64_t HeadSize(const Model& model, bool key) {
  const std::string v =
      model.Meta(model.arch() + (key ? ".attention.key_length" : ".attention.value_length"));
  if (!v.empty()) return std::atoll(v.c_str());
  const int32_t n_head = llama_model_n_head(model.raw());
  return n_head > 0 ? llama_model_n_embd(model.raw()) / n_head : 0;
}

// llama.cpp stores a quantized K or V only when a head is a whole number of the type's blocks
// (and says so only in its log, failing the context); the flag that asked for it is named here.
Status CheckKvTypeFits(const Model& model, KvType type, bool key) {
  const int64_t block = ggml_blck_size(GgmlType(type));
  const int64_t head = HeadSize(model, key);
  if (block <= 1 || head <= 0 || head % block == 0) return Status::OK();
  return Status::InvalidArgument(std::string(key ? "--cache-type-k " : "--cache-type-v ") +
                                 KvTypeName(type) + ": the model's " + (key ? "K" : "V") +
                                 " head size " + std::to_string(head) +
                                 " is not a multiple of the type's block of " +
                                 std::to_string(block) + " values");
}

int DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 4 : int(n);
}

// RAII llama_batch. A token's rope position is its cell position unless a RopeLayout moves it;
// then the batch carries the cell positions apart (llama.cpp patch 0021).
struct Batch {
  explicit Batch(int32_t n) : b(llama_batch_init(n, 0, 1)) { cells.reserve(size_t(n)); }
  ~Batch() { llama_batch_free(b); }
  void Add(Token t, int32_t pos, int32_t seq, bool logits, const RopeLayout& rope) {
    int32_t i = b.n_tokens++;
    b.token[i] = t;
    b.pos[i] = rope.identity() ? pos : rope.TimeAt(pos);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq;
    b.logits[i] = logits;
    cells.push_back(pos);
    if (b.pos[i] != pos) b.pos_cell = cells.data();
  }
  llama_batch b;
  std::vector<llama_pos> cells;
};

Status DecodeStatus(int32_t rc) {
  if (rc == 0) return Status::OK();
  if (rc == 1) return Status::ResourceExhausted("llama_decode: no KV cache slot for the batch");
  if (rc == 2) return Status::Aborted("llama_decode: aborted");
  return Status::Internal("llama_decode failed with code " + std::to_string(rc));
}

}  // namespace

Result<std::unique_ptr<Context>> Context::Create(const Model& model,
                                                 const ContextOptions& options) {
  PREFIXD_RETURN_IF_ERROR(CheckKvTypeFits(model, options.type_k, true));
  PREFIXD_RETURN_IF_ERROR(CheckKvTypeFits(model, options.type_v, false));
  if (IsQuantized(options.type_v) && !options.flash_attn) {
    return Status::InvalidArgument(std::string("a quantized V cache (") +
                                   KvTypeName(options.type_v) + ") needs flash attention");
  }
  llama_context_params p = llama_context_default_params();
  p.n_seq_max = options.n_seq;
  p.n_ctx = options.n_ctx_per_seq * options.n_seq;
  p.n_batch = options.n_batch;
  p.n_ubatch = options.n_ubatch;
  p.n_threads = options.n_threads > 0 ? options.n_threads : DefaultThreads();
  p.n_threads_batch = options.n_threads_batch > 0 ? options.n_threads_batch : p.n_threads;
  p.flash_attn_type = options.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                         : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.type_k = GgmlType(options.type_k);
  p.type_v = GgmlType(options.type_v);
  p.swa_full = options.swa_full;
  p.kv_unified = false;  // one stream per sequence: slots never see each other's cells
  p.no_perf = true;
  p.n_rs_seq = options.n_rs_seq;
  p.n_rs_capture = options.n_rs_capture;
  if (options.mtp) p.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  std::unique_ptr<Context> ctx(new Context(model, options));
  ctx->ctx_ = llama_init_from_model(model.raw(), p);
  if (ctx->ctx_ == nullptr) {
    return Status::ResourceExhausted(
        "cannot create a llama context of " + std::to_string(options.n_ctx_per_seq) +
        " tokens per slot x " + std::to_string(options.n_seq) +
        " slots (not enough memory?): lower the context (--ctx) or the slots (--slots)");
  }
  return ctx;
}

Context::Context(const Model& model, const ContextOptions& options)
    : model_(model), options_(options), owner_(std::this_thread::get_id()) {}

Context::~Context() {
  if (ctx_ == nullptr) return;
  RequireOwner();
  llama_free(ctx_);
}

uint32_t Context::n_rs_seq() const { return llama_n_rs_seq(ctx_); }

void Context::RequireOwner() const {
  if (std::this_thread::get_id() == owner_) return;
  std::fprintf(stderr, "prefixd: BUG: the llama context was used off its owning thread\n");
  std::abort();
}

Status Context::DecodeChunk(int32_t seq, std::span<const Token> tokens, int32_t pos0,
                            bool want_last_logits) {
  RequireOwner();
  if (tokens.empty()) return Status::InvalidArgument("DecodeChunk: no tokens");
  if (tokens.size() > options_.n_batch) {
    return Status::InvalidArgument("DecodeChunk: " + std::to_string(tokens.size()) +
                                   " tokens exceed n_batch " + std::to_string(options_.n_batch));
  }
  Batch batch(int32_t(tokens.size()));
  const RopeLayout& rope = RopeOf(seq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.Add(tokens[i], pos0 + int32_t(i), seq, want_last_logits && i + 1 == tokens.size(),
              rope);
  }
  return Decode(batch.b);
}

Status Context::DecodeEmbeddings(int32_t seq, const float* rows, int32_t n, int32_t pos0,
                                 bool non_causal, bool want_last_logits,
                                 std::span<const int32_t> rope) {
  RequireOwner();
  const bool mrope = model_.rope_positions() > 1;
  if (rope.size() != (mrope ? size_t(n) * model_.rope_positions() : 0)) {
    return Status::Internal("DecodeEmbeddings: " + std::to_string(rope.size()) +
                            " rope positions for " + std::to_string(n) + " rows");
  }
  if (n <= 0 || uint32_t(n) > options_.n_batch || (non_causal && uint32_t(n) > options_.n_ubatch)) {
    return Status::InvalidArgument("DecodeEmbeddings: " + std::to_string(n) +
                                   " rows do not fit one call (n_batch " +
                                   std::to_string(options_.n_batch) + ", n_ubatch " +
                                   std::to_string(options_.n_ubatch) + ")");
  }
  const int32_t n_embd = llama_model_n_embd_inp(model_.raw());
  llama_batch b = llama_batch_init(n, n_embd, 1);
  std::memcpy(b.embd, rows, size_t(n) * size_t(n_embd) * sizeof(float));
  std::vector<llama_pos> cells(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    cells[size_t(i)] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq;
    b.logits[i] = want_last_logits && i + 1 == n;
  }
  llama_pos* own_pos = b.pos;
  if (mrope) {
    b.pos = const_cast<llama_pos*>(rope.data());  // read only; sections of n
    b.pos_cell = cells.data();
  } else {
    std::copy(cells.begin(), cells.end(), b.pos);
  }
  b.n_tokens = n;
  if (non_causal) llama_set_causal_attn(ctx_, false);
  const int32_t rc = llama_decode(ctx_, b);
  if (non_causal) llama_set_causal_attn(ctx_, true);
  b.pos = own_pos;
  b.pos_cell = nullptr;
  llama_batch_free(b);
  PREFIXD_RETURN_IF_ERROR(model_.BackendStatus());
  return DecodeStatus(rc);
}

Status Context::Decode(const llama_batch& batch) {
  const int32_t rc = llama_decode(ctx_, batch);
  // A lost rpc-server makes the call fail, or (the loss seen only when the outputs were read)
  // leaves zeros for logits: either way the call computed nothing.
  PREFIXD_RETURN_IF_ERROR(model_.BackendStatus());
  PREFIXD_RETURN_IF_ERROR(DecodeStatus(rc));
  if (observer_ != nullptr) observer_->Decoded(batch);
  return Status::OK();
}

Status Context::DecodeBatch(std::span<const BatchToken> tokens) {
  RequireOwner();
  if (tokens.empty()) return Status::InvalidArgument("DecodeBatch: no tokens");
  Batch batch(int32_t(tokens.size()));
  for (const BatchToken& t : tokens) batch.Add(t.token, t.pos, t.seq, t.want_logits, RopeOf(t.seq));
  return Decode(batch.b);
}

void Context::SetRopeLayout(int32_t seq, RopeLayout layout) {
  RequireOwner();
  if (seq < 0) return;
  if (size_t(seq) >= rope_.size()) {
    if (layout.identity()) return;
    rope_.resize(size_t(seq) + 1);
  }
  rope_[size_t(seq)] = std::move(layout);
}

const RopeLayout& Context::RopeOf(int32_t seq) const {
  static const RopeLayout kIdentity;
  return seq >= 0 && size_t(seq) < rope_.size() ? rope_[size_t(seq)] : kIdentity;
}

const float* Context::Logits(int32_t i) const {
  RequireOwner();
  return llama_get_logits_ith(ctx_, i);
}

void Context::SeqClear(int32_t seq) {
  RequireOwner();
  llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  if (observer_ != nullptr) observer_->Cleared(seq);
}

bool Context::SeqTruncate(int32_t seq, int32_t p0) {
  RequireOwner();
  const bool ok = llama_memory_seq_rm(llama_get_memory(ctx_), seq, p0, -1);
  if (ok && observer_ != nullptr) observer_->Truncated(seq, p0);
  return ok;
}

int32_t Context::SeqPosMax(int32_t seq) const {
  return llama_memory_seq_pos_max(llama_get_memory(ctx_), seq);
}

namespace {
llama_state_seq_flags FlagsFor(StatePart part) {
  return part == StatePart::kPartial ? LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
                                     : LLAMA_STATE_SEQ_FLAGS_NONE;
}
}  // namespace

Result<std::vector<uint8_t>> Context::GetState(int32_t seq, StatePart part) const {
  return GetState(seq, part, nullptr);
}

namespace {

// One state write of `seq` (the positions [p0, p1) of its KV caches, or all with p0 < 0), with
// the cell layout of its sliding-window caches into `*layout` when asked.
// A buffer for `size` bytes of state, from the pool (a capture's bytes often go where an evicted
// payload's were), with room after them for a Snapshot's trailer (JoinSnapshot), so that a
// recurrent state, which has no cell layout to append, is not copied into a larger buffer.
std::vector<uint8_t> StateBuffer(size_t size) {
  constexpr size_t kRoomAfter = 64;
  std::vector<uint8_t> bytes = BufferPool::Shared().Take(size + kRoomAfter);
  bytes.resize(size);
  return bytes;
}

Result<std::vector<uint8_t>> WriteState(llama_context* ctx, const Model& model, int32_t seq,
                                        llama_state_seq_flags flags, int32_t p0, int32_t p1,
                                        std::vector<uint8_t>* layout,
                                        std::vector<uint8_t> reuse = {}) {
  const bool ranged = p0 >= 0;
  const size_t size = ranged ? llama_state_seq_get_size_range(ctx, seq, flags, p0, p1)
                             : llama_state_seq_get_size_ext(ctx, seq, flags);
  std::vector<uint8_t> bytes;
  if (reuse.capacity() >= size) {
    bytes = std::move(reuse);
    bytes.resize(size);
  } else {
    BufferPool::Shared().Give(std::move(reuse));  // too small for this one: another may fit
    bytes = StateBuffer(size);
  }
  if (layout) layout->clear();
  size_t n = 0;
  {
    // Only around the write that keeps the bytes: the size above runs the same writer.
    std::optional<CellLayoutRecorder> recorder;
    if (layout) recorder.emplace(layout);
    n = ranged ? llama_state_seq_get_data_range(ctx, bytes.data(), bytes.size(), seq, flags, p0, p1)
               : llama_state_seq_get_data_ext(ctx, bytes.data(), bytes.size(), seq, flags);
  }
  if (n != bytes.size()) {
    return Status::Internal(std::string(ranged ? "llama_state_seq_get_data_range"
                                               : "llama_state_seq_get_data_ext") +
                            " wrote " + std::to_string(n) + " bytes, expected " +
                            std::to_string(bytes.size()));
  }
  PREFIXD_RETURN_IF_ERROR(model.BackendStatus());  // else zeros from a lost device
  return bytes;
}

}  // namespace

Result<std::vector<uint8_t>> Context::GetState(int32_t seq, StatePart part,
                                               std::vector<uint8_t>* layout) const {
  RequireOwner();
  return WriteState(ctx_, model_, seq, FlagsFor(part), -1, -1, layout);
}

Result<std::vector<uint8_t>> Context::GetStateRange(int32_t seq, int32_t p0, int32_t p1,
                                                    std::vector<uint8_t> reuse) const {
  RequireOwner();
  if (p0 < 0 || p0 >= p1) {
    return Status::InvalidArgument("GetStateRange: empty range [" + std::to_string(p0) + ", " +
                                   std::to_string(p1) + ")");
  }
  return WriteState(ctx_, model_, seq, LLAMA_STATE_SEQ_FLAGS_NONE, p0, p1, nullptr,
                    std::move(reuse));
}

namespace {
// A layout whose partial state is a sliding window and nothing else (gemma3's; dots3note's, whose
// MLA and index caches are rows): its window at P is still in the cache after a call past P,
// so a capture needs nothing set before the call.
bool PartialIsAWindow(MemoryLayout l) {
  return l == MemoryLayout::kIswa || l == MemoryLayout::kDsaIswa;
}
}  // namespace

// Sliding-window caches keep what a capture needs without being asked; recurrent states only
// where llama.cpp's graph keeps them.
bool Context::CapturesInCall() const {
  return PartialIsAWindow(model_.layout()) || llama_rs_capture_supported(ctx_);
}

int32_t Context::SetCallCaptures(int32_t seq, std::span<const int32_t> positions) {
  RequireOwner();
  call_captures_.seq = seq;
  call_captures_.positions.assign(positions.begin(), positions.end());
  if (PartialIsAWindow(model_.layout())) return int32_t(positions.size());
  const int32_t n = llama_rs_capture_set(ctx_, seq, positions.data(), int32_t(positions.size()));
  call_captures_.positions.resize(size_t(std::max(n, 0)));
  return std::max(n, 0);
}

int32_t Context::CallCaptureCapacity() const {
  if (PartialIsAWindow(model_.layout())) return std::numeric_limits<int32_t>::max();
  return int32_t(options_.n_rs_capture);
}

Result<std::vector<uint8_t>> Context::CallCapture(int32_t i, std::vector<uint8_t>* layout) const {
  RequireOwner();
  if (layout) layout->clear();
  if (i < 0 || size_t(i) >= call_captures_.positions.size()) {
    return Status::NotFound("no capture " + std::to_string(i) + " was set");
  }
  const int32_t pos = call_captures_.positions[size_t(i)];
  if (PartialIsAWindow(model_.layout())) {
    // The window as of pos, read after the call (llama.cpp patch 0009's ranged window).
    if (pos <= 0 || SeqPosMax(call_captures_.seq) < pos) {
      return Status::NotFound("capture " + std::to_string(i) + " is not inside a call decoded");
    }
    return WriteState(ctx_, model_, call_captures_.seq, FlagsFor(StatePart::kPartial), 0, pos,
                      layout);
  }
  if (!llama_rs_capture_taken(ctx_, i)) {
    return Status::NotFound("capture " + std::to_string(i) + " was not taken in the call");
  }
  const llama_state_seq_flags flags = FlagsFor(StatePart::kPartial);
  std::vector<uint8_t> bytes = StateBuffer(llama_rs_capture_get_size(ctx_, i, flags));
  size_t n = 0;
  {
    // A hybrid's sliding-window cache writes the window at the capture (patch 0014), with its
    // cell layout, as a call that ended there would.
    std::optional<CellLayoutRecorder> recorder;
    if (layout) recorder.emplace(layout);
    n = llama_rs_capture_get_data(ctx_, i, bytes.data(), bytes.size(), flags);
  }
  if (bytes.empty() || n != bytes.size()) {
    return Status::Internal("llama_rs_capture_get_data wrote " + std::to_string(n) +
                            " bytes, expected " + std::to_string(bytes.size()));
  }
  PREFIXD_RETURN_IF_ERROR(model_.BackendStatus());
  return bytes;
}

namespace {
Status LayoutRefused(size_t layout_bytes) {
  return Status::Corruption("the cell layout (" + std::to_string(layout_bytes) +
                            " bytes) does not fit the sequence state");
}
}  // namespace

Status Context::SetState(int32_t seq, std::span<const uint8_t> bytes, StatePart part,
                         std::span<const uint8_t> layout) {
  RequireOwner();
  if (part == StatePart::kWhole) SeqClear(seq);
  CellLayoutApplier applier(layout);
  size_t n = llama_state_seq_set_data_ext(ctx_, bytes.data(), bytes.size(), seq, FlagsFor(part));
  // A lost device took nothing: an IOError, never Corruption (which would drop good records).
  PREFIXD_RETURN_IF_ERROR(model_.BackendStatus());
  if (n == bytes.size() && !applier.complete()) {
    SeqClear(seq);
    return LayoutRefused(layout.size());
  }
  if (n != bytes.size()) {
    SeqClear(seq);
    return Status::Corruption("llama.cpp refused the sequence state (" +
                              std::to_string(bytes.size()) + " bytes, read " + std::to_string(n) +
                              ")");
  }
  return Status::OK();
}

Status Context::RestorePartial(int32_t seq, std::span<const uint8_t> bytes) {
  RequireOwner();
  size_t n = llama_state_seq_set_data_ext(ctx_, bytes.data(), bytes.size(), seq,
                                          LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  PREFIXD_RETURN_IF_ERROR(model_.BackendStatus());
  if (n != bytes.size()) {
    return Status::Corruption("llama.cpp refused the partial state (" +
                              std::to_string(bytes.size()) + " bytes, read " + std::to_string(n) +
                              ")");
  }
  return Status::OK();
}

Status Context::SetStatePieces(int32_t seq, std::span<const std::span<const uint8_t>> pieces,
                               size_t size, std::span<const FileBackedPayload> files,
                               std::span<uint32_t> crcs, std::span<const uint8_t> layout) {
  RequireOwner();
  SeqClear(seq);
  CellLayoutApplier applier(layout);
  size_t n = SetStateGathered(ctx_, seq, pieces, LLAMA_STATE_SEQ_FLAGS_NONE, files, crcs);
  PREFIXD_RETURN_IF_ERROR(model_.BackendStatus());
  if (n == size && !applier.complete()) {
    SeqClear(seq);
    return LayoutRefused(layout.size());
  }
  if (n != size) {
    SeqClear(seq);
    return Status::Corruption("llama.cpp refused the sequence state (" + std::to_string(size) +
                              " bytes in " + std::to_string(pieces.size()) + " pieces, read " +
                              std::to_string(n) + ")");
  }
  return Status::OK();
}

}  // namespace prefixd::engine
