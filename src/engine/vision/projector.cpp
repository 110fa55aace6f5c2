#include "engine/vision/projector.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <list>
#include <thread>
#include <unordered_map>

#include "engine/vision/image_tokens.h"
#include "gguf.h"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"
#include "util/log.h"

namespace prefixd::engine {

namespace {

struct DigestHasher {
  size_t operator()(const Digest& d) const {
    size_t h = 0;
    std::memcpy(&h, d.data(), sizeof h);
    return h;
  }
};

Result<Digest> FileDigest(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::InvalidArgument("--mmproj: cannot open " + path);
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.Update(buf.data(), n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::IOError("--mmproj: cannot read " + path);
  return h.Finish();
}

// clip.projector_type (or clip.vision.projector_type) of the GGUF, "" when it has none.
std::string ProjectorType(const std::string& path) {
  gguf_init_params p{/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context* g = gguf_init_from_file(path.c_str(), p);
  if (g == nullptr) return "";
  std::string type;
  for (const char* key : {"clip.vision.projector_type", "clip.projector_type"}) {
    const int64_t k = gguf_find_key(g, key);
    if (k >= 0 && gguf_get_kv_type(g, k) == GGUF_TYPE_STRING) {
      type = gguf_get_val_str(g, k);
      break;
    }
  }
  gguf_free(g);
  return type;
}

std::string Hex(const Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s.push_back(kHex[b >> 4]), s.push_back(kHex[b & 15]);
  return s;
}

struct ChunksDeleter {
  void operator()(mtmd_input_chunks* c) const { mtmd_input_chunks_free(c); }
};
struct BitmapDeleter {
  void operator()(mtmd_bitmap* b) const { mtmd_bitmap_free(b); }
};

}  // namespace

// The encoder cache: identity -> embeddings, least recently used first out past the budget.
struct Projector::Cache {
  using Rows = std::shared_ptr<const std::vector<float>>;
  struct Entry {
    Digest identity;
    Rows rows;
  };
  std::list<Entry> lru;  // most recent first
  std::unordered_map<Digest, std::list<Entry>::iterator, DigestHasher> index;
  uint64_t bytes = 0;

  Rows Find(const Digest& id) {
    auto it = index.find(id);
    if (it == index.end()) return nullptr;
    lru.splice(lru.begin(), lru, it->second);
    return it->second->rows;
  }
  void Put(const Digest& id, Rows rows, uint64_t budget) {
    bytes += rows->size() * sizeof(float);
    lru.push_front({id, std::move(rows)});
    index[id] = lru.begin();
    while (bytes > budget && lru.size() > 1) {
      bytes -= lru.back().rows->size() * sizeof(float);
      index.erase(lru.back().identity);
      lru.pop_back();
    }
  }
};

PreparedImage::~PreparedImage() {
  if (chunk_ != nullptr) mtmd_input_chunk_free(chunk_);
}

std::vector<int32_t> PreparedImage::RopePositions(int32_t t0, int32_t r0, int32_t r1) const {
  const mtmd_image_tokens* grid = mtmd_input_chunk_get_tokens_image(chunk_);
  const size_t n = size_t(r1 - r0);
  std::vector<int32_t> out(4 * n);
  for (size_t i = 0; i < n; ++i) {
    const mtmd_decoder_pos p = mtmd_image_tokens_get_decoder_pos(grid, t0, size_t(r0) + i);
    out[i] = int32_t(p.t);
    out[n + i] = int32_t(p.y);
    out[2 * n + i] = int32_t(p.x);
    out[3 * n + i] = int32_t(p.z);
  }
  return out;
}

Result<std::unique_ptr<Projector>> Projector::Load(const Model& model,
                                                   const ProjectorOptions& options) {
  std::unique_ptr<Projector> p(new Projector(options));
  PREFIXD_ASSIGN_OR_RETURN(p->file_digest_, FileDigest(options.path));
  p->type_ = ProjectorType(options.path);
  if (p->type_.empty()) {
    return Status::InvalidArgument("--mmproj " + options.path +
                                   ": not a multimodal projector (no clip.projector_type)");
  }
  mtmd_context_params mp = mtmd_context_params_default();
  mp.use_gpu = options.offload;
  mp.print_timings = false;
  const unsigned cores = std::thread::hardware_concurrency();
  mp.n_threads = options.n_threads > 0 ? options.n_threads : int(cores == 0 ? 4 : cores);
  mp.warmup = false;  // the first image allocates; a tiny test projector's warm-up would not
  mp.image_min_tokens = options.image_min_tokens;
  mp.image_max_tokens = options.image_max_tokens;
  p->ctx_ = mtmd_init_from_file(options.path.c_str(), model.raw(), mp);
  if (p->ctx_ == nullptr) {
    return Status::InvalidArgument("--mmproj " + options.path + " (" + p->type_ +
                                   ") does not load for this model: libmtmd refused it (a "
                                   "projector of another model's width? see the log above)");
  }
  if (!mtmd_support_vision(p->ctx_)) {
    return Status::InvalidArgument("--mmproj " + options.path + ": the projector reads no images");
  }
  p->mrope_ = mtmd_decode_use_mrope(p->ctx_);
  if (p->mrope_ != (model.rope_positions() == 4)) {
    return Status::InvalidArgument("--mmproj " + options.path + " (" + p->type_ + "): " +
                                   (p->mrope_ ? "its images take M-RoPE positions; the model's "
                                                "rope does not"
                                              : "the model's rope is M-RoPE; the projector's "
                                                "images are not"));
  }
  p->n_embd_ = llama_model_n_embd_inp(model.raw());
  p->n_vocab_ = model.n_vocab();
  Sha256 domain;
  domain.Update("prefixd image embeddings");
  domain.Update(p->file_digest_.data(), p->file_digest_.size());
  p->embeddings_domain_ = domain.Finish();
  p->cache_ = std::make_unique<Cache>();
  return p;
}

Projector::Projector(const ProjectorOptions& options) : options_(options) {}

Projector::~Projector() {
  if (ctx_ != nullptr) mtmd_free(ctx_);
}

Result<ImageInsert> Projector::Prepare(std::string_view bytes, std::string_view scope) {
  Sha256 h;
  h.Update(bytes);
  h.UpdateU64(scope.size());
  h.Update(scope);
  const Digest file = h.Finish();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = prepared_.begin(); it != prepared_.end(); ++it) {
    if (it->first != file) continue;
    prepared_.splice(prepared_.begin(), prepared_, it);
    ++stats_.images_prepared;
    return it->second;
  }
  PREFIXD_ASSIGN_OR_RETURN(ImageInsert insert, PrepareFile(bytes, scope));
  prepared_.emplace_front(file, insert);
  if (prepared_.size() > kPreparedKept) prepared_.pop_back();
  ++stats_.images_prepared;
  return insert;
}

Result<ImageInsert> Projector::PrepareFile(std::string_view bytes, std::string_view scope) {
  std::unique_ptr<mtmd_bitmap, BitmapDeleter> bmp(
      mtmd_helper_bitmap_init_from_buf(ctx_, reinterpret_cast<const unsigned char*>(bytes.data()),
                                       bytes.size(), false, mtmd_helper_init_opt_default())
          .bitmap);
  if (!bmp || mtmd_bitmap_is_audio(bmp.get())) {
    return Status::InvalidArgument("the image does not decode (PNG, JPEG, GIF and BMP do)");
  }
  const uint32_t width = mtmd_bitmap_get_nx(bmp.get());
  const uint32_t height = mtmd_bitmap_get_ny(bmp.get());
  Sha256 h;
  h.Update("prefixd image v1");
  h.Update(file_digest_.data(), file_digest_.size());
  h.UpdateU64(uint64_t(int64_t(options_.image_min_tokens)));
  h.UpdateU64(uint64_t(int64_t(options_.image_max_tokens)));
  h.UpdateU64(width);
  h.UpdateU64(height);
  h.Update(mtmd_bitmap_get_data(bmp.get()), mtmd_bitmap_get_n_bytes(bmp.get()));
  const Digest identity = h.Finish();
  mtmd_bitmap_set_id(bmp.get(), Hex(identity).c_str());

  std::unique_ptr<mtmd_input_chunks, ChunksDeleter> chunks(mtmd_input_chunks_init());
  const char* marker = mtmd_default_marker();
  mtmd_input_text text{marker, std::strlen(marker), /*add_special=*/false, /*parse_special=*/true};
  const mtmd_bitmap* bitmaps[1] = {bmp.get()};
  if (mtmd_tokenize(ctx_, chunks.get(), &text, bitmaps, 1) != 0) {
    return Status::InvalidArgument("the projector cannot read this image (" +
                                   std::to_string(width) + "x" + std::to_string(height) + ")");
  }
  ImageInsert out;
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks.get()); ++i) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks.get(), i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      size_t n = 0;
      const llama_token* t = mtmd_input_chunk_get_tokens_text(c, &n);
      // libmtmd looks some of its wrapping tokens up by text and leaves LLAMA_TOKEN_NULL where
      // the vocabulary has none: a projector made for another model's vocabulary.
      if (std::any_of(t, t + n, [this](llama_token x) { return x < 0 || x >= n_vocab_; })) {
        return Status::InvalidArgument(
            "the projector wraps this image in a token the model's vocabulary lacks (a "
            "projector made for another model?)");
      }
      if (out.pieces.empty() || out.pieces.back().image) out.pieces.emplace_back();
      out.pieces.back().text.insert(out.pieces.back().text.end(), t, t + n);
      continue;
    }
    if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_IMAGE) {
      return Status::InvalidArgument("the projector made a chunk that is not an image");
    }
    auto chunk = std::shared_ptr<PreparedImage>(new PreparedImage());
    chunk->width_ = width;
    chunk->height_ = height;
    Sha256 ch;
    ch.Update(identity.data(), identity.size());
    ch.UpdateU64(uint64_t(out.n_chunks()));
    chunk->identity_ = ch.Finish();
    Sha256 key;
    key.Update("prefixd embeddings v1");
    key.Update(chunk->identity_.data(), chunk->identity_.size());
    key.Update(scope);
    chunk->cache_key_ = key.Finish();
    chunk->chunk_ = mtmd_input_chunk_copy(c);
    chunk->n_tokens_ = int32_t(mtmd_input_chunk_get_n_tokens(c));
    chunk->n_pos_ = int32_t(mtmd_input_chunk_get_n_pos(c));
    chunk->non_causal_ = mtmd_decode_use_non_causal(ctx_, c);
    if (chunk->n_tokens_ <= 0) return Status::InvalidArgument("the projector made an empty image chunk");
    if (chunk->n_pos_ <= 0 || chunk->n_pos_ > chunk->n_tokens_) {
      return Status::InvalidArgument("the projector's image takes " +
                                     std::to_string(chunk->n_pos_) + " positions for " +
                                     std::to_string(chunk->n_tokens_) + " rows");
    }
    out.pieces.push_back({{}, std::move(chunk)});
  }
  if (out.n_chunks() == 0) {
    return Status::InvalidArgument("the projector made no image tokens of this image");
  }
  return out;
}

int32_t ImageInsert::n_chunks() const {
  int32_t n = 0;
  for (const ImagePiece& p : pieces) n += p.image != nullptr;
  return n;
}

Result<std::shared_ptr<const std::vector<float>>> Projector::Embeddings(
    const PreparedImage& image) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto rows = cache_->Find(image.cache_key())) {
    ++stats_.encoder_hits;
    return rows;
  }
  if (auto rows = ReadStores(image)) {
    cache_->Put(image.cache_key(), rows, options_.cache_bytes);
    return rows;
  }
  if (mtmd_encode_chunk(ctx_, image.chunk_) != 0) {
    return Status::Internal("the image encoder failed (libmtmd's log says why)");
  }
  const float* embd = mtmd_get_output_embd(ctx_);
  const size_t n = size_t(image.n_tokens()) * size_t(n_embd_);
  auto rows = std::make_shared<const std::vector<float>>(embd, embd + n);
  ++stats_.images_encoded;
  cache_->Put(image.cache_key(), rows, options_.cache_bytes);
  WriteStores(image, *rows);
  return rows;
}

void Projector::SetStores(std::vector<store::RecordStore*> stores) {
  std::lock_guard<std::mutex> lock(mu_);
  stores_ = std::move(stores);
}

// The record's position is the image's rows; its payload their floats. Anything else (a
// record of another width, a damaged one the store refused) is a miss.
std::shared_ptr<const std::vector<float>> Projector::ReadStores(const PreparedImage& image) {
  const size_t n = size_t(image.n_tokens()) * size_t(n_embd_);
  for (size_t i = 0; i < stores_.size(); ++i) {
    Result<store::Record> r = stores_[i]->Read(image.cache_key(), store::RecordKind::kEmbeddings);
    if (!r.ok() || r->meta.position != uint32_t(image.n_tokens()) ||
        r->payload.size() != n * sizeof(float)) {
      continue;
    }
    auto rows = std::make_shared<std::vector<float>>(n);
    std::memcpy(rows->data(), r->payload.data(), r->payload.size());
    ++(i == 0 ? stats_.encoder_hits_disk : stats_.encoder_hits_remote);
    return rows;
  }
  return nullptr;
}

void Projector::WriteStores(const PreparedImage& image, const std::vector<float>& rows) {
  if (stores_.empty()) return;
  store::RecordMeta meta;
  meta.key = image.cache_key();
  meta.kind = store::RecordKind::kEmbeddings;
  meta.domain = embeddings_domain_;
  meta.position = uint32_t(image.n_tokens());
  const auto* bytes = reinterpret_cast<const uint8_t*>(rows.data());
  auto payload = std::make_shared<const std::vector<uint8_t>>(bytes, bytes + rows.size() * sizeof(float));
  for (store::RecordStore* s : stores_) s->PutAsync(meta, payload);
}

ProjectorStats Projector::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ProjectorStats s = stats_;
  s.cached_bytes = cache_ ? cache_->bytes : 0;
  return s;
}

}  // namespace prefixd::engine
