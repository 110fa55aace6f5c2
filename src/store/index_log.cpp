#include "store/index_log.h"

#include <cassert>
#include <cstring>

#include "util/coding.h"

namespace prefixd::store {

namespace {

enum EntryType : uint8_t { kHeader = 1, kAdd = 2, kRemove = 3, kTouch = 4 };
constexpr uint32_t kLogMagic = 0x49445850;  // "PXDI" in file byte order
constexpr uint16_t kLogVersion = 1;
constexpr size_t kEntryFront = 9;           // crc, len, type
constexpr uint32_t kMaxEntryBody = 64u << 20;

std::vector<uint8_t> EncodeEntry(uint8_t type, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out;
  out.reserve(kEntryFront + body.size());
  PutFixed32(&out, 0);  // crc, filled below
  PutFixed32(&out, uint32_t(body.size()));
  out.push_back(type);
  out.insert(out.end(), body.begin(), body.end());
  uint32_t crc = Crc32cMask(Crc32c(out.data() + 4, out.size() - 4));
  EncodeFixed32(out.data(), crc);
  return out;
}

std::vector<uint8_t> HeaderBody() {
  std::vector<uint8_t> b;
  PutFixed32(&b, kLogMagic);
  PutFixed16(&b, kLogVersion);
  PutFixed16(&b, 0);
  return b;
}

std::vector<uint8_t> AddBody(const IndexEntry& e) {
  std::vector<uint8_t> b;
  PutFixed64(&b, e.file_bytes);
  PutFixed64(&b, e.meta.last_access_unix_ms);
  AppendHeaderBody(e.meta, e.created_ms, &b);
  return b;
}

std::vector<uint8_t> IdBody(const RecordId& id) {
  std::vector<uint8_t> b(id.key.begin(), id.key.end());
  b.push_back(static_cast<uint8_t>(id.kind));
  return b;
}

RecordId GetId(const uint8_t* p) {
  RecordId id;
  std::memcpy(id.key.data(), p, id.key.size());
  id.kind = static_cast<RecordKind>(p[32]);
  return id;
}

// Applies one entry to the replay. Returns Corruption when the body does not parse.
Status ApplyEntry(uint8_t type, std::span<const uint8_t> body, LogReplay* out) {
  switch (type) {
    case kAdd: {
      if (body.size() < 16) return Status::Corruption("short Add entry");
      IndexEntry e;
      e.file_bytes = DecodeFixed64(body.data());
      uint64_t last_access = DecodeFixed64(body.data() + 8);
      PREFIXD_ASSIGN_OR_RETURN(e.meta, DecodeHeaderBody(body.subspan(16), &e.created_ms));
      e.meta.last_access_unix_ms = last_access;
      e.meta.payload_bytes = e.file_bytes - 28 - HeaderBodyBytes(e.meta.tokens.size());
      if (e.file_bytes < 28 + HeaderBodyBytes(e.meta.tokens.size())) {
        return Status::Corruption("Add entry with impossible file size");
      }
      out->entries[IdOf(e.meta)] = std::move(e);
      return Status::OK();
    }
    case kRemove:
      if (body.size() != 33) return Status::Corruption("bad Remove entry");
      out->entries.erase(GetId(body.data()));
      return Status::OK();
    case kTouch: {
      if (body.size() != 41) return Status::Corruption("bad Touch entry");
      auto it = out->entries.find(GetId(body.data()));
      if (it != out->entries.end()) {
        it->second.meta.last_access_unix_ms = DecodeFixed64(body.data() + 33);
      }
      return Status::OK();
    }
    default:
      return Status::Corruption("unknown entry type " + std::to_string(type));
  }
}

}  // namespace

Result<LogReplay> IndexLog::Replay(Env* env, const std::string& path) {
  LogReplay out;
  auto data_or = env->ReadFile(path);
  if (!data_or.ok()) {
    if (!data_or.status().IsNotFound()) return data_or.status();
    out.missing = true;
    return out;
  }
  const std::vector<uint8_t>& data = *data_or;
  size_t pos = 0;
  bool first = true;
  while (pos < data.size()) {
    const uint8_t* p = data.data() + pos;
    size_t left = data.size() - pos;
    std::string bad;
    uint32_t len = left >= kEntryFront ? DecodeFixed32(p + 4) : 0;
    if (left < kEntryFront || len > kMaxEntryBody || left < kEntryFront + len) {
      bad = "truncated entry";
    } else if (Crc32cUnmask(DecodeFixed32(p)) != Crc32c(p + 4, 5 + len)) {
      bad = "entry checksum mismatch";
    }
    std::span<const uint8_t> body(p + kEntryFront, bad.empty() ? len : 0);
    if (bad.empty() && first) {
      if (p[8] != kHeader || body.size() != 8 || DecodeFixed32(body.data()) != kLogMagic) {
        bad = "no log header";
      } else if (DecodeFixed16(body.data() + 4) != kLogVersion) {
        out.bad_version = true;
        out.entries.clear();
        return out;
      }
    } else if (bad.empty()) {
      Status st = ApplyEntry(p[8], body, &out);
      if (!st.ok()) bad = st.message();
      else ++out.n_entries;
    }
    if (!bad.empty()) {
      out.torn_bytes = data.size() - pos;
      out.torn_reason = bad + " at offset " + std::to_string(pos);
      break;
    }
    first = false;
    pos += kEntryFront + len;
    out.bytes = pos;
  }
  if (first && out.torn_bytes == 0) out.missing = true;  // an empty file holds nothing
  return out;
}

Result<std::unique_ptr<IndexLog>> IndexLog::Rewrite(Env* env, const std::string& path,
                                                    const std::vector<const IndexEntry*>& entries) {
  std::vector<uint8_t> bytes = EncodeEntry(kHeader, HeaderBody());
  for (const IndexEntry* e : entries) {
    std::vector<uint8_t> entry = EncodeEntry(kAdd, AddBody(*e));
    bytes.insert(bytes.end(), entry.begin(), entry.end());
  }
  PREFIXD_RETURN_IF_ERROR(env->WriteFileAtomic(path, bytes));
  return OpenForAppend(env, path, entries.size(), bytes.size());
}

Result<std::unique_ptr<IndexLog>> IndexLog::OpenForAppend(Env* env, const std::string& path,
                                                          uint64_t n_entries, uint64_t bytes) {
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewAppendableFile(path));
  return std::unique_ptr<IndexLog>(new IndexLog(std::move(file), n_entries, bytes));
}

Status IndexLog::Append(uint8_t type, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> entry = EncodeEntry(type, body);
  ++n_entries_;
  bytes_ += entry.size();
  return file_->Append(entry);
}

Status IndexLog::AppendAdd(const IndexEntry& e) {
  std::vector<uint8_t> body = AddBody(e);
  assert(kEntryFront + body.size() == LogAddEntryBytes(e.meta));  // what the quota charges
  return Append(kAdd, body);
}

Status IndexLog::AppendRemove(const RecordId& id) { return Append(kRemove, IdBody(id)); }

Status IndexLog::AppendTouch(const RecordId& id, uint64_t last_access_ms) {
  std::vector<uint8_t> b = IdBody(id);
  PutFixed64(&b, last_access_ms);
  return Append(kTouch, b);
}

}  // namespace prefixd::store
