#include "cache/block_reporter.h"

#include <vector>

namespace prefixd::cache {

BlockReporter::BlockReporter(BlockListener& next, std::optional<Digest> only, size_t block_size)
    : filter_(next, only),
      disk_events_(filter_, Tier::kDisk, block_size),
      slots_(filter_, block_size),
      disk_tee_(disk_events_, block_size),
      block_size_(block_size) {}

void BlockReporter::DiskTee::OnRecordAdded(const store::RecordMeta& meta) {
  next_.OnRecordAdded(meta);
  MutexLock lock(&mu_);
  if (!collecting_) return;
  // kRemoved: the event without a copy of the tokens; only its names are kept.
  if (auto e = BlockEventOf(meta, BlockEvent::Kind::kRemoved, Tier::kDisk, block_size_)) {
    listed_.push_back(BlockRef{e->domain, e->hash, e->depth});
  }
}

void BlockReporter::DiskTee::Collect(bool on) {
  MutexLock lock(&mu_);
  collecting_ = on;
  if (on) listed_.clear();
}

std::vector<BlockRef> BlockReporter::DiskTee::Take() {
  MutexLock lock(&mu_);
  collecting_ = false;
  return std::move(listed_);
}

void BlockReporter::Start(const PrefixCache& ram, store::DiskStore* disk) {
  ram_ = &ram;
  disk_ = disk;
  AnnounceBlocks();
  filter_.Attach(this);
}

void BlockReporter::Stop() {
  if (ram_ == nullptr) return;
  filter_.Attach(nullptr);
  slots_.Close();
  ram_->ReportAllRemoved();
  if (disk_ != nullptr) disk_->SetRecordListener(nullptr);
  ram_ = nullptr;
  disk_ = nullptr;
}

// The disk's Blocks are reported stored first: their listing comes with attaching the disk's
// listener, under the store's lock, so no change of its index falls between the listing and
// the events after it; a Block that changes meanwhile is also in what the listing collects,
// which only names the Blocks RAM withdraws. Then RAM withdraws the disk's Blocks it does not
// hold and reports its own; the slots report theirs.
void BlockReporter::AnnounceBlocks() {
  std::vector<BlockRef> on_disk;
  if (disk_ != nullptr) {
    disk_tee_.Collect(true);
    disk_->SetRecordListener(&disk_tee_);
    on_disk = disk_tee_.Take();
  }
  ram_->AnnounceBlocks(on_disk);
  slots_.Announce();
}

}  // namespace prefixd::cache
