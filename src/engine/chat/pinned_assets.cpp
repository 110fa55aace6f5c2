#include "engine/chat/pinned_assets.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace prefixd::engine {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVocabPrefix = "ggml-vocab-";

// Names of the files in `dir` that start with `prefix` and end with `suffix`, both removed.
std::vector<std::string> NamesIn(const fs::path& dir, const std::string& prefix,
                                 const std::string& suffix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string f = it->path().filename().string();
    if (f.size() > prefix.size() + suffix.size() && f.starts_with(prefix) && f.ends_with(suffix)) {
      names.push_back(f.substr(prefix.size(), f.size() - prefix.size() - suffix.size()));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string SomeNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 12; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 12) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out.empty() ? "none found" : out;
}

Result<std::string> Resolve(const std::string& name_or_file, const fs::path& dir,
                            const std::string& prefix, const std::string& suffix,
                            const std::vector<std::string>& names, const char* what) {
  std::error_code ec;
  if (!name_or_file.empty() && fs::is_regular_file(name_or_file, ec)) return name_or_file;
  std::string name = name_or_file;
  if (name.starts_with(prefix)) name = name.substr(prefix.size());
  if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  if (!name.empty() && name.find('/') == std::string::npos) {
    fs::path p = dir / (prefix + name + suffix);
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return Status::NotFound(std::string(what) + " '" + name_or_file +
                          "': no such file, and no such name in " + dir.string() +
                          " (names: " + SomeNames(names) + ")");
}

}  // namespace

const std::string& PinnedModelsDir() {
  static const std::string dir = PREFIXD_PINNED_MODELS_DIR;
  return dir;
}

std::vector<std::string> PinnedTemplateNames() {
  return NamesIn(fs::path(PinnedModelsDir()) / "templates", "", ".jinja");
}

std::vector<std::string> PinnedVocabNames() {
  return NamesIn(PinnedModelsDir(), kVocabPrefix, ".gguf");
}

Result<std::string> ResolveTemplatePath(const std::string& name_or_file) {
  return Resolve(name_or_file, fs::path(PinnedModelsDir()) / "templates", "", ".jinja",
                 PinnedTemplateNames(), "chat template");
}

Result<std::string> ResolveVocabPath(const std::string& name_or_file) {
  return Resolve(name_or_file, PinnedModelsDir(), kVocabPrefix, ".gguf", PinnedVocabNames(),
                 "vocab");
}

Result<std::string> LoadTemplateSource(const std::string& name_or_file) {
  auto path = ResolveTemplatePath(name_or_file);
  if (!path.ok()) return path.status();
  std::ifstream in(*path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::IOError("cannot read chat template " + *path);
  if (ss.str().empty()) return Status::InvalidArgument("chat template " + *path + " is empty");
  return ss.str();
}

std::vector<std::string> PinnedTemplatesMatching(const std::string& source) {
  std::vector<std::string> out;
  for (const std::string& name : PinnedTemplateNames()) {
    Result<std::string> s = LoadTemplateSource(name);
    if (s.ok() && *s == source) out.push_back(name);
  }
  return out;
}

}  // namespace prefixd::engine
