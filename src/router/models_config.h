// ModelSpec: one model a router serves, and where the specs come from: a directory
// (--models-dir) and/or a models file (--models), one INI section a model:
//
//   [coder]                      ; the section name is the model's id
//   model  = /models/qwen-coder.gguf
//   alias  = claude-*, gpt-5     ; more names and glob patterns (fnmatch) requests may give
//   pinned = true                ; never unloaded to make room
//   ttl    = 600                 ; seconds idle before it is unloaded; 0: never
//   mmproj = mmproj-F16.gguf     ; its projector: it reads images (no-mmproj = true: it reads
//                                ;   none, whatever its folder holds)
//   ctx    = 32768               ; any other key is a `prefixd serve` flag for this model:
//   slots  = 1                   ;   key = value -> --key value ("true" -> a bare --key)
//   image-max-tokens = 256       ;   (ctx and n-predict are also what /v1/models tells)
//
// The directory, as llama-server's router reads one: each .gguf file directly in it is a model
// (id: the file name without .gguf); each folder in it that holds a model's .gguf is a model
// (id: the folder's name) with the projector beside it, the .gguf whose name has "mmproj" in it.
// A file whose name has "mmproj" in it is never a model. A folder of several models' files makes
// one model each (id: the file's name), all with the folder's projector. A split model is its
// first shard (-00001-of-N, left out of its id); the other shards are not models. A file's
// section for a model the directory also holds (same id) overrides it, keeping the directory's
// file and projector where it names none. Parsing is pure; thread-safe.
#pragma once

#include <cstdint>
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
  std::string mmproj;                // its projector GGUF (--mmproj): it reads images; "": none
  bool no_mmproj = false;            // the file said no-mmproj: none, whatever its folder holds
  int64_t ctx = -1;                  // its section's ctx (--ctx); -1: the router's
  int64_t n_predict = -1;            // its section's n-predict (-n); -1: the router's
};

// Whether `name` (a request's `model`) names `spec`: its id, an alias, or a pattern alias.
bool SpecMatches(const ModelSpec& spec, const std::string& name);

// The models in `dir` (see above), sorted by id. An unreadable dir is an error, and so is a
// folder with two projectors (which one is the model's?), naming both.
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
