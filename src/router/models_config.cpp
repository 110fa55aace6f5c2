#include "router/models_config.h"

#include <dirent.h>
#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
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

// Applies `key = value` to the section's spec.
Status ApplyKey(ModelSpec& spec, const std::string& where, const std::string& key,
                const std::string& value, const std::string& base_dir) {
  if (key == "model" || key == "m") {
    spec.path = value.empty() || value[0] == '/' || base_dir.empty() ? value
                                                                     : base_dir + "/" + value;
  } else if (key == "alias") {
    for (const std::string& a : SplitList(value)) spec.aliases.push_back(a);
  } else if (key == "pinned") {
    PREFIXD_ASSIGN_OR_RETURN(spec.pinned, ParseBool(where, value));
  } else if (key == "ttl") {
    PREFIXD_ASSIGN_OR_RETURN(spec.ttl_s, ParseSeconds(where, value));
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
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Status::IOError("--models-dir " + dir + ": cannot be read");
  std::vector<ModelSpec> out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= 5 || !EndsWith(name, ".gguf") || name[0] == '.') continue;
    ModelSpec spec;
    spec.id = name.substr(0, name.size() - 5);
    spec.path = dir + "/" + name;
    out.push_back(std::move(spec));
  }
  closedir(d);
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
      *same = std::move(f);
    } else {
      dir_specs.push_back(std::move(f));
    }
  }
  if (dir_specs.empty()) return Status::InvalidArgument("no models: the dir holds no .gguf file");
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
