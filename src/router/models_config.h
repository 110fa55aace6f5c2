// ModelSpec: one model a router serves, and where the specs come from: every .gguf file in a
// directory (--models-dir) and/or a models file (--models), one INI section a model:
//
//   [coder]                      ; the section name is the model's id
//   model  = /models/qwen-coder.gguf
//   alias  = claude-*, gpt-5     ; more names and glob patterns (fnmatch) requests may give
//   pinned = true                ; never unloaded to make room
//   ttl    = 600                 ; seconds idle before it is unloaded; 0: never
//   ctx    = 32768               ; any other key is a `prefixd serve` flag for this model:
//   slots  = 1                   ;   key = value -> --key value ("true" -> a bare --key)
//
// A file's section for a model the directory also holds (same id) overrides it. Ids are the
// file names without .gguf. Parsing is pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd::router {

struct ModelSpec {
  std::string id;                    // what /v1/models lists and requests name
  std::string path;                  // the GGUF file
  std::vector<std::string> aliases;  // more names; * ? [ make a pattern
  bool pinned = false;
  int ttl_s = -1;                    // -1: the router's default; 0: never unloaded for idleness
  std::vector<std::string> args;     // more `serve` flags for this model's server
};

// Whether `name` (a request's `model`) names `spec`: its id, an alias, or a pattern alias.
bool SpecMatches(const ModelSpec& spec, const std::string& name);

// The .gguf files directly in `dir`, sorted by id. An unreadable dir is an error.
Result<std::vector<ModelSpec>> ScanModelsDir(const std::string& dir);
// Parses a models file's text. `origin` names it in errors ("models.ini:12: ...").
// Relative model paths are taken from `base_dir`.
Result<std::vector<ModelSpec>> ParseModelsFile(const std::string& text, const std::string& origin,
                                               const std::string& base_dir);
// Merges `file` into `dir_specs` (a file section replaces the dir's model of the same id) and
// checks the result: at least one model, ids unique and plain names.
Result<std::vector<ModelSpec>> MergeSpecs(std::vector<ModelSpec> dir_specs,
                                          std::vector<ModelSpec> file);

}  // namespace prefixd::router
