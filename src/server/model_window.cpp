#include "server/model_window.h"

#include <algorithm>

namespace prefixd::server {

ModelWindow ModelWindowOf(int64_t n_ctx, int64_t n_predict) {
  ModelWindow w;
  w.context = n_ctx;
  const int64_t share = std::clamp<int64_t>(n_ctx / 8, 1024, 32000);
  w.max_output = std::min(n_predict > 0 ? n_predict : share, n_ctx / 2);
  return w;
}

}  // namespace prefixd::server
