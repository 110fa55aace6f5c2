#include "engine/capture_points.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

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

// offsets[k]: characters spelled by tokens [0, k).
std::vector<size_t> TokenOffsets(const Model& model, std::span<const Token> full) {
  std::vector<size_t> offsets(full.size() + 1, 0);
  for (size_t k = 0; k < full.size(); ++k) {
    offsets[k + 1] = offsets[k] + model.TokenPiece(full[k], true).size();
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

std::vector<int32_t> PointsByChars(const std::vector<size_t>& offsets,
                                   std::span<const size_t> shared_chars, size_t n_tokens) {
  std::vector<int32_t> points;
  for (size_t chars : shared_chars) AddPoint(points, TokensWithin(offsets, chars), n_tokens);
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
  std::vector<std::optional<PrefixRecord>> records;  // proven ones only; refused kept
};

// Looks the prefixes up and keeps the records that prove their shared length with full_text.
MemoLookup LookUp(const ChatTemplate& tmpl, const ParsedChat& chat, std::string_view full_text,
                  RenderMemo& memo) {
  MemoLookup m;
  m.prefixes = PrefixesToCompare(chat);
  m.keys = PrefixKeys(tmpl, chat, m.prefixes);
  m.records = memo.Find(m.keys);
  std::vector<uint64_t> boundaries;
  for (auto& r : m.records) {
    if (r && !r->refused && r->boundary > full_text.size()) r.reset();
    if (r && !r->refused) boundaries.push_back(r->boundary);
  }
  const std::vector<Digest> digests = PrefixDigests(full_text, boundaries);
  size_t next = 0;
  for (auto& r : m.records) {
    if (!r || r->refused) continue;
    if (!ProvesSharedLength(*r, full_text, digests[next++])) r.reset();
  }
  return m;
}

// Renders the prefixes the memo could not prove, fills in their records and stores them.
void RenderMissing(const ChatTemplate& tmpl, const ParsedChat& chat, std::string_view full_text,
                   MemoLookup& m, RenderMemo& memo, CapturePointStats* stats) {
  std::vector<std::pair<PrefixKey, PrefixRecord>> fresh;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t j = 0; j < m.prefixes.size(); ++j) {
    if (m.records[j]) continue;
    auto rendered = tmpl.RenderPrefix(chat, m.prefixes[j].n_messages, m.prefixes[j].variant);
    PrefixRecord r;
    if (rendered.ok()) {
      r = MakePrefixRecord(rendered.value(), full_text);
    } else {
      r.refused = true;
    }
    m.records[j] = r;
    fresh.emplace_back(m.keys[j], r);
  }
  if (stats) {
    stats->renders += fresh.size();
    stats->render_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  memo.Put(fresh);
}

}  // namespace

Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const std::string& messages_json,
                                               const ChatRenderOptions& options,
                                               const std::string& full_text,
                                               std::span<const Token> full) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<std::string> prefixes,
                           tmpl.RenderPrefixes(messages_json, options));
  const std::vector<size_t> offsets = TokenOffsets(model, full);
  if (offsets.back() != full_text.size()) return PointsByTokens(model, prefixes, full);
  std::vector<size_t> shared;
  for (const std::string& text : prefixes) {
    shared.push_back(SharedPrefix(std::span<const char>(text), std::span<const char>(full_text)));
  }
  return PointsByChars(offsets, shared, full.size());
}

Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const ParsedChat& chat,
                                               const std::string& full_text,
                                               std::span<const Token> full, RenderMemo& memo,
                                               CapturePointStats* stats) {
  if (stats) *stats = CapturePointStats{};
  const std::vector<size_t> offsets = TokenOffsets(model, full);
  if (offsets.back() != full_text.size()) {
    std::vector<std::string> prefixes = RenderAll(tmpl, chat);
    if (stats) stats->renders = prefixes.size();
    return PointsByTokens(model, prefixes, full);
  }
  MemoLookup m = LookUp(tmpl, chat, full_text, memo);
  if (stats) stats->prefixes = m.prefixes.size();
  RenderMissing(tmpl, chat, full_text, m, memo, stats);
  std::vector<size_t> shared;
  for (const auto& r : m.records) {
    if (!r->refused) shared.push_back(r->boundary);
  }
  return PointsByChars(offsets, shared, full.size());
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
