#include "engine/model/gguf_header.h"

#include <algorithm>

#include "gguf.h"

namespace prefixd::engine {

namespace {

// An integer value of any GGUF integer type; -1 when the key is absent or not an integer.
int64_t IntValue(const gguf_context* gguf, const std::string& key) {
  const int64_t id = gguf_find_key(gguf, key.c_str());
  if (id < 0) return -1;
  switch (gguf_get_kv_type(gguf, id)) {
    case GGUF_TYPE_UINT8: return gguf_get_val_u8(gguf, id);
    case GGUF_TYPE_INT8: return gguf_get_val_i8(gguf, id);
    case GGUF_TYPE_UINT16: return gguf_get_val_u16(gguf, id);
    case GGUF_TYPE_INT16: return gguf_get_val_i16(gguf, id);
    case GGUF_TYPE_UINT32: return gguf_get_val_u32(gguf, id);
    case GGUF_TYPE_INT32: return gguf_get_val_i32(gguf, id);
    case GGUF_TYPE_UINT64: return int64_t(gguf_get_val_u64(gguf, id));
    case GGUF_TYPE_INT64: return gguf_get_val_i64(gguf, id);
    default: return -1;
  }
}

}  // namespace

Result<GgufHeader> ReadGgufHeader(const std::string& path) {
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context* gguf = gguf_init_from_file(path.c_str(), params);
  if (gguf == nullptr) return Status::IOError(path + ": cannot be read as a GGUF file");
  GgufHeader h;
  const int64_t arch = gguf_find_key(gguf, "general.architecture");
  if (arch >= 0 && gguf_get_kv_type(gguf, arch) == GGUF_TYPE_STRING) {
    h.arch = gguf_get_val_str(gguf, arch);
  }
  if (!h.arch.empty()) {
    h.n_ctx_train = std::max<int64_t>(0, IntValue(gguf, h.arch + ".context_length"));
  }
  gguf_free(gguf);
  if (h.arch.empty()) return Status::Corruption(path + ": no general.architecture in its header");
  return h;
}

}  // namespace prefixd::engine
