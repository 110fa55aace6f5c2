#include "store/record_store.h"

namespace prefixd::store {

std::vector<bool> RecordStore::ContainsAll(std::span<const RecordId> ids) {
  std::vector<bool> out;
  out.reserve(ids.size());
  for (const RecordId& id : ids) out.push_back(Contains(id.key, id.kind));
  return out;
}

}  // namespace prefixd::store
