// Writes a test model: llama.cpp builds it from the metadata and fills its tensors, llama.cpp's
// writer saves it, and the file is rewritten once with what that writer drops (keys it does not
// know for the arch, such as the chat template; gemma4's per_layer_model_proj, a tensor it does
// not list), then renamed into place.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/testgen/test_model_internal.h"
#include "ggml-backend.h"
#include "llama.h"

namespace prefixd::engine::test_model {
namespace {

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelFree>;

bool SilentProgress(float, void*) { return true; }

// Wraps a Weights' fill and remembers every tensor llama.cpp created, so that tensors its
// writer skips can be written from the live model.
struct Recorder {
  Weights inner;
  std::vector<const ggml_tensor*> tensors;
  static void Fill(ggml_tensor* tensor, void* recorder) {
    auto* self = static_cast<Recorder*>(recorder);
    self->inner.fill(tensor, self->inner.userdata);
    self->tensors.push_back(tensor);
  }
};

// Builds the model in memory with llama.cpp, on the CPU, without repacked weight buffers (so
// the writer can read every tensor back).
Result<ModelPtr> BuildModel(gguf_context* meta, Recorder* recorder, bool with_mtp) {
  EnsureBackendInitialized();  // once per process; routes llama.cpp logs to ours
  llama_model_params params = llama_model_default_params();
  params.load_mtp = with_mtp;
  params.n_gpu_layers = 0;
  params.use_extra_bufts = false;
  params.progress_callback = SilentProgress;
  ModelPtr model(llama_model_init_from_user(meta, Recorder::Fill, recorder, params));
  if (!model) return Status::Internal("llama.cpp rejected the test model metadata");
  if (!recorder->inner.error->empty()) return Status::Internal(*recorder->inner.error);
  return model;
}

Status SyncAndClose(FILE* f, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  return ok && closed ? Status::OK() : Status::IOError("cannot write " + path);
}

// Copies `src` from byte `offset` to the end onto the end of `dst`.
Status AppendTail(const std::string& src, size_t offset, FILE* dst) {
  FILE* in = std::fopen(src.c_str(), "rb");
  if (!in) return Status::IOError("cannot open " + src);
  std::unique_ptr<FILE, int (*)(FILE*)> guard(in, std::fclose);
  if (std::fseek(in, long(offset), SEEK_SET) != 0) return Status::IOError("cannot seek " + src);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
    if (std::fwrite(buf.data(), 1, n, dst) != n) return Status::IOError("short write");
  }
  return std::ferror(in) ? Status::IOError("cannot read " + src) : Status::OK();
}

// Appends the data of `tensors` (already declared in `ctx` after the saved ones) to `out`,
// which holds the saved file's data section of `data_size` bytes; each tensor starts at its
// declared offset (aligned).
Status AppendTensors(const gguf_context* ctx, const std::vector<const ggml_tensor*>& tensors,
                     size_t data_size, FILE* out) {
  for (const ggml_tensor* t : tensors) {
    const size_t offset = gguf_get_tensor_offset(ctx, gguf_find_tensor(ctx, t->name));
    if (offset < data_size) return Status::Internal("tensor offsets overlap in the rewrite");
    const std::vector<uint8_t> pad(offset - data_size, 0);
    std::vector<uint8_t> data(ggml_nbytes(t));
    ggml_backend_tensor_get(t, data.data(), 0, data.size());
    if (std::fwrite(pad.data(), 1, pad.size(), out) != pad.size() ||
        std::fwrite(data.data(), 1, data.size(), out) != data.size()) {
      return Status::IOError("short write");
    }
    data_size = offset + data.size();
  }
  const size_t align = gguf_get_alignment(ctx);
  const std::vector<uint8_t> pad((align - data_size % align) % align, 0);
  return std::fwrite(pad.data(), 1, pad.size(), out) == pad.size() ? Status::OK()
                                                                   : Status::IOError("short write");
}

// Tensors a model needs that the pinned llama.cpp's writer does not list (it has no field for
// gemma4's model-level per-layer projection). Optional tensors it skips (lfm2's dense_2, used
// only for embeddings) stay out, so that the other archs' files do not change.
bool NeededButUnsaved(const ggml_tensor* t) {
  const std::string name = t->name;
  return name == "per_layer_model_proj.weight" || name == "per_layer_proj_norm.weight";
}

// True when key `i` of `meta` is an array that `saved` holds shorter: the pinned writer cuts
// per-layer arrays to the trunk's layers (hparams.n_layer()), while the loader reads them for
// every block, NextN blocks included ("recurrent_layers has wrong array length").
bool CutShort(const gguf_context* saved, const gguf_context* meta, int64_t i) {
  const int64_t j = gguf_find_key(saved, gguf_get_key(meta, i));
  return j >= 0 && gguf_get_kv_type(meta, i) == GGUF_TYPE_ARRAY &&
         gguf_get_kv_type(saved, j) == GGUF_TYPE_ARRAY &&
         gguf_get_arr_n(saved, j) < gguf_get_arr_n(meta, i);
}

// Optional tensors llama.cpp creates for a NextN block when it builds one from metadata (every
// tensor it asks for exists then) that a load without the MTP layers does not ask for: the
// block's per-tensor quantization scales. A file with them fails that load ("wrong number of
// tensors"), as a converted model without them does not. A NextN block is a "blk.N." with a
// "blk.N.nextn." tensor in `ctx`.
bool UnrequestedWithoutMtp(const gguf_context* ctx, const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string tail = dot == std::string::npos ? "" : name.substr(dot);
  if (tail != ".scale" && tail != ".input_scale") return false;
  if (name.rfind("blk.", 0) != 0) return false;
  const std::string block = name.substr(0, name.find('.', 4) + 1);  // "blk.N."
  for (int64_t i = 0; i < gguf_get_n_tensors(ctx); ++i) {
    if (std::string(gguf_get_tensor_name(ctx, i)).rfind(block + "nextn.", 0) == 0) return true;
  }
  return false;
}

// Writes `ctx`'s keys and the tensors it lists, but those UnrequestedWithoutMtp, with their
// data read from the live model (`created`), to `out_tmp`.
Status WriteFromLive(gguf_context* saved_ctx, const std::vector<const ggml_tensor*>& created,
                     const std::string& out_tmp) {
  GgufPtr ctx(gguf_init_empty());
  gguf_set_kv(ctx.get(), saved_ctx);
  std::vector<const ggml_tensor*> kept;
  for (int64_t i = 0; i < gguf_get_n_tensors(saved_ctx); ++i) {
    const std::string name = gguf_get_tensor_name(saved_ctx, i);
    const auto it = std::find_if(created.begin(), created.end(),
                                 [&](const ggml_tensor* t) { return name == t->name; });
    if (it == created.end()) return Status::Internal("no live tensor " + name);
    if (UnrequestedWithoutMtp(saved_ctx, name)) continue;
    gguf_add_tensor(ctx.get(), *it);
    kept.push_back(*it);
  }
  FILE* out = std::fopen(out_tmp.c_str(), "wb");
  if (!out) return Status::IOError("cannot create " + out_tmp);
  Status st = gguf_write_to_file_ptr(ctx.get(), out, /*only_meta=*/true)
                  ? AppendTensors(ctx.get(), kept, 0, out)
                  : Status::IOError("cannot write metadata to " + out_tmp);
  Status closed = SyncAndClose(out, out_tmp);
  return st.ok() ? closed : st;
}

// llama.cpp's writer keeps only the keys it knows for the arch and the tensors it lists; this
// rewrites `saved` into `out_tmp` with every key of `meta` and the needed tensors of `created`
// it dropped, and the description `desc` (the saved tensors' data is copied byte for byte).
Status AddDropped(const std::string& saved, const gguf_context* meta,
                  const std::vector<const ggml_tensor*>& created, const std::string& out_tmp,
                  const std::string& desc, bool with_mtp) {
  gguf_init_params gp = {/*no_alloc=*/true, /*ctx=*/nullptr};
  GgufPtr ctx(gguf_init_from_file(saved.c_str(), gp));
  if (!ctx) return Status::Corruption("cannot read back " + saved);
  for (int64_t i = 0; i < gguf_get_n_kv(meta); ++i) {
    if (gguf_find_key(ctx.get(), gguf_get_key(meta, i)) < 0 || CutShort(ctx.get(), meta, i)) {
      CopyKey(ctx.get(), meta, i);
    }
  }
  gguf_set_val_str(ctx.get(), "general.description", desc.c_str());
  if (with_mtp) return WriteFromLive(ctx.get(), created, out_tmp);
  const size_t data_offset = gguf_get_data_offset(ctx.get());
  std::vector<const ggml_tensor*> unsaved;
  for (const ggml_tensor* t : created) {
    if (!NeededButUnsaved(t) || gguf_find_tensor(ctx.get(), t->name) >= 0) continue;
    gguf_add_tensor(ctx.get(), t);
    unsaved.push_back(t);
  }
  FILE* out = std::fopen(out_tmp.c_str(), "wb");
  if (!out) return Status::IOError("cannot create " + out_tmp);
  if (!gguf_write_to_file_ptr(ctx.get(), out, /*only_meta=*/true)) {
    std::fclose(out);
    return Status::IOError("cannot write metadata to " + out_tmp);
  }
  const long data_start = std::ftell(out);
  Status st = AppendTail(saved, data_offset, out);
  if (st.ok() && !unsaved.empty()) {
    st = AppendTensors(ctx.get(), unsaved, size_t(std::ftell(out) - data_start), out);
  }
  Status closed = SyncAndClose(out, out_tmp);
  return st.ok() ? closed : st;
}

Status Publish(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("cannot rename " + tmp + " to " + path);
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  return Status::OK();
}

}  // namespace

Status WriteModel(gguf_context* meta, const Weights& weights, const std::string& desc,
                  const std::string& out_path, bool with_mtp) {
  const std::string saved = out_path + ".tmp-saved";
  const std::string out_tmp = out_path + ".tmp";
  Recorder recorder{weights, {}};
  Status st;
  {
    PREFIXD_ASSIGN_OR_RETURN(ModelPtr model, BuildModel(meta, &recorder, with_mtp));
    if (weights.finish) PREFIXD_RETURN_IF_ERROR(weights.finish(model.get(), recorder.tensors));
    llama_model_save_to_file(model.get(), saved.c_str());
    st = AddDropped(saved, meta, recorder.tensors, out_tmp, desc, with_mtp);  // reads the live model
  }
  std::remove(saved.c_str());
  if (!st.ok()) {
    std::remove(out_tmp.c_str());
    return st;
  }
  return Publish(out_tmp, out_path);
}

}  // namespace prefixd::engine::test_model
