#include "engine/vision/image_prompt.h"

#include <algorithm>
#include <string>

#include "engine/vision/image_tokens.h"

namespace prefixd::engine {

Result<MarkedTokens> TokenizeAroundMarkers(const PieceTokenizer& tokenize, std::string_view text,
                                           size_t n_images) {
  const std::string_view marker(kImageMarker);
  const std::vector<Token> marker_tokens = tokenize(marker, false);
  MarkedTokens out;
  size_t from = 0;
  bool first = true;
  auto add_piece = [&](std::string_view piece) {
    std::vector<Token> t = tokenize(piece, first);
    first = false;
    out.tokens.insert(out.tokens.end(), t.begin(), t.end());
  };
  for (size_t at = text.find(marker); at != std::string_view::npos;
       at = text.find(marker, from)) {
    add_piece(text.substr(from, at - from));
    const int32_t begin = int32_t(out.tokens.size());
    out.tokens.insert(out.tokens.end(), marker_tokens.begin(), marker_tokens.end());
    out.markers.emplace_back(begin, int32_t(out.tokens.size()));
    from = at + marker.size();
  }
  add_piece(text.substr(from));
  if (out.markers.size() != n_images) {
    return Status::InvalidArgument(
        "the rendered prompt holds " + std::to_string(out.markers.size()) +
        " image places for " + std::to_string(n_images) +
        " images (the chat template dropped or repeated a message with an image, or a text "
        "holds the image marker " + std::string(kImageMarker) + ")");
  }
  return out;
}

void ExpandImages(const MarkedTokens& marked, std::span<const ImageInsert> inserts,
                  std::vector<Token>* tokens, std::vector<PromptImage>* images,
                  std::vector<int32_t>* capture_points) {
  tokens->clear();
  images->clear();
  // new_at[k]: where marker k's insert begins in the new tokens; shift[k]: how far tokens after
  // marker k moved.
  std::vector<int32_t> shift;
  int32_t from = 0;
  for (size_t k = 0; k < marked.markers.size(); ++k) {
    const auto [begin, end] = marked.markers[k];
    tokens->insert(tokens->end(), marked.tokens.begin() + from, marked.tokens.begin() + begin);
    for (const ImagePiece& piece : inserts[k].pieces) {
      if (!piece.image) {
        tokens->insert(tokens->end(), piece.text.begin(), piece.text.end());
        continue;
      }
      PromptImage img;
      img.offset = int32_t(tokens->size());
      img.image = piece.image;
      const std::vector<Token> rows = ImageTokens(piece.image->identity(), piece.image->n_tokens());
      tokens->insert(tokens->end(), rows.begin(), rows.end());
      images->push_back(img);
    }
    shift.push_back(int32_t(tokens->size()) - end);
    from = end;
  }
  tokens->insert(tokens->end(), marked.tokens.begin() + from, marked.tokens.end());
  std::vector<int32_t> points;
  for (int32_t p : *capture_points) {
    int32_t moved = p;
    bool inside = false;
    for (size_t k = 0; k < marked.markers.size(); ++k) {
      const auto [begin, end] = marked.markers[k];
      if (p > begin && p < end) inside = true;
      if (p >= end) moved = p + shift[k];
    }
    if (!inside) points.push_back(moved);
  }
  for (const PromptImage& img : *images) points.push_back(img.offset);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  *capture_points = std::move(points);
}

}  // namespace prefixd::engine
