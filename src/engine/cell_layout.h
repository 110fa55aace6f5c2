// Where the cells of a sequence's sliding-window caches lie (llama.cpp patch 0005,
// docs/llama-patches.md): what the state bytes leave out and a restore needs to compute what a
// cold run computes, bit for bit.
//
// A sliding-window cache is a ring: once the window has dropped cells, a cold run holds the
// window's cells at ring indices, and the cells the window masks are still there until
// overwritten. A state written by llama.cpp holds only the cells in the window, in cell order,
// without their indices, and a plain read lays them from cell 0. Attention sums over cells in
// index order, so the next tokens' results differ in their last bits. A recorder, alive around a
// state write, records each such cache's head and every cell of the sequence with its index and
// position; an applier, alive around a state read, lays them back there, the masked cells as
// cells of the sequence whose K and V the window never lets anything read.
//
// Thread-safety: both act on the calling thread only (llama.cpp keeps them in thread_locals);
// one of each at a time per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

struct llama_kv_layout_record_scope;
struct llama_kv_layout_apply_scope;

namespace prefixd::engine {

class CellLayoutRecorder {
 public:
  // Every sliding-window cache a state write of one sequence visits appends its entry to `*out`.
  explicit CellLayoutRecorder(std::vector<uint8_t>* out);
  ~CellLayoutRecorder();
  CellLayoutRecorder(const CellLayoutRecorder&) = delete;
  CellLayoutRecorder& operator=(const CellLayoutRecorder&) = delete;

 private:
  std::unique_ptr<llama_kv_layout_record_scope> scope_;
};

class CellLayoutApplier {
 public:
  // `layout` (a recorder's output) outlives the applier. An empty layout applies nothing and is
  // complete at once.
  explicit CellLayoutApplier(std::span<const uint8_t> layout);
  ~CellLayoutApplier();
  CellLayoutApplier(const CellLayoutApplier&) = delete;
  CellLayoutApplier& operator=(const CellLayoutApplier&) = delete;

  // After the read: whether every entry was taken and fit its cache. A state read with a layout
  // that was not complete must not be used (it may miss a cache's layout, or hold a foreign one).
  bool complete() const;

 private:
  std::unique_ptr<llama_kv_layout_apply_scope> scope_;
};

}  // namespace prefixd::engine
