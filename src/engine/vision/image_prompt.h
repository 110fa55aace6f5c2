// A chat prompt with images in it. The chat path puts kImageMarker in a message where an image
// was; the template renders the conversation as text; here the text is tokenized piece by piece
// around the markers (as libmtmd does), the capture points are found on that text as on any
// other, and then each marker's tokens are replaced by what the projector says the image is
// (ImageInsert: its wrapping tokens and one row per embedding), the points after it moved by
// the difference. The start of every image's rows is a capture point too, so a conversation
// whose image changes reuses everything before it.
//
// Pure functions over their arguments; thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "engine/vision/projector.h"
#include "util/status.h"

namespace prefixd::engine {

// What stands in a rendered message for an image until its tokens replace it. A client text
// that holds it is refused (the count of markers would not match the images).
inline constexpr char kImageMarker[] = "<__prefixd_image__>";

// One image chunk of a prompt (an image, or a tile of one): its rows are Prompt::tokens
// [offset, offset + image->n_tokens()).
struct PromptImage {
  int32_t offset = 0;
  std::shared_ptr<const PreparedImage> image;
  int32_t end() const { return offset + image->n_tokens(); }
};

// `text` tokenized with the markers' tokens in it, and where each marker's tokens are.
struct MarkedTokens {
  std::vector<Token> tokens;
  std::vector<std::pair<int32_t, int32_t>> markers;  // [begin, end) in tokens, in text order
};

// Tokenizes a piece of text (special tokens parsed); `first`: the prompt's first piece, which
// may take the BOS. The engine's is its TokenMemo's, so a conversation's text is tokenized once.
using PieceTokenizer = std::function<std::vector<Token>(std::string_view piece, bool first)>;

// Tokenizes `text` piece by piece around each kImageMarker with `tokenize`.
// InvalidArgument when the text holds another count of markers than `n_images` (a template
// that dropped or repeated a message, or a client text holding the marker).
Result<MarkedTokens> TokenizeAroundMarkers(const PieceTokenizer& tokenize, std::string_view text,
                                           size_t n_images);

// The prompt's tokens, images and capture points: each marker of `marked` replaced by its
// insert (in order), each point after a marker moved, points inside a marker dropped, and each
// image's first row added as a point. REQUIRES: inserts.size() == marked.markers.size().
void ExpandImages(const MarkedTokens& marked, std::span<const ImageInsert> inserts,
                  std::vector<Token>* tokens, std::vector<PromptImage>* images,
                  std::vector<int32_t>* capture_points);

}  // namespace prefixd::engine
