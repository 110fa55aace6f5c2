#include "server/admission.h"

namespace prefixd::server {
namespace {

thread_local const Admission* t_holder = nullptr;  // whose place this thread's request holds

}  // namespace

bool Admission::Admit() {
  Release();
  if (limit_ == 0) return true;
  size_t n = n_admitted_.load();
  do {
    if (n >= limit_) return false;
  } while (!n_admitted_.compare_exchange_weak(n, n + 1));
  t_holder = this;
  return true;
}

void Admission::Release() {
  if (t_holder != this) return;
  t_holder = nullptr;
  n_admitted_.fetch_sub(1);
}

bool IsGenerationRoute(const std::string& method, const std::string& path) {
  if (method != "POST") return false;
  return path == "/v1/chat/completions" || path == "/v1/completions" ||
         path == "/v1/cache/warm" || path == "/v1/responses" || path == "/v1/messages" ||
         path == "/tokenize" || path == "/detokenize" || path == "/apply-template" ||
         path == "/v1/messages/count_tokens";
}

}  // namespace prefixd::server
