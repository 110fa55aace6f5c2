// Pinned assets: the real chat templates (models/templates/*.jinja) and real tokenizers
// (models/ggml-vocab-*.gguf) the pinned llama.cpp source ships, found by name so that users and
// tests can say `--template Qwen3.5-4B` or `--vocab qwen35` instead of a path.
// Pure functions of the file system; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd::engine {

// The pinned source's models/ directory (compiled in; set-up puts the source there).
const std::string& PinnedModelsDir();

// `name_or_file` is an existing file (any path), or a NAME: "Qwen3.5-4B" or
// "Qwen3.5-4B.jinja" -> models/templates/Qwen3.5-4B.jinja. NotFound names what was looked for
// and lists a few of the available names.
Result<std::string> ResolveTemplatePath(const std::string& name_or_file);
// The template's Jinja source (ResolveTemplatePath, then read).
Result<std::string> LoadTemplateSource(const std::string& name_or_file);
// "qwen35" or "ggml-vocab-qwen35.gguf" -> models/ggml-vocab-qwen35.gguf, or an existing file.
Result<std::string> ResolveVocabPath(const std::string& name_or_file);

// Every template NAME (file name without .jinja), sorted.
std::vector<std::string> PinnedTemplateNames();
// The NAMEs of the pinned templates whose source is exactly `source` (some are shipped twice
// under two names), sorted; empty when none is.
std::vector<std::string> PinnedTemplatesMatching(const std::string& source);
// Every vocab NAME ("qwen35", "llama-bpe", ...), sorted.
std::vector<std::string> PinnedVocabNames();

}  // namespace prefixd::engine
