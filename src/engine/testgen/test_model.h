// Random-weight test models: GGUF files of real llama.cpp architectures (llama, Gated DeltaNet
// hybrids, Mamba-2, short-conv, sliding-window attention, MoE, MLA, DSA, ...) with a real
// byte-level BPE tokenizer and a Qwen3-style chat template, for tests and benchmarks that must
// not download anything. See docs/test-models.md for the shapes, the tokenizer and the template.
//
// prefixd describes the archs of TestModelArchs() and gemma4 itself. Every other arch is
// made by the pinned llama.cpp's own generator (test-llama-archs, in the llama.cpp build
// folder, or $PREFIXD_TEST_LLAMA_ARCHS) and rebuilt with prefixd's tokenizer and template.
//
// The weights are random but deterministic: the same spec and seed give a byte-identical file
// (on the same pinned llama.cpp). Logits are finite; the text a model generates is noise.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd::engine {

// A scripted answer (TestModelSpec::script), as a table from the last token to the next.
// A token that comes more than once is followed by the same token each time, or by tokens
// ranked in `ranks`: the model writes the first of them that the request's grammar allows.
// A tool call needs that: Qwen3.5's XML call writes ">\n" five times, and only the server's
// tool-call grammar (lazy, from "<tool_call>" on) tells the "<" after "<tool_call>\n" from
// the "</" after "</parameter>\n" (docs/test-models.md, "A scripted tool call").
struct TestScript {
  // The text, in parts; each part is tokenized on its own (special tokens parsed) and the
  // tokens are joined, so a part boundary is a token boundary (">" then "\n" as two parts are
  // two tokens where ">\n" would be one).
  std::vector<std::string> parts;
  // For a token followed by more than one token, its followers in order of preference, by
  // their text, "" for the end of the turn; each one token, at most kMaxRanks. They may name a
  // token the script never puts after it: the prompt's last token, when the script holds it
  // too, ranks the script's first token.
  std::map<std::string, std::vector<std::string>> ranks;
  static constexpr size_t kMaxRanks = 5;
  bool empty() const { return parts.empty(); }
};

struct TestModelSpec {
  std::string arch;              // one of TestModelArchs() or ExtraTestModelArchs(), or
                                 // another arch llama.cpp's generator writes
  std::string shape = "tiny";    // one of TestModelShapes()
  uint64_t seed = 1;             // selects the weights; the tokenizer and template never change
  // A real tokenizer: every "tokenizer.*" key (tokens, types, merges or scores, pre-tokenizer,
  // special ids, add_bos, its chat template when it has one) of a vocab GGUF, by NAME
  // ("qwen35": the pinned source's models/ggml-vocab-qwen35.gguf) or FILE. The embedding and
  // output tensors follow its size (Q8_0 above 64K tokens). Empty: prefixd's own 640-token BPE
  // (32768 for small and medium) and Qwen3-style template.
  std::string vocab;
  // The chat template, by NAME ("Qwen3.5-4B": models/templates/Qwen3.5-4B.jinja) or FILE, in
  // place of the tokenizer's own. Empty: the tokenizer's (none for a vocab without one).
  std::string chat_template;
  // Multi-token-prediction heads (GGUF "<arch>.nextn_predict_layers"): that many NextN decoder
  // blocks after the trunk, for llama.cpp's MTP draft context (--spec-type draft-mtp). Only
  // the archs of NextnTestModelArchs(); 0: none, the file is what it was without the option.
  uint32_t nextn_layers = 0;
  // With nextn_layers, on prefixd's own archs (qwen35, qwen3next): a trunk whose every residual
  // branch writes zero (its output projections are 0, its norms 1), so its hidden state is the
  // last token's embedding and it answers by that token alone, and an MTP head that computes
  // the same answer from the token it is given (eh_proj passes the token's half through; its
  // LM head and embeddings are the trunk's). Drafts are then accepted, short of a near-tie.
  bool predictable = false;
  // A scripted model (qwen35, qwen3next): its greedy answer to any prompt is the script, then
  // the end of the turn, so that a client sees answers that end, as a real model's do. The
  // trunk is the predictable one (its answer depends on the last token only) and the
  // embeddings and LM head hold a table from each token of the script to the next (the first
  // after any token not in the script, the end of turn after the last). The margin is wide
  // enough for sampling at temperature 1 to follow it. Empty: not scripted.
  TestScript script;
  // prefixd's own archs: the large matrices in F16 (the small shape's type) whatever the shape;
  // the tiny shape's are F32. On a CPU with AMX, ggml computes F16 weights from its AMX buffer.
  bool f16_weights = false;
};

// Writes the model described by `spec` to `out_path` (through a temporary file in the same
// folder, renamed into place once complete). Returns InvalidArgument naming the valid choices
// for an unknown arch or shape (the archs of llama.cpp's generator have only "tiny"), NotFound
// when such an arch needs the generator and it is missing, IOError when the file cannot be
// written, Internal when llama.cpp rejects the model. NotFound for a vocab or template that is
// neither a pinned NAME nor a file.
// Not thread-safe: it calls into llama.cpp's process-wide backend and log state.
Status MakeTestModel(const TestModelSpec& spec, const std::string& out_path);

// The architectures whose prompt cache the codec and engine suites prove, in a stable order.
// They are llama.cpp's GGUF architecture names: llama, qwen35, qwen3next, nemotron_h,
// granitehybrid, lfm2, mamba2, gemma3, gpt-oss. Every shape.
const std::vector<std::string>& TestModelArchs();

// The further architectures make-test-model is tested on (load, chat tokenizer, memory layout,
// deterministic decode) whose cache the codec and engine suites do not cover yet: gemma4
// (prefixd's own, every shape), then qwen4exp, deepseek4, deepseek2, glm-dsa, qwen35moe,
// nemotron_h_moe, kimi-linear, jamba, falcon-h1, minimax-m3 (llama.cpp's generator, tiny only).
const std::vector<std::string>& ExtraTestModelArchs();

// The archs make-test-model can give MTP heads to (TestModelSpec::nextn_layers): those of
// TestModelArchs() whose pinned llama.cpp graph has an MTP draft head (qwen35, one head).
const std::vector<std::string>& NextnTestModelArchs();

// "tiny" (a few MB, for unit tests), "small" (~0.5B, F16), "medium" (~3B, Q8_0).
const std::vector<std::string>& TestModelShapes();

}  // namespace prefixd::engine
