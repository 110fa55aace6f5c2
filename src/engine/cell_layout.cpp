#include "engine/cell_layout.h"

#include "llama-kv-layout.h"

namespace prefixd::engine {

CellLayoutRecorder::CellLayoutRecorder(std::vector<uint8_t>* out)
    : scope_(std::make_unique<llama_kv_layout_record_scope>(out)) {}
CellLayoutRecorder::~CellLayoutRecorder() = default;

CellLayoutApplier::CellLayoutApplier(std::span<const uint8_t> layout)
    : scope_(layout.empty() ? nullptr
                            : std::make_unique<llama_kv_layout_apply_scope>(layout.data(),
                                                                            layout.size())) {}
CellLayoutApplier::~CellLayoutApplier() = default;

bool CellLayoutApplier::complete() const { return !scope_ || scope_->complete(); }

}  // namespace prefixd::engine
