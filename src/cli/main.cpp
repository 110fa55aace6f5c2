#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

// Commands are linked in as their issues land; a command whose code is not in this build is
// left out of the list (weak references resolve to null) rather than stubbed.
namespace prefixd::cli {
int CmdRun(int, char**) __attribute__((weak));
int CmdServe(int, char**) __attribute__((weak));
int CmdBench(int, char**) __attribute__((weak));
int CmdCache(int, char**) __attribute__((weak));
int CmdMakeTestModel(int, char**) __attribute__((weak));
int CmdSystemInfo(int, char**) __attribute__((weak));
}  // namespace prefixd::cli

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"serve", prefixd::cli::CmdServe, "run the OpenAI-compatible HTTP server"},
    {"launch", prefixd::cli::CmdLaunch,
     "start Claude Code, Codex or opencode against a running prefixd, set up for its model"},
    {"run", prefixd::cli::CmdRun, "generate text for one prompt and print it"},
    {"bench", prefixd::cli::CmdBench, "replay an agent trace and report prefix reuse"},
    {"cache", prefixd::cli::CmdCache, "inspect and manage a cache directory"},
    {"make-test-model", prefixd::cli::CmdMakeTestModel,
     "generate a random-weight GGUF model of a real architecture"},
    {"system-info", prefixd::cli::CmdSystemInfo,
     "print the CPU and the ggml CPU features this build runs (its kernel path)"},
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "prefixd: a local LLM inference server whose prompt cache never throws away a "
               "reusable prefix\n\nusage: prefixd <command> [flags]\n\ncommands:\n");
  for (const Command& c : kCommands) {
    if (c.fn != nullptr) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
  }
  std::fprintf(out, "\n`prefixd <command> --help` lists a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (c.fn != nullptr && std::strcmp(argv[1], c.name) == 0) return c.fn(argc, argv);
  }
  std::fprintf(stderr, "prefixd: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
