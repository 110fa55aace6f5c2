#include "util/flags.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace prefixd {

namespace {

std::vector<std::string> SplitNames(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

Flags::Flags(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void Flags::Add(const std::string& names, Kind kind, void* target, const std::string& help,
                std::string default_text) {
  flags_.push_back(Flag{SplitNames(names), kind, target, help, std::move(default_text)});
}

void Flags::String(const std::string& names, std::string* target, const std::string& help) {
  Add(names, Kind::kString, target, help, target->empty() ? "" : *target);
}
void Flags::Int(const std::string& names, int64_t* target, const std::string& help) {
  Add(names, Kind::kInt, target, help, std::to_string(*target));
}
void Flags::Double(const std::string& names, double* target, const std::string& help) {
  std::ostringstream os;
  os << *target;
  Add(names, Kind::kDouble, target, help, os.str());
}
void Flags::Bool(const std::string& names, bool* target, const std::string& help) {
  Add(names, Kind::kBool, target, help, "");
}

const Flags::Flag* Flags::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

Status Flags::Assign(const Flag& flag, const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.target) = value;
      return Status::OK();
    case Kind::kInt: {
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0) {
        return Status::InvalidArgument(name + ": expected an integer, got '" + value + "'");
      }
      *static_cast<int64_t*>(flag.target) = v;
      return Status::OK();
    }
    case Kind::kDouble: {
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || errno != 0) {
        return Status::InvalidArgument(name + ": expected a number, got '" + value + "'");
      }
      *static_cast<double*>(flag.target) = v;
      return Status::OK();
    }
    case Kind::kBool:
      *static_cast<bool*>(flag.target) = true;
      return Status::OK();
  }
  return Status::Internal("unknown flag kind");
}

Status Flags::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      return Status::OK();
    }
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) return Status::InvalidArgument("unknown flag '" + name + "'");
    if (flag->kind != Kind::kBool && !has_value) {
      if (i + 1 >= argc) return Status::InvalidArgument(name + " needs a value");
      value = argv[++i];
    }
    PREFIXD_RETURN_IF_ERROR(Assign(*flag, name, value));
  }
  return Status::OK();
}

std::string Flags::Help() const {
  std::ostringstream os;
  os << "usage: prefixd " << command_ << " [flags]\n\n" << summary_ << "\n\nflags:\n";
  for (const Flag& f : flags_) {
    std::string names;
    for (const std::string& n : f.names) names += (names.empty() ? "" : ", ") + n;
    if (f.kind != Kind::kBool) names += " <value>";
    os << "  " << names << "\n      " << f.help;
    if (!f.default_text.empty()) os << " (default: " << f.default_text << ")";
    os << "\n";
  }
  os << "  -h, --help\n      show this help\n";
  return os.str();
}

Result<uint64_t> ParseByteSize(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit(end ? end : "");
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  uint64_t mult = 1;
  if (unit.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      case 'T': mult = 1ull << 40; break;
      default: mult = 0;
    }
  } else if (!unit.empty()) {
    mult = 0;
  }
  if (end == text.c_str() || mult == 0 || !(v >= 0) || v * double(mult) > 1.8e19) {
    return Status::InvalidArgument(flag + ": expected a size such as 512M or 2G, got '" + text +
                                   "'");
  }
  return uint64_t(v * double(mult));
}

std::string ByteSizeText(uint64_t bytes) {
  static constexpr char kUnits[] = "KMGT";
  std::string unit;
  for (int i = 0; bytes != 0 && bytes % 1024 == 0 && i < 4; ++i) {
    bytes /= 1024;
    unit = kUnits[i];
  }
  return std::to_string(bytes) + unit;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    items.push_back(item.substr(first, item.find_last_not_of(" \t") + 1 - first));
  }
  return items;
}

}  // namespace prefixd
