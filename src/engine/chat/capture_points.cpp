#include "engine/chat/capture_points.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "engine/chat/prefix_renders_ahead.h"
#include "util/parallel.h"

namespace prefixd::engine {

namespace {

template <typename T>
size_t SharedPrefix(std::span<const T> a, std::span<const T> b) {
  size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

void SortUnique(std::vector<int32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// offsets[k]: characters of `full_text` spelled by tokens [0, k). A first token whose piece
// does not begin the text (the BOS the tokenizer adds, which templates leave out of the text:
// gemma, llama-bpe vocabularies) spells nothing; the caller checks that the rest spells the
// whole text.
std::vector<size_t> TokenOffsets(const Model& model, std::span<const Token> full,
                                 std::string_view full_text) {
  std::vector<size_t> offsets(full.size() + 1, 0);
  for (size_t k = 0; k < full.size(); ++k) {
    const std::string piece = model.TokenPiece(full[k], true);
    const bool unspelled = k == 0 && !full_text.starts_with(piece);
    offsets[k + 1] = offsets[k] + (unspelled ? 0 : piece.size());
  }
  return offsets;
}

// The tokens of `full` that lie wholly within its first `chars` characters.
size_t TokensWithin(const std::vector<size_t>& offsets, size_t chars) {
  return size_t(std::upper_bound(offsets.begin(), offsets.end(), chars) - offsets.begin()) - 1;
}

void AddPoint(std::vector<int32_t>& points, size_t shared, size_t n_tokens) {
  if (shared > 0 && shared < n_tokens) points.push_back(int32_t(shared));
}

// Where a prefix render leaves the full render: after `chars` shared characters, with `next`
// its next character (none when the render ends there).
struct SharedChars {
  size_t chars = 0;
  std::optional<char> next;
};

// How many tokens before a boundary a tokenizer may merge across it (a window this long is
// tokenized again).
constexpr size_t kMergeWindow = 8;

// The tokens of `full` within its first `chars` characters that `full_text[0:chars] + next`
// tokenizes the same way: the last kMergeWindow of them are tokenized again, followed by
// `next`, and kept while they agree. When the window alone tokenizes otherwise, all of them.
size_t TokensKept(const Model& model, std::string_view full_text, std::span<const Token> full,
                  const std::vector<size_t>& offsets, size_t chars, char next) {
  const size_t k = TokensWithin(offsets, chars);
  if (k == 0) return 0;
  const size_t k0 = k > kMergeWindow ? k - kMergeWindow : 0;
  std::string window(full_text.substr(offsets[k0], chars - offsets[k0]));
  window += next;
  const std::vector<Token> again = model.Tokenize(window, true, /*allow_bos=*/false);
  size_t i = 0;
  while (k0 + i < k && i < again.size() && again[i] == full[k0 + i]) ++i;
  return i == 0 ? k : k0 + i;
}

// The token positions where a render sharing `at.chars` characters with the full render can
// be restored. A tokenizer may join the characters before a boundary with those after it (">"
// and "\n" into ">\n"; "|>" and "<" into "|><" where the markers are not special tokens), so a
// later prompt that goes on differently can part from the full render's tokens a token or more
// before the characters part. A render that goes on after the boundary (`at.next`: the last
// message followed by a placeholder, an earlier turn rewritten) stands for such a prompt, but
// its placeholder is not the real next message: the boundary is taken as `at.next` leaves it,
// and as a newline or a space would (the usual first characters of what follows a turn), each
// a point. A render that ends at the boundary is followed by what follows it in the full
// render, in this request and the next: the tokens within it.
void AddPoints(const Model& model, std::string_view full_text, std::span<const Token> full,
               const std::vector<size_t>& offsets, const SharedChars& at,
               std::vector<int32_t>& points) {
  if (!at.next) {
    AddPoint(points, TokensWithin(offsets, at.chars), full.size());
    return;
  }
  for (char next : {*at.next, '\n', ' '}) {
    AddPoint(points, TokensKept(model, full_text, full, offsets, at.chars, next), full.size());
  }
}

// The reference when the tokens do not spell the text back: each prefix tokenized and compared
// with the full prompt token by token.
std::vector<int32_t> PointsByTokens(const Model& model, const std::vector<std::string>& prefixes,
                                    std::span<const Token> full) {
  std::vector<int32_t> points;
  for (const std::string& text : prefixes) {
    std::vector<Token> part = model.Tokenize(text, true);
    AddPoint(points, SharedPrefix(std::span<const Token>(part), full), full.size());
  }
  SortUnique(points);
  return points;
}

std::vector<int32_t> PointsByChars(const Model& model, std::string_view full_text,
                                   std::span<const Token> full,
                                   const std::vector<size_t>& offsets,
                                   std::span<const SharedChars> shared) {
  std::vector<int32_t> points;
  for (const SharedChars& at : shared) AddPoints(model, full_text, full, offsets, at, points);
  SortUnique(points);
  return points;
}

// Every prefix of `chat` rendered (the reference's renders), in PrefixesToCompare() order.
std::vector<std::string> RenderAll(const ChatTemplate& tmpl, const ParsedChat& chat) {
  std::vector<std::string> out;
  for (const PrefixRender& p : PrefixesToCompare(chat)) {
    auto rendered = tmpl.RenderPrefix(chat, p.n_messages, p.variant);
    if (rendered.ok()) out.push_back(std::move(rendered).value());  // a template may refuse
  }
  return out;
}

// What the memo knows of a chat's prefixes against one full render.
struct MemoLookup {
  std::vector<PrefixRender> prefixes;
  std::vector<PrefixKey> keys;
  // As found; after LookUp(), records[j] is compared with the full render where proven[j]
  // (refused ones count as proven) and the stale record where no proof held.
  std::vector<std::optional<PrefixRecord>> records;
  std::vector<bool> proven;  // records[j] holds LCP(prefix j, full)
  std::vector<size_t> moved;  // proven with a new boundary: to be stored again
};

// A proof that moved a record's boundary, before the digest at the new boundary is known.
struct Moved {
  size_t j;
  uint64_t boundary;
  char next_char;
};

// Proof 1 (same boundary) and proof 2 (split), from one pass of digests over full_text.
void ProveByDigests(std::string_view full_text, MemoLookup& m, std::vector<Moved>& moved,
                    CapturePointStats* stats) {
  std::vector<uint64_t> at;
  for (const auto& r : m.records) {
    if (!r || r->refused || r->skipped) continue;
    if (r->boundary <= full_text.size()) at.push_back(r->boundary);
    if (r->split && r->split->at <= full_text.size()) at.push_back(r->split->at);
  }
  const std::vector<Digest> digests = PrefixDigests(full_text, at);
  size_t next = 0;
  for (size_t j = 0; j < m.records.size(); ++j) {
    const auto& r = m.records[j];
    if (!r) continue;
    if (r->refused || r->skipped) {
      m.proven[j] = true;
      continue;
    }
    if (r->boundary <= full_text.size()) {
      m.proven[j] = ProvesSharedLength(*r, full_text, digests[next++]);
    }
    if (!r->split || r->split->at > full_text.size()) continue;
    const Digest& split_digest = digests[next++];
    if (m.proven[j]) continue;
    const std::optional<uint64_t> b = SharedLengthBySplit(*r->split, full_text, split_digest);
    if (!b) continue;
    const char next_char = *b < r->length ? r->split->tail[*b - r->split->at] : 0;
    moved.push_back({j, *b, next_char});
    m.proven[j] = true;
    if (stats) ++stats->by_split;
  }
}

// Proof 3 (an earlier text): for the records still unproven, the kept text closest to
// full_text, one pass of digests over it.
void ProveByText(std::string_view full_text, MemoLookup& m, RenderMemo& memo,
                 std::vector<Moved>& moved, CapturePointStats* stats) {
  std::vector<size_t> pending;
  for (size_t j = 0; j < m.records.size(); ++j) {
    if (m.records[j] && !m.proven[j]) pending.push_back(j);
  }
  if (pending.empty()) return;
  const ClosestText closest = memo.FindClosestText(full_text);
  if (!closest.text) return;
  const std::string& text = *closest.text;
  std::vector<size_t> candidates;
  std::vector<uint64_t> at;
  for (size_t j : pending) {
    const uint64_t b = m.records[j]->boundary;
    if (closest.shared < b && b <= text.size()) {
      candidates.push_back(j);
      at.push_back(b);
    }
  }
  const std::vector<Digest> digests = PrefixDigests(text, at);
  for (size_t k = 0; k < candidates.size(); ++k) {
    const size_t j = candidates[k];
    const auto c = SharedLengthByText(*m.records[j], digests[k], closest.shared);
    if (!c) continue;
    moved.push_back({j, *c, text[*c]});  // *c < boundary <= |text|
    m.proven[j] = true;
    if (stats) ++stats->by_text;
  }
}

// Gives the moved records the digests at their new boundaries (one pass over full_text).
void ApplyMoved(std::string_view full_text, const std::vector<Moved>& moved, MemoLookup& m) {
  std::vector<uint64_t> at;
  for (const Moved& mv : moved) at.push_back(mv.boundary);
  const std::vector<Digest> digests = PrefixDigests(full_text, at);
  for (size_t k = 0; k < moved.size(); ++k) {
    auto& r = m.records[moved[k].j];
    r = Rebound(*r, moved[k].boundary, moved[k].next_char, digests[k]);
    m.moved.push_back(moved[k].j);
  }
}

// Looks the prefixes up (or takes what `ahead` found) and proves what it can of their shared
// lengths with full_text.
MemoLookup LookUp(const ChatTemplate& tmpl, const ParsedChat& chat, std::string_view full_text,
                  RenderMemo& memo, const PrefixRendersAhead* ahead, CapturePointStats* stats) {
  MemoLookup m;
  if (ahead) {
    m.prefixes = ahead->prefixes();
    m.keys = ahead->keys();
    m.records = ahead->records();
  } else {
    m.prefixes = PrefixesToCompare(chat);
    m.keys = PrefixKeys(tmpl, chat, m.prefixes);
    m.records = memo.Find(m.keys);
  }
  m.proven.assign(m.records.size(), false);
  std::vector<Moved> moved;
  ProveByDigests(full_text, m, moved, stats);
  ProveByText(full_text, m, memo, moved, stats);
  ApplyMoved(full_text, moved, m);
  return m;
}

// What new splits compare their renders' ends with: the placeholder user message's rendering.
// The tail of a split this chat's keys found ends with it (MakePrefixSplit), so a continuing
// conversation takes that; otherwise the placeholder is rendered alone, on first use.
class Placeholder {
 public:
  Placeholder(const ChatTemplate& tmpl, const ParsedChat& chat, const MemoLookup& m)
      : tmpl_(tmpl), chat_(chat) {
    for (const auto& r : m.records) {
      if (r && r->split) text_ = r->split->tail;
    }
    done_ = text_.has_value();
  }
  const std::optional<std::string>& text() {
    if (!done_) {
      auto r = tmpl_.RenderPrefix(chat_, 0, PrefixVariant::kFollowedByUser);
      if (r.ok()) text_ = std::move(r).value();
      done_ = true;
    }
    return text_;
  }

 private:
  const ChatTemplate& tmpl_;
  const ParsedChat& chat_;
  std::optional<std::string> text_;
  bool done_ = false;
};

PrefixRecord RecordOf(const Result<std::string>& rendered, PrefixVariant variant,
                      std::string_view full_text, Placeholder& placeholder) {
  PrefixRecord r;
  if (!rendered.ok()) {
    r.refused = true;
    return r;
  }
  r = MakePrefixRecord(rendered.value(), full_text);
  if (variant == PrefixVariant::kFollowedByUser && placeholder.text()) {
    r.split = MakePrefixSplit(rendered.value(), *placeholder.text());
  }
  return r;
}

// The prefix renders m.prefixes[j] for each j of `which`, in that order, on up to
// kPrefixRenderThreads threads. Each render is a function of the chat alone, so the results are
// those of rendering one after the other. The whole conversation without a generation prompt
// is rendered on the calling thread, where PrepareChat's RenderReuseScope already holds it (the
// full render's generation-prompt diff made it).
std::vector<Result<std::string>> RenderInParallel(const ChatTemplate& tmpl, const ParsedChat& chat,
                                                  const MemoLookup& m,
                                                  const std::vector<size_t>& which) {
  std::vector<size_t> order(which.size());
  for (size_t k = 0; k < which.size(); ++k) order[k] = k;
  std::stable_partition(order.begin(), order.end(), [&](size_t k) {
    const PrefixRender& p = m.prefixes[which[k]];
    return p.n_messages == chat.n_messages() && p.variant == PrefixVariant::kPlain;
  });
  std::vector<Result<std::string>> out(which.size(), Status::Internal("not rendered"));
  ParallelFor(order.size(), SpareThreads(kPrefixRenderThreads), [&](size_t i) {
    const PrefixRender& p = m.prefixes[which[order[i]]];
    out[order[i]] = tmpl.RenderPrefix(chat, p.n_messages, p.variant);
  });
  return out;
}

// Renders the prefixes the memo could not prove (taking those `ahead` rendered), fills in
// their records and stores them with the moved ones. Over kMaxPrefixRenders (a long
// conversation seen for the first time, an edit far back in one) only ChooseRenders()'s are
// rendered; the others are stored as skipped.
void RenderMissing(const ChatTemplate& tmpl, const ParsedChat& chat, std::string_view full_text,
                   MemoLookup& m, RenderMemo& memo, PrefixRendersAhead* ahead,
                   CapturePointStats* stats) {
  std::vector<std::pair<PrefixKey, PrefixRecord>> fresh;
  for (size_t j : m.moved) fresh.emplace_back(m.keys[j], *m.records[j]);
  Placeholder placeholder(tmpl, chat, m);
  const auto t0 = std::chrono::steady_clock::now();
  size_t renders = 0;
  std::vector<std::optional<Result<std::string>>> early;
  if (ahead) early = ahead->Finish();
  std::vector<size_t> unproven;
  for (size_t j = 0; j < m.prefixes.size(); ++j) {
    if (m.proven[j]) continue;
    if (j < early.size() && early[j]) {
      m.records[j] = RecordOf(*early[j], m.prefixes[j].variant, full_text, placeholder);
      fresh.emplace_back(m.keys[j], *m.records[j]);
      ++renders;
      continue;
    }
    unproven.push_back(j);
  }
  const size_t room = kMaxPrefixRenders > renders ? kMaxPrefixRenders - renders : 0;
  const std::vector<bool> render = ChooseRenders(m.prefixes, unproven, chat.n_messages(), room);
  std::vector<size_t> to_render;
  for (size_t k = 0; k < unproven.size(); ++k) {
    const size_t j = unproven[k];
    if (render[k]) {
      to_render.push_back(j);
      continue;
    }
    m.records[j] = PrefixRecord{.skipped = true};
    fresh.emplace_back(m.keys[j], *m.records[j]);
    if (stats) ++stats->skipped;
  }
  const std::vector<Result<std::string>> rendered = RenderInParallel(tmpl, chat, m, to_render);
  for (size_t k = 0; k < to_render.size(); ++k) {
    const size_t j = to_render[k];
    m.records[j] = RecordOf(rendered[k], m.prefixes[j].variant, full_text, placeholder);
    fresh.emplace_back(m.keys[j], *m.records[j]);
    ++renders;
  }
  if (stats) {
    stats->renders += renders;
    stats->render_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  memo.Put(fresh);
}

}  // namespace

std::vector<bool> ChooseRenders(const std::vector<PrefixRender>& prefixes,
                                const std::vector<size_t>& unproven, size_t n_messages,
                                size_t max_renders) {
  std::vector<bool> render(unproven.size(), unproven.size() <= max_renders);
  if (unproven.size() <= max_renders) return render;
  size_t chosen = 0;
  std::vector<size_t> others;
  for (size_t k = 0; k < unproven.size(); ++k) {
    const size_t i = prefixes[unproven[k]].n_messages;
    if (i <= 1 || i + kRecentMessages >= n_messages) {
      render[k] = true;
      ++chosen;
    } else {
      others.push_back(k);
    }
  }
  const size_t room = max_renders > chosen ? max_renders - chosen : 0;
  for (size_t t = 0; t < room && t < others.size(); ++t) {
    render[others[t * others.size() / room]] = true;
  }
  return render;
}

Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const std::string& messages_json,
                                               const ChatRenderOptions& options,
                                               const std::string& full_text,
                                               std::span<const Token> full) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<std::string> prefixes,
                           tmpl.RenderPrefixes(messages_json, options));
  const std::vector<size_t> offsets = TokenOffsets(model, full, full_text);
  if (offsets.back() != full_text.size()) return PointsByTokens(model, prefixes, full);
  std::vector<SharedChars> shared;
  for (const std::string& text : prefixes) {
    SharedChars at;
    at.chars = SharedPrefix(std::span<const char>(text), std::span<const char>(full_text));
    if (at.chars < text.size()) at.next = text[at.chars];
    shared.push_back(at);
  }
  return PointsByChars(model, full_text, full, offsets, shared);
}

Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const ParsedChat& chat,
                                               const std::string& full_text,
                                               std::span<const Token> full, RenderMemo& memo,
                                               CapturePointStats* stats,
                                               PrefixRendersAhead* ahead) {
  if (stats) *stats = CapturePointStats{};
  const std::vector<size_t> offsets = TokenOffsets(model, full, full_text);
  if (offsets.back() != full_text.size()) {
    if (ahead) (void)ahead->Finish();  // rendered again below, as the reference does
    std::vector<std::string> prefixes = RenderAll(tmpl, chat);
    if (stats) stats->renders = prefixes.size();
    return PointsByTokens(model, prefixes, full);
  }
  MemoLookup m = LookUp(tmpl, chat, full_text, memo, ahead, stats);
  if (stats) stats->prefixes = m.prefixes.size();
  RenderMissing(tmpl, chat, full_text, m, memo, ahead, stats);
  memo.PutText(full_text);
  std::vector<SharedChars> shared;
  for (const auto& r : m.records) {
    if (r->refused || r->skipped) continue;
    SharedChars at;
    at.chars = r->boundary;
    if (r->boundary < r->length) at.next = r->next_char;
    shared.push_back(at);
  }
  return PointsByChars(model, full_text, full, offsets, shared);
}

std::vector<int32_t> TextCapturePoints(const Model& model, std::span<const Token> tokens) {
  static const char* kMessageStarts[] = {"<|im_start|>", "<|start_header_id|>",
                                         "<start_of_turn>", "<|start|>"};
  std::vector<Token> starts;
  for (const char* s : kMessageStarts) {
    Token t = model.FindSpecialToken(s);
    if (t >= 0) starts.push_back(t);
  }
  std::vector<int32_t> points;
  for (size_t i = 1; i < tokens.size(); ++i) {
    if (std::find(starts.begin(), starts.end(), tokens[i]) != starts.end()) {
      points.push_back(int32_t(i));
    }
  }
  return points;
}

}  // namespace prefixd::engine
