#include "engine/capture_points.h"

#include <algorithm>
#include <string>

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

}  // namespace

Result<std::vector<int32_t>> ChatCapturePoints(const Model& model, const ChatTemplate& tmpl,
                                               const std::string& messages_json,
                                               const ChatRenderOptions& options,
                                               const std::string& full_text,
                                               std::span<const Token> full) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<std::string> prefixes,
                           tmpl.RenderPrefixes(messages_json, options));
  // offsets[k]: characters spelled by tokens [0, k).
  std::vector<size_t> offsets(full.size() + 1, 0);
  for (size_t k = 0; k < full.size(); ++k) {
    offsets[k + 1] = offsets[k] + model.TokenPiece(full[k], true).size();
  }
  const bool by_text = offsets.back() == full_text.size();
  std::vector<int32_t> points;
  for (const std::string& text : prefixes) {
    size_t shared = 0;
    if (by_text) {
      size_t chars = SharedPrefix(std::span<const char>(text), std::span<const char>(full_text));
      shared = size_t(std::upper_bound(offsets.begin(), offsets.end(), chars) - offsets.begin()) - 1;
    } else {
      std::vector<Token> part = model.Tokenize(text, true);
      shared = SharedPrefix(std::span<const Token>(part), full);
    }
    if (shared > 0 && shared < full.size()) points.push_back(int32_t(shared));
  }
  SortUnique(points);
  return points;
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
