#include "engine/state_gather.h"

#include <cstring>
#include <stdexcept>

#include "ggml-backend.h"
// llama.cpp internals (the pinned source tree, docs/llama-patches.md).
#include "llama-io.h"
#include "llama-memory.h"
#include "util/log.h"
#include "util/memcopy.h"

namespace prefixd::engine {

namespace {

constexpr uint32_t kSeqStateMagic = 0xaf143cd8;  // LLAMA_STATE_SEQ_MAGIC

// llama_io_read_i over a list of pieces. Like llama.cpp's buffer reader it throws at the end of
// the bytes; unlike it, a tensor range is set at once, piece by piece, with no copy in between.
class PieceReader : public llama_io_read_i {
 public:
  explicit PieceReader(std::span<const std::span<const uint8_t>> pieces) : pieces_(pieces) {}

  void read(void* dst, size_t size) override {
    auto* out = static_cast<uint8_t*>(dst);
    Walk(size, [&](const uint8_t* p, size_t n) {
      std::memcpy(out, p, n);
      out += n;
    });
  }

  // Host tensors (the CPU backend's) are written in place with streaming stores: the restored
  // rows are read by the next decode, not now, and a restore's pieces are below the size from
  // which memcpy streams by itself (issue 15). Others go through ggml_backend_tensor_set.
  void read_tensor(ggml_tensor* tensor, size_t offset, size_t size) override {
    uint8_t* host = HostData(tensor, offset, size);
    Walk(size, [&](const uint8_t* p, size_t n) {
      if (host != nullptr) {
        CopyStreaming(host, p, n);
        host += n;
      } else {
        ggml_backend_tensor_set(tensor, p, offset, n);
      }
      offset += n;
    });
  }

  size_t n_bytes() override { return n_read_; }

 private:
  // Where [offset, offset + size) of a host tensor lies in memory; null for other buffers. The
  // range is checked as ggml_backend_tensor_set checks it (there an abort, here a refusal).
  static uint8_t* HostData(ggml_tensor* tensor, size_t offset, size_t size) {
    if (tensor->data == nullptr || tensor->buffer == nullptr ||
        !ggml_backend_buffer_is_host(tensor->buffer)) {
      return nullptr;
    }
    if (offset > ggml_nbytes(tensor) || size > ggml_nbytes(tensor) - offset) {
      throw std::runtime_error("tensor write out of bounds");
    }
    return static_cast<uint8_t*>(tensor->data) + offset;
  }

  // Calls f(bytes, n) for the next `size` bytes, a piece at a time.
  template <typename F>
  void Walk(size_t size, F f) {
    while (size > 0) {
      if (piece_ == pieces_.size()) throw std::runtime_error("unexpectedly reached end of pieces");
      const std::span<const uint8_t> p = pieces_[piece_];
      const size_t n = std::min(size, p.size() - off_);
      f(p.data() + off_, n);
      size -= n, off_ += n, n_read_ += n;
      if (off_ == p.size()) ++piece_, off_ = 0;
    }
  }

  std::span<const std::span<const uint8_t>> pieces_;
  size_t piece_ = 0;  // the piece the next byte is in
  size_t off_ = 0;    // offset of the next byte in it
  size_t n_read_ = 0;
};

}  // namespace

size_t SetStateGathered(llama_context* ctx, int32_t seq,
                        std::span<const std::span<const uint8_t>> pieces,
                        llama_state_seq_flags flags) {
  llama_synchronize(ctx);
  llama_memory_t mem = llama_get_memory(ctx);
  PieceReader io(pieces);
  try {
    uint32_t magic = 0;
    io.read(&magic, sizeof magic);
    if (magic != kSeqStateMagic) throw std::runtime_error("wrong sequence state magic");
    int32_t seq_read = 0;
    io.read(&seq_read, sizeof seq_read);
    if (mem) mem->state_read(io, seq, flags);
  } catch (const std::exception& e) {
    Logf(LogLevel::kWarning, "gathered state set refused: %s", e.what());
    return 0;
  }
  return io.n_bytes();
}

}  // namespace prefixd::engine
