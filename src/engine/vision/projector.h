// Projector: a vision model's multimodal projector (an mmproj GGUF) loaded by libmtmd beside the
// text model, as llama-server's --mmproj. It turns an image file into what the prompt holds for
// it (the projector's own wrapping text, e.g. gemma3's <start_of_image>, and one row per
// embedding: ImageTokens) and, when a prefill has to decode those rows, into embeddings.
//
// An image's identity is the SHA-256 of its decoded pixels and size, of the projector file and
// of the image-token settings: the same pixels sent as another file format are the same image;
// another projector or setting never is. Embeddings are encoded lazily (only when a prefill
// decodes rows the cache did not restore) and kept in a byte-bounded LRU keyed by identity, so
// an image is encoded once per server while it stays there.
//
// Thread-safety: every method may be called from any thread; libmtmd's context is used under
// one mutex (Tokenize on the request threads, Embeddings on the scheduler's). Owns the
// mtmd_context; borrows the Model, which must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/codec/types.h"
#include "engine/model/model.h"
#include "util/hash.h"
#include "util/status.h"

struct mtmd_context;
struct mtmd_input_chunk;

namespace prefixd::engine {

struct ProjectorOptions {
  std::string path;            // --mmproj
  bool offload = true;         // --no-mmproj-offload: false keeps the encoder on the CPU
  int image_min_tokens = -1;   // --image-min-tokens; -1: the projector's own
  int image_max_tokens = -1;   // --image-max-tokens; -1: the projector's own
  int n_threads = 0;           // encoder threads; 0: all cores
  // Embeddings kept for reuse (their floats' bytes); the least recently used go first.
  uint64_t cache_bytes = 256ull << 20;
};

class Projector;

// One image of a prompt, ready to encode: what Projector::Embeddings needs, and its identity.
class PreparedImage {
 public:
  ~PreparedImage();
  PreparedImage(const PreparedImage&) = delete;
  PreparedImage& operator=(const PreparedImage&) = delete;
  const Digest& identity() const { return identity_; }
  int32_t n_tokens() const { return n_tokens_; }
  // Whether its rows are decoded with non-causal attention (gemma3): then they must be
  // decoded in one call, never split.
  bool non_causal() const { return non_causal_; }
  uint32_t width() const { return width_; }
  uint32_t height() const { return height_; }

 private:
  friend class Projector;
  PreparedImage() = default;
  Digest identity_{};
  int32_t n_tokens_ = 0;
  bool non_causal_ = false;
  uint32_t width_ = 0, height_ = 0;
  mtmd_input_chunk* chunk_ = nullptr;  // owned: the preprocessed image
};

// What the prompt holds for one image file, in order: the projector's text tokens (its
// wrapping, e.g. <start_of_image>) and its image chunks, each a PreparedImage whose rows are
// ImageTokens. Most projectors make one chunk; a tiling one (lfm2 on a large picture) makes a
// chunk per tile and a thumbnail, with text between them. Each chunk's identity is the file's
// identity and the chunk's index.
struct ImagePiece {
  std::vector<Token> text;                      // when image is null
  std::shared_ptr<const PreparedImage> image;   // else
};
struct ImageInsert {
  std::vector<ImagePiece> pieces;
  int32_t n_chunks() const;  // the pieces that are image chunks
};

struct ProjectorStats {
  uint64_t images_prepared = 0;  // images read from requests
  uint64_t images_encoded = 0;   // encoder runs
  uint64_t encoder_hits = 0;     // embeddings found in the encoder cache
  uint64_t cached_bytes = 0;     // embeddings held now
};

class Projector {
 public:
  // Loads the projector for `model`. InvalidArgument when the file is not a projector, reads no
  // images, does not fit the model (libmtmd compares widths), or uses positions prefixd does
  // not track yet (M-RoPE: Qwen2/3-VL, Qwen3.5): a refusal at start, never an abort later.
  static Result<std::unique_ptr<Projector>> Load(const Model& model,
                                                 const ProjectorOptions& options);
  ~Projector();
  Projector(const Projector&) = delete;
  Projector& operator=(const Projector&) = delete;

  // The image file `bytes` (PNG, JPEG, GIF, WebP, ...: libmtmd's decoder) as the prompt holds
  // it. InvalidArgument when the bytes do not decode.
  Result<ImageInsert> Prepare(std::string_view bytes);
  // The image's embeddings: n_tokens() rows of n_embd() floats, from the encoder cache or
  // encoded now. Internal error when the encoder fails.
  Result<std::shared_ptr<const std::vector<float>>> Embeddings(const PreparedImage& image);

  int32_t n_embd() const { return n_embd_; }
  const std::string& path() const { return options_.path; }
  // The projector type as libmtmd names it in the GGUF (clip.projector_type), for the log.
  const std::string& type() const { return type_; }
  ProjectorStats stats() const;

 private:
  explicit Projector(const ProjectorOptions& options);
  struct Cache;
  ProjectorOptions options_;
  std::string type_;
  Digest file_digest_{};
  int32_t n_embd_ = 0;
  int32_t n_vocab_ = 0;
  mutable std::mutex mu_;
  mtmd_context* ctx_ = nullptr;  // guarded by mu_
  std::unique_ptr<Cache> cache_;  // guarded by mu_
  ProjectorStats stats_;          // guarded by mu_
};

}  // namespace prefixd::engine
