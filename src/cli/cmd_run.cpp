// prefixd run: prompts in, generated text out (greedy by default, the same every time).
// Several -p flags are not supported; instead --repeat N runs the same prompt N times through
// the cache (the second run shows the reuse), and --stats prints usage on stderr.
#include <cstdio>

#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/engine_flags.h"
#include "util/flags.h"

namespace prefixd::cli {

namespace {

engine::EngineFlagValues RunEngineDefaults() {
  engine::EngineFlagValues v;
  v.ctx = 4096;  // a short prompt (the engine's default: 8192)
  return v;
}

struct RunArgs {
  engine::EngineFlagValues engine = RunEngineDefaults();  // cache_dir "": RAM only
  std::string prompt;
  std::string messages_json;
  int64_t n_predict = 32;  // the request's max_tokens (serve's --n-predict is a cap)
  int64_t repeat = 1;
  double temperature = 0.0;
  int64_t seed = 0;
  bool stats = false;
};

void PrintUsage(const engine::CompletionResult& r) {
  std::fprintf(stderr,
               "prompt_tokens=%d cached_tokens=%d evaluated_tokens=%d completion_tokens=%d "
               "prefill_ms=%.1f tier=%s miss=%s\n",
               r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.evaluated_tokens,
               r.usage.completion_tokens, r.usage.prefill_ms, cache::TierName(r.cache.tier),
               cache::MissReasonName(r.cache.miss));
}

int Run(const RunArgs& a) {
  auto eo = engine::ToEngineOptions(a.engine);
  if (!eo.ok()) {
    std::fprintf(stderr, "prefixd run: %s\n", eo.status().ToString().c_str());
    return 2;
  }
  auto engine = engine::Engine::Create(*eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "prefixd run: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  auto prompt = a.messages_json.empty() ? (*engine)->PrepareText(a.prompt)
                                        : (*engine)->PrepareChat(a.messages_json, "", true);
  if (!prompt.ok()) {
    std::fprintf(stderr, "prefixd run: %s\n", prompt.status().ToString().c_str());
    return 2;
  }
  for (int64_t i = 0; i < a.repeat; ++i) {
    engine::CompletionRequest req;
    req.prompt = *prompt;
    req.max_tokens = int(a.n_predict);
    req.sampling.temperature = a.temperature;
    req.sampling.seed = uint64_t(a.seed);
    auto r = (*engine)->Complete(std::move(req));
    if (!r.ok()) {
      std::fprintf(stderr, "prefixd run: %s\n", r.status().ToString().c_str());
      return r.status().code() == Status::Code::kInvalidArgument ? 2 : 1;
    }
    std::printf("%s\n", r->text.c_str());
    if (a.stats) PrintUsage(*r);
  }
  return 0;
}

}  // namespace

int CmdRun(int argc, char** argv) {
  RunArgs a;
  Flags flags("run", "Generate text for a prompt with a GGUF model and print it.");
  // -m, --ctx and --cache-dir fill the engine flags' values in run's own words: run's context
  // is short, and its cache has no disk dir unless one is given.
  flags.String("-m,--model", &a.engine.model, "GGUF model file");
  flags.String("-p,--prompt", &a.prompt,
               "prompt text (special tokens such as <|im_start|> are parsed)");
  flags.String("--messages", &a.messages_json,
               "an OpenAI messages array (JSON) rendered with the chat template instead of -p");
  flags.Int("-n,--n-predict", &a.n_predict, "tokens to generate at most");
  flags.Int("-c,--ctx", &a.engine.ctx, "context length");
  engine::DeclareEngineFlags(flags, a.engine,
                             engine::EngineFlagSet::kBlockSize | engine::EngineFlagSet::kNoCache |
                                 engine::EngineFlagSet::kSpeculation);
  flags.String("--cache-dir", &a.engine.cache_dir, "cache directory (default: none, RAM only)");
  flags.Int("--repeat", &a.repeat, "run the prompt this many times (shows cache reuse)");
  flags.Bool("--stats", &a.stats, "print token usage and cache outcome on stderr");
  flags.Double("--temperature", &a.temperature, "sampling temperature; 0 is greedy");
  flags.Int("--seed", &a.seed, "sampling seed");
  return RunWithFlags(flags, argc, argv, [&] {
    if (a.engine.model.empty() || (a.prompt.empty() && a.messages_json.empty())) {
      std::fprintf(stderr, "prefixd run: -m/--model and -p/--prompt (or --messages) are required\n");
      return 2;
    }
    return Run(a);
  });
}

}  // namespace prefixd::cli
