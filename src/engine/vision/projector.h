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
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/codec/types.h"
#include "engine/model/model.h"
#include "store/record_store.h"
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
  // Where its embeddings are kept: the identity in the tenant's scope (the encoder cache is
  // per tenant, as the prompt cache is: one tenant's hit never tells it of another's image).
  const Digest& cache_key() const { return cache_key_; }
  int32_t n_tokens() const { return n_tokens_; }
  // The rope steps the image takes (libmtmd's n_pos): n_tokens() but on an M-RoPE projector,
  // whose rows share one time step (max(nx, ny) for Qwen's grids; rope_layout.h).
  int32_t n_pos() const { return n_pos_; }
  // The rope positions of rows [r0, r1) of an image whose first row is at time t0, as 4
  // sections of r1 - r0 (time, height, width, unused): what Context::DecodeEmbeddings takes on
  // an M-RoPE model. REQUIRES 0 <= r0 < r1 <= n_tokens().
  std::vector<int32_t> RopePositions(int32_t t0, int32_t r0, int32_t r1) const;
  // Whether its rows are decoded with non-causal attention (gemma3): then they must be
  // decoded in one call, never split.
  bool non_causal() const { return non_causal_; }
  uint32_t width() const { return width_; }
  uint32_t height() const { return height_; }

 private:
  friend class Projector;
  PreparedImage() = default;
  Digest identity_{};
  Digest cache_key_{};
  int32_t n_tokens_ = 0;
  int32_t n_pos_ = 0;
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
  uint64_t encoder_hits = 0;     // embeddings found in RAM
  uint64_t encoder_hits_disk = 0;    // ... on disk (the first store)
  uint64_t encoder_hits_remote = 0;  // ... in the shared tier (the second)
  uint64_t cached_bytes = 0;     // embeddings held in RAM now
};

class Projector {
 public:
  // Loads the projector for `model`. InvalidArgument when the file is not a projector, reads no
  // images, or does not fit the model (libmtmd compares widths, and an M-RoPE projector needs
  // an M-RoPE model): a refusal at start, never an abort later.
  static constexpr size_t kPreparedKept = 16;
  static Result<std::unique_ptr<Projector>> Load(const Model& model,
                                                 const ProjectorOptions& options);
  ~Projector();
  Projector(const Projector&) = delete;
  Projector& operator=(const Projector&) = delete;

  // The image file `bytes` (PNG, JPEG, GIF, BMP: libmtmd's decoder) as the prompt holds it,
  // its embeddings kept in `scope` (the tenant's salt). InvalidArgument when the bytes do not
  // decode. The last kPreparedKept files prepared are remembered by their bytes' digest: an
  // agent resends every image of its conversation on every turn, and each is decoded and
  // preprocessed once.
  Result<ImageInsert> Prepare(std::string_view bytes, std::string_view scope = "");
  // The image's embeddings: n_tokens() rows of n_embd() floats, from the encoder cache (RAM,
  // then each store of SetStores in order: a record whose checks or size do not hold is a
  // miss) or encoded now and written behind to every store. Internal error when the encoder
  // fails.
  Result<std::shared_ptr<const std::vector<float>>> Embeddings(const PreparedImage& image);
  // The disk and shared tiers where embeddings are kept beside the prompt cache's records
  // (store::RecordKind::kEmbeddings), in that order; {} forgets them (before they go).
  void SetStores(std::vector<store::RecordStore*> stores);

  int32_t n_embd() const { return n_embd_; }
  // Whether its images take M-RoPE positions (Qwen2/3-VL, Qwen3.5: rope_layout.h).
  bool mrope() const { return mrope_; }
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
  Digest embeddings_domain_{};  // the records' domain: the projector's, apart from every prompt's
  int32_t n_embd_ = 0;
  int32_t n_vocab_ = 0;
  bool mrope_ = false;
  mutable std::mutex mu_;
  mtmd_context* ctx_ = nullptr;  // guarded by mu_
  std::unique_ptr<Cache> cache_;  // guarded by mu_
  std::vector<store::RecordStore*> stores_;  // guarded by mu_
  std::list<std::pair<Digest, ImageInsert>> prepared_;  // guarded by mu_; most recent first
  Result<ImageInsert> PrepareFile(std::string_view bytes, std::string_view scope);  // REQUIRES: mu_
  std::shared_ptr<const std::vector<float>> ReadStores(const PreparedImage& image);  // REQUIRES: mu_
  void WriteStores(const PreparedImage& image, const std::vector<float>& rows);       // REQUIRES: mu_
  ProjectorStats stats_;          // guarded by mu_
};

}  // namespace prefixd::engine
