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


}  // namespace prefixd::server
