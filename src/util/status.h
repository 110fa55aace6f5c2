// Status and Result<T>: how every fallible call in prefixd reports what went wrong.
//
// A Status is OK or carries a code and a message that names exactly what is wrong
// ("state: layer 3 K row size 512 != expected 256"). Result<T> holds either a value or a
// non-OK Status. Both are cheap to move and safe to copy; neither is thread-shared.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace prefixd {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,
    kCorruption,
    kInvalidArgument,
    kIOError,
    kNotSupported,
    kResourceExhausted,  // budget, queue or disk full
    kAborted,            // cancelled by the caller
    kInternal,
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  static Status NotSupported(std::string msg) {
    return Status(Code::kNotSupported, std::move(msg));
  }
  static Status ResourceExhausted(std::string msg) {
    return Status(Code::kResourceExhausted, std::move(msg));
  }
  static Status Aborted(std::string msg) { return Status(Code::kAborted, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }

  // "Corruption: block checksum mismatch"; "OK" for an OK status.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

const char* StatusCodeName(Status::Code code);

// Either a T or a non-OK Status. REQUIRES: value() only when ok().
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "Result needs a value or a non-OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace prefixd

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define PREFIXD_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::prefixd::Status _st = (expr);          \
    if (!_st.ok()) return _st;               \
  } while (0)

#define PREFIXD_CONCAT_INNER(a, b) a##b
#define PREFIXD_CONCAT(a, b) PREFIXD_CONCAT_INNER(a, b)
// Declares `lhs` from a Result, or returns its Status from the enclosing function.
#define PREFIXD_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto PREFIXD_CONCAT(_res_, __LINE__) = (expr);                         \
  if (!PREFIXD_CONCAT(_res_, __LINE__).ok())                             \
    return PREFIXD_CONCAT(_res_, __LINE__).status();                     \
  lhs = std::move(PREFIXD_CONCAT(_res_, __LINE__)).value()
