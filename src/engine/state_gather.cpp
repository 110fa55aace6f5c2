#include "engine/state_gather.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ggml-backend.h"
// llama.cpp internals (the pinned source tree, docs/llama-patches.md).
#include "llama-io.h"
#include "llama-memory.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/parallel.h"
#include "util/memcopy.h"

namespace prefixd::engine {

namespace {

constexpr uint32_t kSeqStateMagic = 0xaf143cd8;  // LLAMA_STATE_SEQ_MAGIC
// File reads go this much at a time: the slice is checksummed where it landed while it is still
// in the CPU cache.
constexpr size_t kFileSlice = size_t(256) << 10;
// Threads that read file-backed slices into host tensors, the calling thread one of them: the
// copies out of the page cache are memory-bound, and the decode threads are idle during a
// restore anyway.
constexpr size_t kReadThreads = 4;

// What was taken of a file-backed payload: [offset, offset + size) with its Crc32c.
struct Segment {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc = 0;
};

// Where a write goes: host memory, or a tensor of another backend (through
// ggml_backend_tensor_set at `offset`).
struct Dest {
  uint8_t* host = nullptr;
  ggml_tensor* tensor = nullptr;
  size_t offset = 0;
  void Advance(size_t n) {
    if (host) host += n;
    offset += n;
  }
};

// llama_io_read_i over a list of pieces. Like llama.cpp's buffer reader it throws at the end of
// the bytes; unlike it, a tensor range is set at once, piece by piece, with no copy in between.
class PieceReader : public llama_io_read_i {
 public:
  PieceReader(std::span<const std::span<const uint8_t>> pieces,
              std::span<const FileBackedPayload> files)
      : pieces_(pieces), files_(files), taken_(files.size()) {
    for (size_t i = 0; i < files.size(); ++i) by_address_.push_back(i);
    std::sort(by_address_.begin(), by_address_.end(), [&](size_t a, size_t b) {
      return files[a].stand_in.data() < files[b].stand_in.data();
    });
  }

  void read(void* dst, size_t size) override {
    Dest d{static_cast<uint8_t*>(dst), nullptr, 0};
    Walk(size, [&](const uint8_t* p, size_t n) { Deliver(p, n, d, /*tensor_rows=*/false); });
  }

  // Host tensors (the CPU backend's) are written in place with streaming stores: the restored
  // rows are read by the next decode, not now, and a restore's pieces are below the size from
  // which memcpy streams by itself. Others go through ggml_backend_tensor_set.
  void read_tensor(ggml_tensor* tensor, size_t offset, size_t size) override {
    Dest d{HostData(tensor, offset, size), tensor, offset};
    Walk(size, [&](const uint8_t* p, size_t n) { Deliver(p, n, d, /*tensor_rows=*/true); });
  }

  size_t n_bytes() override { return n_read_; }

  // Crc32c of each file-backed payload (see SetStateGathered). Throws when a piece was taken
  // twice or a read for the check failed.
  void Checksums(std::span<uint32_t> crcs) {
    for (size_t i = 0; i < files_.size(); ++i) crcs[i] = Checksum(i);
  }

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

  // The file-backed payload whose stand-in holds p, or -1.
  ptrdiff_t FileOf(const uint8_t* p) const {
    auto it = std::upper_bound(by_address_.begin(), by_address_.end(), p, [&](const uint8_t* q, size_t i) {
      return q < files_[i].stand_in.data();
    });
    if (it == by_address_.begin()) return -1;
    const size_t i = *std::prev(it);
    const auto& s = files_[i].stand_in;
    return p < s.data() + s.size() ? ptrdiff_t(i) : -1;
  }

  // A tensor's rows go to host memory with streaming stores (read by the next decode, not now).
  static void Put(Dest& d, const uint8_t* p, size_t n, bool tensor_rows) {
    if (d.host && tensor_rows) {
      CopyStreaming(d.host, p, n);
    } else if (d.host) {
      std::memcpy(d.host, p, n);
    } else {
      ggml_backend_tensor_set(d.tensor, p, d.offset, n);
    }
    d.Advance(n);
  }

  // Writes n source bytes at p to d: a tensor's rows (streaming stores into host memory, reads
  // from a file deferred) or bytes llama.cpp reads into its own variables. Bytes of a
  // file-backed payload past its front come from the file; its front comes from the stand-in.
  // Both are checksummed as they are set.
  void Deliver(const uint8_t* p, size_t n, Dest& d, bool tensor_rows) {
    while (n > 0) {
      const ptrdiff_t f = FileOf(p);
      if (f < 0) return Put(d, p, n, tensor_rows);
      const FileBackedPayload& fb = files_[size_t(f)];
      const uint64_t at = uint64_t(p - fb.stand_in.data());
      const size_t in_file = size_t(std::min<uint64_t>(n, fb.stand_in.size() - at));
      if (at < fb.front) {
        const size_t k = std::min<size_t>(in_file, fb.front - at);
        Take(size_t(f), at, Crc32c(p, k), k);
        Put(d, p, k, tensor_rows);
        p += k, n -= k;
        continue;
      }
      if (d.host != nullptr && tensor_rows) {  // read once llama.cpp placed every piece
        QueueRead(size_t(f), at, in_file, d.host);
        d.Advance(in_file);
      } else {  // bytes llama.cpp reads into its own variables, or a tensor off the host
        ReadFromFile(size_t(f), at, in_file, d);
      }
      p += in_file, n -= in_file;
    }
  }

  // Reads [at, at + n) of file-backed payload f to d now, a slice at a time, checksumming each
  // slice where it landed: host memory directly, another backend's tensor through a bounce
  // buffer.
  void ReadFromFile(size_t f, uint64_t at, size_t n, Dest& d) {
    const FileBackedPayload& fb = files_[f];
    while (n > 0) {
      const size_t k = std::min(n, kFileSlice);
      uint8_t* dst = d.host;
      if (dst == nullptr) bounce_.resize(kFileSlice), dst = bounce_.data();
      Result<size_t> got = fb.file->Read(fb.file_offset + at, k, dst);
      if (!got.ok()) throw std::runtime_error(got.status().ToString());
      if (*got != k) throw std::runtime_error("record file shorter than its payload");
      Take(f, at, Crc32c(dst, k), k);
      if (d.host == nullptr) ggml_backend_tensor_set(d.tensor, dst, d.offset, k);
      d.Advance(k);
      at += k, n -= k;
    }
  }

  // A slice of a file-backed payload to read into host memory (RunQueuedReads).
  struct Slice {
    size_t file;
    uint64_t at;
    size_t n;
    uint8_t* dst;
    uint32_t crc = 0;
    bool ok = false;
  };

  // Reads into host tensors wait until llama.cpp has placed every piece: nothing reads the
  // tensors before the set returns, and the slices then run on several threads.
  void QueueRead(size_t f, uint64_t at, size_t n, uint8_t* dst) {
    for (size_t done = 0; done < n; done += kFileSlice) {
      queued_.push_back({f, at + done, std::min(kFileSlice, n - done), dst + done});
    }
  }

 public:
  // Reads the queued slices, each checksummed where it landed. Throws when a read failed or
  // came short.
  void RunQueuedReads() {
    ParallelFor(queued_.size(), SpareThreads(kReadThreads), [&](size_t i) {
      Slice& s = queued_[i];
      const FileBackedPayload& fb = files_[s.file];
      Result<size_t> got = fb.file->Read(fb.file_offset + s.at, s.n, s.dst);
      s.ok = got.ok() && *got == s.n;
      if (s.ok) s.crc = Crc32c(s.dst, s.n);
    });
    for (const Slice& s : queued_) {
      if (!s.ok) throw std::runtime_error("cannot read a record file into the sequence");
      Take(s.file, s.at, s.crc, s.n);
    }
    queued_.clear();
  }

 private:
  // Records that [at, at + n) of payload f was set with this crc; joins it to the segment it
  // continues.
  void Take(size_t f, uint64_t at, uint32_t crc, uint64_t n) {
    std::vector<Segment>& t = taken_[f];
    if (!t.empty() && t.back().offset + t.back().size == at) {
      t.back().crc = Crc32cCombine(t.back().crc, crc, n);
      t.back().size += n;
    } else {
      t.push_back({at, n, crc});
    }
  }

  // Crc32c of bytes [at, at + n) of payload f that no piece took: the front from the stand-in,
  // the rest read from the file.
  uint32_t Untaken(size_t f, uint64_t at, uint64_t n) {
    const FileBackedPayload& fb = files_[f];
    uint32_t crc = 0;
    while (n > 0) {
      size_t k;
      uint32_t c;
      if (at < fb.front) {
        k = size_t(std::min<uint64_t>(n, fb.front - at));
        c = Crc32c(fb.stand_in.data() + at, k);
      } else {
        k = size_t(std::min<uint64_t>(n, kFileSlice));
        bounce_.resize(kFileSlice);
        Result<size_t> got = fb.file->Read(fb.file_offset + at, k, bounce_.data());
        if (!got.ok() || *got != k) throw std::runtime_error("cannot read a record for its check");
        c = Crc32c(bounce_.data(), k);
      }
      crc = Crc32cCombine(crc, c, k);
      at += k, n -= k;
    }
    return crc;
  }

  uint32_t Checksum(size_t f) {
    std::vector<Segment>& t = taken_[f];
    std::sort(t.begin(), t.end(), [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
    const uint64_t size = files_[f].stand_in.size();
    uint32_t crc = 0;
    uint64_t at = 0;
    for (const Segment& s : t) {
      if (s.offset < at) throw std::runtime_error("a payload byte was set twice");
      if (s.offset > at) crc = Crc32cCombine(crc, Untaken(f, at, s.offset - at), s.offset - at);
      crc = Crc32cCombine(crc, s.crc, s.size);
      at = s.offset + s.size;
    }
    if (at < size) crc = Crc32cCombine(crc, Untaken(f, at, size - at), size - at);
    return crc;
  }

  std::span<const std::span<const uint8_t>> pieces_;
  std::span<const FileBackedPayload> files_;
  std::vector<size_t> by_address_;             // files_ indices by stand-in address
  std::vector<std::vector<Segment>> taken_;    // per file-backed payload
  std::vector<uint8_t> bounce_;
  std::vector<Slice> queued_;
  size_t piece_ = 0;  // the piece the next byte is in
  size_t off_ = 0;    // offset of the next byte in it
  size_t n_read_ = 0;
};

}  // namespace

size_t SetStateGathered(llama_context* ctx, int32_t seq,
                        std::span<const std::span<const uint8_t>> pieces,
                        llama_state_seq_flags flags, std::span<const FileBackedPayload> files,
                        std::span<uint32_t> crcs) {
  llama_synchronize(ctx);
  llama_memory_t mem = llama_get_memory(ctx);
  PieceReader io(pieces, files);
  try {
    uint32_t magic = 0;
    io.read(&magic, sizeof magic);
    if (magic != kSeqStateMagic) throw std::runtime_error("wrong sequence state magic");
    int32_t seq_read = 0;
    io.read(&seq_read, sizeof seq_read);
    if (mem) mem->state_read(io, seq, flags);
    io.RunQueuedReads();
    io.Checksums(crcs);
  } catch (const std::exception& e) {
    Logf(LogLevel::kWarning, "gathered state set refused: %s", e.what());
    return 0;
  }
  return io.n_bytes();
}

}  // namespace prefixd::engine
