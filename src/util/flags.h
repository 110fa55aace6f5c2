// A small flag parser shared by the prefixd subcommands and the stand-alone bench programs:
// `--name value`, `--name=value`, `--switch`, and `-x value` short aliases. Each command
// declares its flags, then Parse() fills them and Help() prints every flag with its
// description and default.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "util/status.h"

namespace prefixd {

class Flags {
 public:
  Flags(std::string command, std::string summary);

  // Declares a flag. `names` is "--long" or "-s,--long". The target keeps its current value as
  // the default. REQUIRES: the target outlives Parse().
  void String(const std::string& names, std::string* target, const std::string& help);
  void Int(const std::string& names, int64_t* target, const std::string& help);
  void Double(const std::string& names, double* target, const std::string& help);
  void Bool(const std::string& names, bool* target, const std::string& help);  // a switch

  // Parses argv[first..argc). Returns InvalidArgument naming the bad flag. Sets help_requested()
  // on -h/--help instead of failing.
  Status Parse(int argc, char** argv, int first = 2);
  bool help_requested() const { return help_requested_; }
  std::string Help() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool };
  struct Flag {
    std::vector<std::string> names;
    Kind kind;
    void* target;
    std::string help;
    std::string default_text;
  };
  const Flag* Find(const std::string& name) const;
  Status Assign(const Flag& flag, const std::string& name, const std::string& value);
  void Add(const std::string& names, Kind kind, void* target, const std::string& help,
           std::string default_text);

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

// Sizes in flags: "123", "64K", "512M", "2G", "1T" (powers of 1024; a trailing "B"/"iB" is
// allowed) -> bytes. InvalidArgument "FLAG: expected a size such as 512M or 2G, got 'TEXT'"
// for anything else.
Result<uint64_t> ParseByteSize(const std::string& flag, const std::string& text);
// 2 << 30 -> "2G": the largest unit that divides `bytes` (ParseByteSize reads it back), for a
// size flag's default.
std::string ByteSizeText(uint64_t bytes);

// The items of a comma-separated flag value ("a, b,,c" -> a, b, c): spaces around an item are
// dropped, and so are empty items.
std::vector<std::string> SplitList(const std::string& text);

// Runs a subcommand's body after parsing argv[first..argc): prints help and returns 0 on --help,
// prints the error and returns 2 on a bad flag, else returns body(). Subcommands' flags start
// at argv[2], a stand-alone program's at argv[1].
template <typename Body>
int RunWithFlags(Flags& flags, int argc, char** argv, Body body, int first = 2) {
  Status st = flags.Parse(argc, argv, first);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n\n%s", st.message().c_str(), flags.Help().c_str());
    return 2;
  }
  return body();
}

}  // namespace prefixd
