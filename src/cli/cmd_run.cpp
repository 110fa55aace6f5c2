// prefixd run: prompts in, generated text out (greedy by default, the same every time).
// Several -p flags are not supported; instead --repeat N runs the same prompt N times through
// the cache (the second run shows the reuse), and --stats prints usage on stderr.
#include <cstdio>

#include "cli/commands.h"
#include "engine/engine.h"
#include "util/flags.h"

namespace prefixd::cli {

namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string messages_json;
  std::string cache_dir;
  int64_t n_predict = 32;
  int64_t ctx = 4096;  // run's own: a short prompt (the engine's default: 8192)
  int64_t block_size = engine::EngineOptions{}.block_size;
  int64_t repeat = 1;
  double temperature = 0.0;
  int64_t seed = 0;
  bool no_cache = false;
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
  engine::EngineOptions eo;
  eo.model_path = a.model;
  eo.cache_dir = a.cache_dir;
  eo.n_ctx_per_slot = uint32_t(a.ctx);
  eo.block_size = uint32_t(a.block_size);
  eo.cache_enabled = !a.no_cache;
  auto engine = engine::Engine::Create(eo);
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
  flags.String("-m,--model", &a.model, "GGUF model file");
  flags.String("-p,--prompt", &a.prompt,
               "prompt text (special tokens such as <|im_start|> are parsed)");
  flags.String("--messages", &a.messages_json,
               "an OpenAI messages array (JSON) rendered with the chat template instead of -p");
  flags.Int("-n,--n-predict", &a.n_predict, "tokens to generate at most");
  flags.Int("-c,--ctx", &a.ctx, "context length");
  flags.Int("--block-size", &a.block_size, "cache block size in tokens");
  flags.Bool("--no-cache", &a.no_cache, "turn the prompt cache fully off");
  flags.String("--cache-dir", &a.cache_dir, "cache directory (default: none, RAM only)");
  flags.Int("--repeat", &a.repeat, "run the prompt this many times (shows cache reuse)");
  flags.Bool("--stats", &a.stats, "print token usage and cache outcome on stderr");
  flags.Double("--temperature", &a.temperature, "sampling temperature; 0 is greedy");
  flags.Int("--seed", &a.seed, "sampling seed");
  return RunWithFlags(flags, argc, argv, [&] {
    if (a.model.empty() || (a.prompt.empty() && a.messages_json.empty())) {
      std::fprintf(stderr, "prefixd run: -m/--model and -p/--prompt (or --messages) are required\n");
      return 2;
    }
    return Run(a);
  });
}

}  // namespace prefixd::cli
