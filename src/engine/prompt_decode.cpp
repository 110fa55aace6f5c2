#include "engine/prompt_decode.h"

#include <algorithm>

#include "engine/vision/projector.h"

namespace prefixd::engine {

std::vector<int32_t> ImageCuts(const Prompt& prompt) {
  const int32_t n = int32_t(prompt.tokens.size());
  std::vector<int32_t> cuts;
  for (const PromptImage& img : prompt.images) {
    for (int32_t c : {img.offset, img.end()}) {
      if (c > 0 && c < n) cuts.push_back(c);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

int32_t ImageRowsBefore(const Prompt& prompt, int32_t n) {
  int32_t rows = 0;
  for (const PromptImage& img : prompt.images) rows += std::max(0, std::min(n, img.end()) - img.offset);
  return rows;
}

namespace {

// The image whose rows hold `pos`, or the first one after it; end() when none.
std::vector<PromptImage>::const_iterator ImageAtOrAfter(const std::vector<PromptImage>& images,
                                                         int32_t pos) {
  return std::find_if(images.begin(), images.end(),
                      [pos](const PromptImage& img) { return img.end() > pos; });
}

Status DecodeImageRows(Context& ctx, Projector& projector, int32_t seq, const PromptImage& img,
                       const RopeLayout& rope, int32_t p0, int32_t p1, bool want_last_logits) {
  PREFIXD_ASSIGN_OR_RETURN(auto rows, projector.Embeddings(*img.image));
  const int32_t n_embd = projector.n_embd();
  for (int32_t pos = p0; pos < p1;) {
    // A causal image longer than a call goes in calls of n_batch rows (as libmtmd's helper
    // does); a non-causal one was refused at preparation when it does not fit one ubatch.
    const int32_t end = std::min(p1, pos + int32_t(ctx.n_batch()));
    const float* from = rows->data() + size_t(pos - img.offset) * size_t(n_embd);
    std::vector<int32_t> rope_pos;
    if (projector.mrope()) {
      rope_pos = img.image->RopePositions(rope.TimeAt(img.offset), pos - img.offset,
                                          end - img.offset);
    }
    PREFIXD_RETURN_IF_ERROR(ctx.DecodeEmbeddings(seq, from, end - pos, pos,
                                                 img.image->non_causal(),
                                                 want_last_logits && end == p1, rope_pos));
    pos = end;
  }
  return Status::OK();
}

}  // namespace

RopeLayout RopeLayoutOf(const Prompt& prompt) {
  std::vector<RopeSpan> spans;
  spans.reserve(prompt.images.size());
  for (const PromptImage& img : prompt.images) {
    spans.push_back({img.offset, img.image->n_tokens(), img.image->n_pos()});
  }
  return RopeLayout(std::move(spans));
}

Status DecodePromptRange(Context& ctx, Projector* projector, int32_t seq, const Prompt& prompt,
                         int32_t p0, int32_t p1, bool want_last_logits, int32_t* images_decoded) {
  const std::span<const Token> tokens(prompt.tokens);
  // The layout of the prompt this sequence now holds; the answer's tokens follow it too.
  if (projector != nullptr && projector->mrope() && prompt.images.empty()) {
    ctx.SetRopeLayout(seq, RopeLayout());
  }
  if (prompt.images.empty()) {
    return ctx.DecodeChunk(seq, tokens.subspan(size_t(p0), size_t(p1 - p0)), p0, want_last_logits);
  }
  if (projector == nullptr) return Status::Internal("a prompt with images and no projector");
  const RopeLayout rope = RopeLayoutOf(prompt);
  if (projector->mrope()) ctx.SetRopeLayout(seq, rope);
  for (int32_t pos = p0; pos < p1;) {
    auto img = ImageAtOrAfter(prompt.images, pos);
    if (img != prompt.images.end() && img->offset <= pos) {
      const int32_t end = std::min(p1, img->end());
      PREFIXD_RETURN_IF_ERROR(DecodeImageRows(ctx, *projector, seq, *img, rope, pos, end,
                                              want_last_logits && end == p1));
      if (images_decoded != nullptr) ++*images_decoded;
      pos = end;
      continue;
    }
    const int32_t end = img == prompt.images.end() ? p1 : std::min(p1, img->offset);
    PREFIXD_RETURN_IF_ERROR(ctx.DecodeChunk(seq, tokens.subspan(size_t(pos), size_t(end - pos)),
                                            pos, want_last_logits && end == p1));
    pos = end;
  }
  return Status::OK();
}

}  // namespace prefixd::engine
