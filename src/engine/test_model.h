// Random-weight test models: GGUF files of real llama.cpp architectures (llama, Gated DeltaNet
// hybrids, Mamba-2, short-conv, sliding-window attention, MoE) with a real byte-level BPE
// tokenizer and a Qwen3-style chat template, for tests and benchmarks that must not download
// anything. See docs/test-models.md for the shapes, the tokenizer and the template.
//
// The weights are random but deterministic: the same spec and seed give a byte-identical file
// (on the same pinned llama.cpp). Logits are finite; the text a model generates is noise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd::engine {

struct TestModelSpec {
  std::string arch;              // one of TestModelArchs()
  std::string shape = "tiny";    // one of TestModelShapes()
  uint64_t seed = 1;             // selects the weights; the tokenizer and template never change
};

// Writes the model described by `spec` to `out_path` (through a temporary file in the same
// folder, renamed into place once complete). Returns InvalidArgument naming the valid choices
// for an unknown arch or shape, IOError when the file cannot be written, Internal when
// llama.cpp rejects the model.
// Not thread-safe: it calls into llama.cpp's process-wide backend and log state.
Status MakeTestModel(const TestModelSpec& spec, const std::string& out_path);

// The user-facing architecture names accepted by MakeTestModel, in a stable order.
// They are llama.cpp's GGUF architecture names: llama, qwen35, qwen3next, nemotron_h,
// granitehybrid, lfm2, mamba2, gemma3, gpt-oss.
const std::vector<std::string>& TestModelArchs();

// "tiny" (a few MB, for unit tests), "small" (~0.5B, F16), "medium" (~3B, Q8_0).
const std::vector<std::string>& TestModelShapes();

}  // namespace prefixd::engine
