// Random-weight image projectors ("mmproj" GGUF files, libmtmd's format) for the test models:
// with one, tests and benches run libmtmd's real image encoder on the CPU without downloading
// anything. See docs/test-models.md ("Image projectors") for the shapes and token counts.
//
// A projector is a tiny vision transformer (32 wide, 2 blocks, 2 heads, in the layout of the
// projector type's real one) and the type's own merger, whose output width is the text model's embedding width, so that
// libmtmd accepts it beside the model MakeTestModel writes for the same arch and shape.
//
// The weights are random but deterministic: the same arch, shape and seed give a byte-identical
// file. The embeddings of an image are finite and depend on its pixels; they mean nothing.
#pragma once

#include <string>
#include <vector>

#include "engine/testgen/test_model.h"
#include "util/status.h"

namespace prefixd::engine {

// The archs whose test model has a projector, with the projector type libmtmd runs for it:
// gemma3 ("gemma3": fixed 64x64 input, 16 tokens an image), lfm2 ("lfm2": dynamic resolution,
// 64 to 256 tokens an image, tiled above that), qwen35 ("qwen3vl_merger": dynamic resolution,
// 8 to 4096 tokens; M-RoPE positions), gemma4 ("gemma4v": dynamic resolution, 70 to 1120
// tokens).
const std::vector<std::string>& ProjectorTestModelArchs();

// Writes the projector that fits the text model MakeTestModel writes for `spec.arch` and
// `spec.shape` to `out_path` (through a temporary file in the same folder, synced and renamed
// into place). Only arch, shape and seed are read: a vocab, template, MTP head or script does not
// change the text model's width. Returns InvalidArgument for an arch without a projector (naming
// those with one) or an unknown shape, IOError when the file cannot be written.
// Not thread-safe: it initializes llama.cpp's process-wide backend once.
Status MakeTestProjector(const TestModelSpec& spec, const std::string& out_path);

}  // namespace prefixd::engine
