#include "cache/block_reporter.h"

#include <vector>

namespace prefixd::cache {

BlockReporter::BlockReporter(BlockListener& next, std::optional<Digest> only, size_t block_size)
    : filter_(next, only), disk_events_(filter_, Tier::kDisk, block_size), block_size_(block_size) {}

void BlockReporter::Start(const PrefixCache& ram, store::DiskStore* disk) {
  ram_ = &ram;
  disk_ = disk;
  AnnounceBlocks();
  filter_.Attach(this);
}

void BlockReporter::Stop() {
  if (ram_ == nullptr) return;
  filter_.Attach(nullptr);
  ram_->ReportAllRemoved();
  if (disk_ != nullptr) disk_->SetRecordListener(nullptr);
  ram_ = nullptr;
  disk_ = nullptr;
}

// The disk's Blocks are withdrawn from RAM where RAM lacks them, then RAM's and the disk's are
// reported stored: the disk's listing comes with attaching its listener, in its lock, so no
// change of the disk's index falls between the listing and the events that follow it.
void BlockReporter::AnnounceBlocks() {
  std::vector<BlockRef> on_disk;
  if (disk_ != nullptr) {
    for (const store::RecordMeta& m : disk_->List()) {
      auto e = BlockEventOf(m, BlockEvent::Kind::kStored, Tier::kDisk, block_size_);
      if (e) on_disk.push_back(BlockRef{e->domain, e->hash, e->depth});
    }
  }
  ram_->AnnounceBlocks(on_disk);
  if (disk_ != nullptr) disk_->SetRecordListener(&disk_events_);
}

}  // namespace prefixd::cache
