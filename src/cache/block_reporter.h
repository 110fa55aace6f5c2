// BlockReporter: joins the tiers' Block events to one BlockListener (the KV-event publisher,
// events/kv_events.h): the RAM tier's through its index, the disk tier's through the store's
// index (StoreBlockEvents, Tier::kDisk), both through one DomainFilter, so that one rule decides
// which domains leave the process; and the slots' Blocks (SlotBlocks, Tier::kSlot) the engine
// tells it of through slots(). It is the listener's BlockSource: when the listener asks (a
// subscriber joined), it reports again what RAM, the disk and the slots hold.
//
// Lifetime: construct it before the PrefixCache that reports to ram_listener(); call Start once
// both tiers are open, and Stop before either is destroyed (Stop returns once no call from the
// listener or the store is running, and none follows).
//
// Thread-safety: AnnounceBlocks runs on the listener's thread; Start and Stop on the owner's.
#pragma once

#include <optional>
#include <vector>

#include "cache/block_listener.h"
#include "cache/prefix_cache.h"
#include "cache/slot_blocks.h"
#include "cache/store_block_events.h"
#include "store/disk_store.h"
#include "util/mutex.h"

namespace prefixd::cache {

class BlockReporter : public BlockSource {
 public:
  // Reports the Blocks of `only` (nullopt: of every domain) to `next`.
  // REQUIRES: next outlives this object; block_size is the cache's B.
  BlockReporter(BlockListener& next, std::optional<Digest> only, size_t block_size);
  ~BlockReporter() override { Stop(); }

  // For PrefixCache::Options::listener.
  BlockListener* ram_listener() { return &filter_; }
  // What the slots' sequences hold, reported through the same filter. Valid while this lives.
  SlotBlocks& slots() { return slots_; }

  // Reports what the tiers hold now (AnnounceBlocks) and from then on: the disk's changes, and
  // a resend whenever the listener asks. REQUIRES: ram and disk (null: no disk tier) stay
  // alive until Stop.
  void Start(const PrefixCache& ram, store::DiskStore* disk);
  // Reports the slots' Blocks and RAM's removed (the process stops: its memory goes with it;
  // the disk stays and is reported again by the next process), then detaches from the listener
  // and the disk. The slots' later Holds are ignored.
  void Stop();

  void AnnounceBlocks() override;

 private:
  // The disk's listener: passes every record on to StoreBlockEvents and, while a listing is
  // collected (AnnounceBlocks), keeps the Blocks it names, without their tokens.
  class DiskTee : public store::RecordListener {
   public:
    explicit DiskTee(store::RecordListener& next, size_t block_size)
        : next_(next), block_size_(block_size) {}
    void OnRecordAdded(const store::RecordMeta& meta) override;
    void OnRecordRemoved(const store::RecordMeta& meta) override { next_.OnRecordRemoved(meta); }
    void Collect(bool on);
    std::vector<BlockRef> Take();

   private:
    store::RecordListener& next_;
    const size_t block_size_;
    Mutex mu_;
    bool collecting_ PREFIXD_GUARDED_BY(mu_) = false;
    std::vector<BlockRef> listed_ PREFIXD_GUARDED_BY(mu_);
  };

  DomainFilter filter_;
  StoreBlockEvents disk_events_;
  SlotBlocks slots_;
  DiskTee disk_tee_;
  const size_t block_size_;
  const PrefixCache* ram_ = nullptr;
  store::DiskStore* disk_ = nullptr;
};

}  // namespace prefixd::cache
