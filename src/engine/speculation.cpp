#include "engine/speculation.h"

#include <algorithm>

#include "common.h"
#include "engine/context.h"
#include "engine/draft_history.h"
#include "engine/model/model.h"
#include "llama.h"
#include "speculative.h"
// The staging API (src/llama-ext.h, as common/speculative.cpp includes it): the target's
// hidden row of each decoded token, which the MTP head pairs with the token after it.
#include "../src/llama-ext.h"
#include "util/flags.h"
#include "util/log.h"

namespace prefixd::engine {

namespace {

struct SpecName {
  SpecType type;
  const char* name;  // llama.cpp's (common_speculative_type_to_str)
  common_speculative_type common;
};

constexpr SpecName kSpecNames[] = {
    {SpecType::kNgramSimple, "ngram-simple", COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE},
    {SpecType::kNgramMapK, "ngram-map-k", COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K},
    {SpecType::kNgramMapK4v, "ngram-map-k4v", COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V},
    {SpecType::kNgramMod, "ngram-mod", COMMON_SPECULATIVE_TYPE_NGRAM_MOD},
    {SpecType::kDraft, "draft-simple", COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE},
    {SpecType::kDraftMtp, "draft-mtp", COMMON_SPECULATIVE_TYPE_DRAFT_MTP},
};

const SpecName& NameOf(SpecType t) {
  for (const SpecName& n : kSpecNames) {
    if (n.type == t) return n;
  }
  return kSpecNames[0];
}

common_params_speculative_ngram_map ToCommon(const SpecOptions::NgramMap& m) {
  common_params_speculative_ngram_map c;
  c.size_n = uint16_t(m.size_n);
  c.size_m = uint16_t(m.size_m);
  c.min_hits = uint16_t(m.min_hits);
  return c;
}

common_params_speculative ToCommon(const SpecOptions& o) {
  common_params_speculative p;
  p.types.clear();
  for (SpecType t : o.types) p.types.push_back(NameOf(t).common);
  p.draft.n_max = o.draft_n_max;
  p.draft.n_min = o.draft_n_min;
  p.draft.p_min = o.draft_p_min;
  p.ngram_mod.n_match = o.ngram_mod_n_match;
  p.ngram_mod.n_max = o.ngram_mod_n_max;
  p.ngram_mod.n_min = o.ngram_mod_n_min;
  p.ngram_simple = ToCommon(o.ngram_simple);
  p.ngram_map_k = ToCommon(o.ngram_map_k);
  p.ngram_map_k4v = ToCommon(o.ngram_map_k4v);
  return p;
}

bool NeedsModel(SpecType t) { return t == SpecType::kDraft; }
bool IsMtp(SpecType t) { return t == SpecType::kDraftMtp; }

size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

const char* RollbackName(Rollback r) {
  switch (r) {
    case Rollback::kTruncate: return "truncate";
    case Rollback::kCheckpoint: return "checkpoint";
    case Rollback::kNone: return "none";
  }
  return "?";
}

Rollback ProbeRollback(Context& ctx, MemoryLayout layout) {
  if (layout == MemoryLayout::kDsv4) return Rollback::kNone;
  if (llama_n_rs_seq(ctx.raw()) > 0) return Rollback::kTruncate;
  const Token two[] = {0, 0};
  ctx.SeqClear(0);
  bool truncates = false;
  if (ctx.DecodeChunk(0, two, 0, false).ok()) truncates = ctx.SeqTruncate(0, 1);
  ctx.SeqClear(0);
  if (truncates) return Rollback::kTruncate;
  const bool recurrent = layout == MemoryLayout::kHybrid || layout == MemoryLayout::kRecurrent ||
                         layout == MemoryLayout::kHybridIswa ||
                         layout == MemoryLayout::kHybridIdx;
  return recurrent ? Rollback::kCheckpoint : Rollback::kNone;
}

Result<std::vector<SpecType>> ParseSpecTypes(const std::string& names) {
  std::vector<SpecType> types;
  for (const std::string& name : SplitList(names)) {
    if (name == "none") continue;
    const SpecName* found = nullptr;
    for (const SpecName& n : kSpecNames) {
      if (name == n.name || (n.type == SpecType::kDraft && name == "draft")) found = &n;
    }
    if (found == nullptr) {
      std::string valid = "none";
      for (const SpecName& n : kSpecNames) valid += std::string(", ") + n.name;
      return Status::InvalidArgument("unknown speculative type '" + name + "' (valid: " + valid +
                                     "; eagle3, dflash and ngram-cache are not served)");
    }
    if (std::find(types.begin(), types.end(), found->type) == types.end()) {
      types.push_back(found->type);
    }
  }
  return types;
}

std::string SpecTypesName(const std::vector<SpecType>& types) {
  std::string out;
  for (SpecType t : types) out += (out.empty() ? "" : ",") + std::string(NameOf(t).name);
  return out;
}

struct Drafter::Pool {
  Digest domain{};
  common_speculative_ptr spec;
  uint64_t last_used = 0;
  int users = 0;
};

Result<std::unique_ptr<Drafter>> Drafter::Create(const SpecOptions& options, uint32_t n_seq) {
  for (SpecType t : options.types) {
    if (NeedsModel(t) && options.draft_model_path.empty()) {
      return Status::InvalidArgument("--spec-type " + std::string(NameOf(t).name) +
                                     " needs a draft model (--model-draft FILE)");
    }
  }
  if (std::any_of(options.types.begin(), options.types.end(), IsMtp) && options.types.size() > 1) {
    return Status::InvalidArgument("--spec-type draft-mtp is served alone");
  }
  common_params_speculative params = ToCommon(options);
  const int32_t n_max = common_speculative_n_max(&params);
  if (n_max <= 0) return Status::InvalidArgument("speculation drafts no token (n_max 0)");
  return std::unique_ptr<Drafter>(new Drafter(options, n_seq, n_max));
}

Drafter::Drafter(const SpecOptions& options, uint32_t n_seq, int32_t n_max)
    : options_(options), n_seq_(n_seq), n_max_(n_max), seq_pool_(n_seq, nullptr) {}

// Keeps the MTP head's sequences in step with the target's (Drafter::AttachMtpHead), and
// (KeepHidden) records the target's hidden rows of each sequence's newest positions.
class Drafter::MtpFollower : public SequenceObserver {
 public:
  MtpFollower(Context& head, Context& target, common_speculative* spec, uint32_t n_seq)
      : head_(head), target_(target), spec_(spec), first_(n_seq), hidden_(n_seq),
        width_(size_t(llama_model_n_embd_out(head.model().raw()))), zeros_(width_, 0.0f) {}

  // Before llama.cpp's hook decodes the batch into the head (at the batch's positions, each
  // next to the hidden state the target gave the token before), every sequence of the batch
  // is brought to end just before its first position there: cut back, or started afresh
  // where the head lacks positions in between.
  void Decoded(const llama_batch& b) override {
    std::fill(first_.begin(), first_.end(), -1);
    for (int32_t i = 0; i < b.n_tokens; ++i) {
      int32_t& f = first_[size_t(b.seq_id[i][0])];
      if (f < 0 || b.pos[i] < f) f = b.pos[i];
    }
    for (size_t s = 0; s < first_.size(); ++s) {
      if (first_[s] < 0) continue;
      const int32_t held = head_.SeqPosMax(int32_t(s)) + 1;
      if (held > first_[s] && !head_.SeqTruncate(int32_t(s), first_[s])) head_.SeqClear(int32_t(s));
      if (held > 0 && held < first_[s]) head_.SeqClear(int32_t(s));
      // A sequence decoded from its start pairs its first token with no hidden state, never
      // with what the sequence's last request left in the carry.
      if (first_[s] == 0) common_speculative_set_mtp_carry(spec_, int32_t(s), zeros_);
    }
    if (keep_hidden_) Record(b);
    if (common_speculative_process(spec_, b)) return;
    for (size_t s = 0; s < first_.size(); ++s) {  // drafts from nothing rather than wrong KV
      if (first_[s] >= 0) head_.SeqClear(int32_t(s));
    }
  }
  void Truncated(int32_t seq, int32_t p0) override {
    if (!head_.SeqTruncate(seq, p0)) head_.SeqClear(seq);
    hidden_[size_t(seq)].CutAt(p0, width_);
  }
  void Cleared(int32_t seq) override {
    head_.SeqClear(seq);
    hidden_[size_t(seq)] = {};
  }

  void KeepHidden(bool keep) { keep_hidden_ = keep; }
  bool Hidden(int32_t seq, int32_t p0, int32_t p1, std::vector<float>* rows) const {
    const Rows& h = hidden_[size_t(seq)];
    if (p0 < h.start || p1 > h.end(width_) || p0 > p1) return false;
    rows->assign(h.rows.begin() + ptrdiff_t(size_t(p0 - h.start) * width_),
                 h.rows.begin() + ptrdiff_t(size_t(p1 - h.start) * width_));
    return true;
  }
  void SetHidden(int32_t seq, int32_t p0, std::vector<float> rows) {
    hidden_[size_t(seq)] = {p0, std::move(rows), false};
  }
  void DropHiddenBefore(int32_t seq, int32_t p) {
    Rows& h = hidden_[size_t(seq)];
    if (p <= h.start) return;
    const int32_t cut = std::min(p, h.end(width_));
    h.rows.erase(h.rows.begin(), h.rows.begin() + ptrdiff_t(size_t(cut - h.start) * width_));
    h.start = cut;
  }

 private:
  // The hidden rows of positions [start, end) of one sequence. Full: it reached
  // kMaxHiddenBytes and takes no more rows until it is cut back or replaced.
  struct Rows {
    int32_t start = 0;
    std::vector<float> rows;
    bool full = false;
    int32_t end(size_t width) const { return start + int32_t(rows.size() / width); }
    void CutAt(int32_t p, size_t width) {
      if (p <= start) {
        *this = {};
      } else if (p < end(width)) {
        rows.resize(size_t(p - start) * width);
        full = false;
      }
    }
  };
  // What one sequence's record may hold: rows are dropped once published, so this bounds an
  // answer decoded without a publish (the head's history of the rest of it is not cached; the
  // prompt's chunks, published one by one, stay far below it). 9,362 tokens of a 7168-wide model.
  static constexpr size_t kMaxHiddenBytes = size_t(256) << 20;

  // Appends the batch's rows to their sequences' records; a sequence whose positions do not
  // follow its record starts a new one at the batch's first position (a full one keeps what it
  // has: the positions it lacks are never published).
  void Record(const llama_batch& b) {
    for (int32_t i = 0; i < b.n_tokens; ++i) {
      Rows& h = hidden_[size_t(b.seq_id[i][0])];
      const float* row = llama_get_embeddings_nextn_ith(target_.raw(), i);
      if (row == nullptr) return;
      h.CutAt(b.pos[i], width_);
      if (b.pos[i] != h.end(width_)) {
        if (h.full) continue;
        h = {b.pos[i], {}, false};
      }
      if ((h.rows.size() + width_) * sizeof(float) > kMaxHiddenBytes) {
        h.full = true;
        continue;
      }
      h.rows.insert(h.rows.end(), row, row + width_);
    }
  }

  Context& head_;
  Context& target_;
  common_speculative* spec_;
  std::vector<int32_t> first_;  // per sequence: its first position in the batch, or -1
  std::vector<Rows> hidden_;    // per sequence (KeepHidden)
  size_t width_;
  std::vector<float> zeros_;    // the carry of a sequence before its first token
  bool keep_hidden_ = false;
};

Drafter::~Drafter() {
  if (mtp_target_ != nullptr) mtp_target_->SetObserver(nullptr);
}

bool Drafter::needs_draft_model() const {
  return std::any_of(options_.types.begin(), options_.types.end(), NeedsModel);
}

bool Drafter::needs_mtp_head() const {
  return std::any_of(options_.types.begin(), options_.types.end(), IsMtp);
}

Status Drafter::AttachMtpHead(Context& target, const ContextOptions& copt) {
  const Model& model = target.model();
  if (model.n_layer_nextn() <= 0) {
    return Status::NotSupported("--spec-type draft-mtp: " + model.arch() +
                                " model has no multi-token-prediction head (nextn_predict_layers)");
  }
  ContextOptions mopt = copt;
  mopt.n_rs_seq = 0;
  mopt.mtp = true;
  PREFIXD_ASSIGN_OR_RETURN(mtp_ctx_, Context::Create(model, mopt));
  target_ctx_ = target.raw();
  Pool& pool = PoolFor(Digest{});  // one for every domain: the head drafts from the model alone
  mtp_follower_ = std::make_unique<MtpFollower>(*mtp_ctx_, target, pool.spec.get(), n_seq_);
  mtp_target_ = &target;
  target.SetObserver(mtp_follower_.get());
  return Status::OK();
}

bool Drafter::MtpCarry(int32_t seq, std::vector<float>* h) const {
  if (!mtp_ctx_ || pools_.empty()) return false;
  return common_speculative_get_mtp_carry(pools_.front()->spec.get(), seq, *h);
}

bool Drafter::SetMtpCarry(int32_t seq, const std::vector<float>& h) {
  if (!mtp_ctx_ || pools_.empty()) return false;
  return common_speculative_set_mtp_carry(pools_.front()->spec.get(), seq, h);
}

void Drafter::KeepMtpHiddenRows(bool keep) {
  if (mtp_follower_) mtp_follower_->KeepHidden(keep);
}

bool Drafter::MtpHiddenRows(int32_t seq, int32_t p0, int32_t p1, std::vector<float>* rows) const {
  return mtp_follower_ && mtp_follower_->Hidden(seq, p0, p1, rows);
}

void Drafter::SetMtpHiddenRows(int32_t seq, int32_t p0, std::vector<float> rows) {
  if (mtp_follower_) mtp_follower_->SetHidden(seq, p0, std::move(rows));
}

void Drafter::DropMtpHiddenRowsBefore(int32_t seq, int32_t p) {
  if (mtp_follower_) mtp_follower_->DropHiddenBefore(seq, p);
}

Status Drafter::AttachDraftModel(Context& target, const ContextOptions& copt) {
  const std::string& path = options_.draft_model_path;
  Result<std::unique_ptr<Model>> model = Model::Load({path, 0});
  if (!model.ok()) {
    return Status::InvalidArgument("--model-draft " + path + ": " + model.status().message());
  }
  ContextOptions dopt = copt;
  dopt.n_rs_seq = 0;
  Result<std::unique_ptr<Context>> ctx = Context::Create(**model, dopt);
  if (!ctx.ok()) return ctx.status();
  if (ProbeRollback(**ctx, (*model)->layout()) != Rollback::kTruncate) {
    return Status::NotSupported("--model-draft " + path + ": a " +
                                MemoryLayoutName((*model)->layout()) +
                                " memory cannot drop trailing positions; use an attention model");
  }
  draft_model_ = std::move(model).value();
  draft_ctx_ = std::move(ctx).value();
  draft_tokens_.assign(n_seq_, {});
  target_ctx_ = target.raw();
  try {  // common checks the vocabularies when it sets the draft model up
    PoolFor(Digest{});
  } catch (const std::exception& e) {
    draft_ctx_.reset();
    draft_model_.reset();
    return Status::InvalidArgument("--model-draft " + path + ": " + e.what());
  }
  return Status::OK();
}

uint64_t Drafter::draft_restored_tokens() const {
  return draft_history_ != nullptr ? draft_history_->restored_tokens() : 0;
}

bool Drafter::SyncDraftSequence(int32_t seq, const std::vector<Token>& history) {
  std::vector<Token>& held = draft_tokens_[size_t(seq)];
  size_t keep = CommonPrefix(held, history);
  if (keep < held.size() && !draft_ctx_->SeqTruncate(seq, int32_t(keep))) {
    draft_ctx_->SeqClear(seq);
    keep = 0;
  }
  const Pool* pool = seq_pool_[size_t(seq)];
  if (draft_history_ != nullptr && pool != nullptr) {
    // The tiers may hold more of the history than the sequence: set it, decode the rest.
    keep = size_t(draft_history_->Restore(seq, pool->domain, history, int32_t(keep)));
  }
  held.assign(history.begin(), history.begin() + ptrdiff_t(keep));
  const size_t step = draft_ctx_->n_batch();
  for (size_t at = keep; at < history.size(); at += step) {
    const size_t n = std::min(step, history.size() - at);
    std::span<const Token> chunk(history.data() + at, n);
    if (!draft_ctx_->DecodeChunk(seq, chunk, int32_t(at), false).ok()) {
      draft_ctx_->SeqClear(seq);
      held.clear();
      return false;
    }
    held.insert(held.end(), chunk.begin(), chunk.end());
    draft_prefill_tokens_ += n;
  }
  if (draft_history_ != nullptr && pool != nullptr && keep < history.size()) {
    Status st = draft_history_->Publish(seq, pool->domain, history, int32_t(keep));
    if (!st.ok()) Logf(LogLevel::kWarning, "draft model history not cached: %s", st.ToString().c_str());
  }
  return true;
}

Drafter::Pool& Drafter::PoolFor(const Digest& domain) {
  if (mtp_ctx_ && !pools_.empty()) return *pools_.front();
  for (auto& p : pools_) {
    if (p->domain == domain) return *p;
  }
  if (pools_.size() >= n_seq_) {
    auto victim = pools_.end();
    for (auto it = pools_.begin(); it != pools_.end(); ++it) {
      if ((*it)->users == 0 && (victim == pools_.end() || (*it)->last_used < (*victim)->last_used)) {
        victim = it;
      }
    }
    if (victim != pools_.end()) pools_.erase(victim);
  }
  auto pool = std::make_unique<Pool>();
  pool->domain = domain;
  common_params_speculative params = ToCommon(options_);
  if (draft_ctx_ || mtp_ctx_) {
    params.draft.ctx_tgt = target_ctx_;
    params.draft.ctx_dft = draft_ctx_ ? draft_ctx_->raw() : mtp_ctx_->raw();
  }
  pool->spec.reset(common_speculative_init(params, n_seq_));
  pools_.push_back(std::move(pool));
  return *pools_.back();
}

void Drafter::Begin(int32_t seq, const Digest& domain, std::span<const Token> prompt) {
  End(seq);
  Pool& pool = PoolFor(domain);
  pool.users++;
  pool.last_used = ++clock_;
  seq_pool_[size_t(seq)] = &pool;
  const llama_tokens tokens(prompt.begin(), prompt.end());
  common_speculative_begin(pool.spec.get(), seq, tokens);
}

void Drafter::End(int32_t seq) {
  Pool*& pool = seq_pool_[size_t(seq)];
  if (pool != nullptr) pool->users--;
  pool = nullptr;
}

std::vector<Token> Drafter::Draft(int32_t seq, const std::vector<Token>& history, Token id_last,
                                  int32_t pos, int32_t n_max) {
  std::vector<Token> draft;
  const Want want{seq, &history, id_last, pos, n_max, &draft};
  DraftAll({&want, 1});
  return draft;
}

void Drafter::DraftAll(std::span<const Want> wants) {
  std::vector<Pool*> run;  // the pools with a sequence to draft, each once
  for (const Want& w : wants) {
    w.draft->clear();
    Pool* pool = seq_pool_[size_t(w.seq)];
    if (pool == nullptr || w.n_max <= 0) continue;
    pool->last_used = ++clock_;
    if (draft_ctx_ && !SyncDraftSequence(w.seq, *w.history)) continue;
    common_speculative_draft_params& dp = common_speculative_get_draft_params(pool->spec.get(), w.seq);
    dp.drafting = true;
    dp.n_max = std::min(w.n_max, n_max_);
    dp.pos0 = w.pos;
    dp.id_last = w.id_last;
    dp.prompt = w.history;
    dp.result = w.draft;
    if (std::find(run.begin(), run.end(), pool) == run.end()) run.push_back(pool);
  }
  for (Pool* pool : run) common_speculative_draft(pool->spec.get());
  for (const Want& w : wants) {
    Pool* pool = seq_pool_[size_t(w.seq)];
    if (pool == nullptr || std::find(run.begin(), run.end(), pool) == run.end()) continue;
    common_speculative_draft_params& dp = common_speculative_get_draft_params(pool->spec.get(), w.seq);
    if (dp.result != w.draft) continue;  // not asked for (its draft sequence did not sync)
    // A drafter that found nothing leaves its sequence marked; unmarked, the next call for
    // another sequence of the pool does not read this one's (gone) result.
    dp.drafting = false;
    dp.prompt = nullptr;
    dp.result = nullptr;
    std::vector<Token>& draft = *w.draft;
    if (draft_ctx_) {  // what the draft model decoded: id_last and the drafts but the last
      const int32_t decoded = draft_ctx_->SeqPosMax(w.seq) - w.pos + 1;
      std::vector<Token>& held = draft_tokens_[size_t(w.seq)];
      if (decoded > 0) held.push_back(w.id_last);
      for (int32_t i = 1; i < decoded && size_t(i - 1) < draft.size(); ++i) held.push_back(draft[size_t(i - 1)]);
    }
    if (int32_t(draft.size()) > w.n_max) draft.resize(size_t(w.n_max));
  }
}

void Drafter::Accept(int32_t seq, int32_t n_accepted) {
  Pool* pool = seq_pool_[size_t(seq)];
  if (pool != nullptr) common_speculative_accept(pool->spec.get(), seq, uint16_t(n_accepted));
}

Status RollBack(Context& ctx, Rollback kind, int32_t seq, int32_t pos0,
                std::span<const Token> decoded, int32_t keep,
                std::span<const uint8_t> checkpoint) {
  const int32_t end = pos0 + int32_t(decoded.size());
  if (keep <= pos0 || keep > end) return Status::Internal("rollback: keep out of range");
  if (keep == end) return Status::OK();
  if (kind == Rollback::kTruncate) {
    if (ctx.SeqTruncate(seq, keep)) return Status::OK();
    return Status::Internal("rollback: the memory refused to drop positions from " +
                            std::to_string(keep));
  }
  if (kind != Rollback::kCheckpoint || checkpoint.empty()) {
    return Status::Internal("rollback: no checkpoint to go back to");
  }
  PREFIXD_RETURN_IF_ERROR(ctx.RestorePartial(seq, checkpoint));
  if (!ctx.SeqTruncate(seq, pos0)) {
    return Status::Internal("rollback: the attention rows after the checkpoint stay");
  }
  return ctx.DecodeChunk(seq, decoded.first(size_t(keep - pos0)), pos0, false);
}

}  // namespace prefixd::engine
