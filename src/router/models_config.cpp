#include "router/models_config.h"

#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <regex>
#include <set>

#include "util/flags.h"

namespace prefixd::router {

namespace {

bool IsPattern(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A value after '=' without its trailing "; comment" or "# comment".
std::string ValueOf(const std::string& raw) {
  std::string v = raw;
  for (const char* mark : {" ;", " #", "\t;", "\t#"}) {
    const size_t at = v.find(mark);
    if (at != std::string::npos) v.resize(at);
  }
  return Trim(v);
}

Result<bool> ParseBool(const std::string& where, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return Status::InvalidArgument(where + ": expected true or false, got '" + v + "'");
}

Result<int> ParseSeconds(const std::string& where, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > 365L * 86400) {
    return Status::InvalidArgument(where + ": ttl is 0 (never) or seconds, got '" + v + "'");
  }
  return int(n);
}

// A path in the models file: relative ones are taken from the file's own directory.
std::string PathOf(const std::string& value, const std::string& base_dir) {
  return value.empty() || value[0] == '/' || base_dir.empty() ? value : base_dir + "/" + value;
}

// A token count the section's server is started with: `--flag value`, kept as a number too (it
// is what /v1/models tells of the model before it loads).
Status ApplyCount(ModelSpec& spec, int64_t* target, const std::string& where, const char* flag,
                  const std::string& value, int64_t least) {
  char* end = nullptr;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || (n != 0 && (n < least || n > (1 << 24)))) {
    return Status::InvalidArgument(where + ": " + (flag + 2) + " is 0 or " +
                                   std::to_string(least) + "..16777216 tokens, got '" + value +
                                   "'");
  }
  *target = n;
  spec.args.insert(spec.args.end(), {flag, value});
  return Status::OK();
}

// Applies `key = value` to the section's spec: the router's keys, the model's files, the
// counts /v1/models tells, and any other key as a serve flag.
Status ApplyKey(ModelSpec& spec, const std::string& where, const std::string& key,
                const std::string& value, const std::string& base_dir) {
  if (key == "model" || key == "m") {
    spec.path = PathOf(value, base_dir);
  } else if (key == "mmproj" || key == "mm") {
    spec.mmproj = PathOf(value, base_dir);
    spec.no_mmproj = spec.mmproj.empty();
  } else if (key == "no-mmproj") {
    PREFIXD_ASSIGN_OR_RETURN(spec.no_mmproj, ParseBool(where, value));
    if (spec.no_mmproj) spec.mmproj.clear();
  } else if (key == "alias") {
    for (const std::string& a : SplitList(value)) spec.aliases.push_back(a);
  } else if (key == "pinned") {
    PREFIXD_ASSIGN_OR_RETURN(spec.pinned, ParseBool(where, value));
  } else if (key == "ttl") {
    PREFIXD_ASSIGN_OR_RETURN(spec.ttl_s, ParseSeconds(where, value));
  } else if (key == "ctx" || key == "c" || key == "ctx-size") {
    return ApplyCount(spec, &spec.ctx, where, "--ctx", value, 16);
  } else if (key == "n-predict" || key == "n" || key == "predict") {
    return ApplyCount(spec, &spec.n_predict, where, "--n-predict", value, 1);
  } else if (key == "host" || key == "port" || key == "cache-dir" || key == "models-dir" ||
             key == "models") {
    return Status::InvalidArgument(where + ": '" + key + "' is the router's; a model's server "
                                   "listens on loopback and keeps its cache under the router's dir");
  } else {
    spec.args.push_back("--" + key);
    if (value != "true") spec.args.push_back(value);
  }
  return Status::OK();
}

bool IsGguf(const std::string& name) { return name.size() > 5 && EndsWith(name, ".gguf"); }

// llama-server's test for a projector beside a model (common/preset.cpp, is_mmproj_file).
bool IsProjectorFile(const std::string& name) { return name.find("mmproj") != std::string::npos; }

// A split model's shard: "-00002-of-00003.gguf". Only the first names the model.
bool IsShard(const std::string& name, bool* first) {
  static const std::regex kShard("-([0-9]{5})-of-[0-9]{5}\\.gguf$");
  std::smatch m;
  if (!std::regex_search(name, m, kShard)) return false;
  *first = m[1].str() == "00001";
  return true;
}

// The id a file in a folder of several models gets: its name without .gguf and without a
// first shard's -00001-of-N.
std::string FileId(const std::string& name) {
  static const std::regex kTail("(-00001-of-[0-9]{5})?\\.gguf$");
  return std::regex_replace(name, kTail, "");
}

struct DirEntry {
  std::string name;
  bool is_dir = false;
};

// `dir`'s entries but hidden ones, sorted by name; a link counts as what it points at.
Result<std::vector<DirEntry>> ListDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Status::IOError("--models-dir " + dir + ": cannot be read");
  std::vector<DirEntry> out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    const bool is_dir = stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    out.push_back({name, is_dir});
  }
  closedir(d);
  std::sort(out.begin(), out.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

// The models in the folder `name` of `dir`: one model's file (or first shard) takes the folder's
// name; several take their files' names. Each gets the folder's projector. A folder with no
// model's file (notes, a projector alone) holds none.
Result<std::vector<ModelSpec>> ScanModelFolder(const std::string& dir, const std::string& name) {
  const std::string folder = dir + "/" + name;
  PREFIXD_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, ListDir(folder));
  std::vector<std::string> models, projectors;
  for (const DirEntry& e : entries) {
    bool first = true;
    if (e.is_dir || !IsGguf(e.name)) continue;
    if (IsProjectorFile(e.name)) {
      projectors.push_back(e.name);
    } else if (!IsShard(e.name, &first) || first) {
      models.push_back(e.name);
    }
  }
  if (projectors.size() > 1) {
    return Status::InvalidArgument("--models-dir " + folder + ": two projectors, " +
                                   projectors[0] + " and " + projectors[1] +
                                   ": keep the one its model reads images with");
  }
  std::vector<ModelSpec> out;
  for (const std::string& file : models) {
    ModelSpec spec;
    spec.id = models.size() == 1 ? name : FileId(file);
    spec.path = folder + "/" + file;
    if (!projectors.empty()) spec.mmproj = folder + "/" + projectors[0];
    out.push_back(std::move(spec));
  }
  return out;
}

// An id names a directory under the router's cache dir: `..` or a slash would name another.
bool IsPlainId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != ':' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool SpecMatches(const ModelSpec& spec, const std::string& name) {
  if (name == spec.id) return true;
  for (const std::string& a : spec.aliases) {
    if (IsPattern(a) ? fnmatch(a.c_str(), name.c_str(), 0) == 0 : a == name) return true;
  }
  return false;
}

Result<std::vector<ModelSpec>> ScanModelsDir(const std::string& dir) {
  PREFIXD_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, ListDir(dir));
  std::vector<ModelSpec> out;
  for (const DirEntry& e : entries) {
    if (e.is_dir) {
      PREFIXD_ASSIGN_OR_RETURN(std::vector<ModelSpec> folder, ScanModelFolder(dir, e.name));
      for (ModelSpec& s : folder) out.push_back(std::move(s));
    } else if (bool first = true;
               IsGguf(e.name) && !IsProjectorFile(e.name) && (!IsShard(e.name, &first) || first)) {
      ModelSpec spec;
      spec.id = FileId(e.name);
      spec.path = dir + "/" + e.name;
      out.push_back(std::move(spec));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ModelSpec& a, const ModelSpec& b) { return a.id < b.id; });
  return out;
}

Result<std::vector<ModelSpec>> ParseModelsFile(const std::string& text, const std::string& origin,
                                               const std::string& base_dir) {
  std::vector<ModelSpec> out;
  size_t line_no = 0;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = Trim(text.substr(begin, end - begin));
    begin = end + 1;
    ++line_no;
    const std::string where = origin + ":" + std::to_string(line_no);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) {
        return Status::InvalidArgument(where + ": a section is [model-id]");
      }
      out.emplace_back();
      out.back().id = Trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument(where + ": expected key = value");
    if (out.empty()) return Status::InvalidArgument(where + ": a key before the first [model-id]");
    const std::string key = Trim(line.substr(0, eq));
    PREFIXD_RETURN_IF_ERROR(ApplyKey(out.back(), where, key, ValueOf(line.substr(eq + 1)), base_dir));
  }
  return out;
}

Result<std::vector<ModelSpec>> MergeSpecs(std::vector<ModelSpec> dir_specs,
                                          std::vector<ModelSpec> file) {
  std::set<std::string> in_file;
  for (const ModelSpec& f : file) {
    if (!in_file.insert(f.id).second) {
      return Status::InvalidArgument("model id " + f.id + ": two sections");
    }
  }
  for (ModelSpec& f : file) {
    auto same = std::find_if(dir_specs.begin(), dir_specs.end(),
                             [&](const ModelSpec& d) { return d.id == f.id; });
    if (same != dir_specs.end()) {
      if (f.path.empty()) f.path = same->path;
      if (f.mmproj.empty() && !f.no_mmproj) f.mmproj = same->mmproj;
      *same = std::move(f);
    } else {
      dir_specs.push_back(std::move(f));
    }
  }
  if (dir_specs.empty()) {
    return Status::InvalidArgument("no models: the dir holds no model's .gguf file, directly or "
                                   "in a folder of its own");
  }
  std::set<std::string> ids;
  for (const ModelSpec& s : dir_specs) {
    if (!IsPlainId(s.id)) {
      return Status::InvalidArgument("model id '" + s.id.substr(0, 100) +
                                     "': letters, digits and . _ : - only, not starting with "
                                     "'.' (it names the model's cache dir)");
    }
    if (s.path.empty()) return Status::InvalidArgument("model " + s.id + ": no `model = PATH`");
    if (!ids.insert(s.id).second) return Status::InvalidArgument("model id " + s.id + " twice");
  }
  return dir_specs;
}

}  // namespace prefixd::router
