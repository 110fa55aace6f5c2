#include "engine/capture_points.h"

#include <algorithm>

namespace prefixd::engine {

namespace {

size_t SharedPrefix(std::span<const Token> a, std::span<const Token> b) {
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
                                               std::span<const Token> full) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<std::string> prefixes,
                           tmpl.RenderPrefixes(messages_json, options));
  std::vector<int32_t> points;
  for (const std::string& text : prefixes) {
    std::vector<Token> part = model.Tokenize(text, true);
    size_t shared = SharedPrefix(part, full);
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
